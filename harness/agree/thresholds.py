"""Agreement thresholds per comparison kind, from the engine descriptor.

``qualify.agreement.thresholds`` in ``engines/<engine>/engine.yaml`` holds one entry per kind of
comparison (the schema lists them): ``level`` (the same build, another CPU level), ``batch``
(one sequence alone against several in one batch), ``variant`` (another build of the same pin,
e.g. vulkan against cpu) and ``pin`` (another engine version). Each says why its numbers are
where they are, and whether a result outside them fails (``gate``) or is only reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.agree.stats import Summary
from harness.core.errors import ConfigError, UnknownNameError

#: The comparison kinds a descriptor may set thresholds for.
KINDS: tuple[str, ...] = ("level", "batch", "variant", "pin")


@dataclass(frozen=True, kw_only=True)
class Threshold:
    kind: str
    why: str
    gate: bool = True
    kld_mean: float | None = None
    """Mean KL(A || B) in nats may not exceed this."""
    kld_p99: float | None = None
    """The 99th percentile of the per-position KLD may not exceed this."""
    top1_min: float | None = None
    """The fraction of positions with the same most likely token may not fall below this."""
    ppl_ratio_max: float | None = None
    """Neither arm's perplexity may exceed the other's by more than this factor."""

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}

    def violations(self, s: Summary) -> list[str]:
        """What ``s`` breaks, one line each (empty: within every limit)."""
        out: list[str] = []
        if self.kld_mean is not None and s.kld_mean > self.kld_mean:
            out.append(f"mean KLD {s.kld_mean:.3g} > {self.kld_mean:.3g}")
        if self.kld_p99 is not None and s.kld_p99 > self.kld_p99:
            out.append(f"p99 KLD {s.kld_p99:.3g} > {self.kld_p99:.3g}")
        if self.top1_min is not None and s.top1 < self.top1_min:
            out.append(f"top-1 agreement {100 * s.top1:.2f}% < {100 * self.top1_min:.2f}%")
        if self.ppl_ratio_max is not None:
            worst = max(s.ppl_ratio, 1.0 / s.ppl_ratio) if s.ppl_ratio > 0 else float("inf")
            if worst > self.ppl_ratio_max:
                out.append(f"perplexity ratio {s.ppl_ratio:.4f} outside 1/{self.ppl_ratio_max:g}..{self.ppl_ratio_max:g}")
        return out


def thresholds(agreement: Mapping[str, Any], *, where: str = "engine.yaml") -> dict[str, Threshold]:
    """The thresholds of a descriptor's ``qualify.agreement`` section
    (:attr:`~harness.engine.qualify_settings.QualifySettings.agreement`); kinds it does not set are absent."""
    table = agreement.get("thresholds") or {}
    out: dict[str, Threshold] = {}
    for kind, entry in table.items():
        if kind not in KINDS:
            raise UnknownNameError("agreement comparison kind", kind, KINDS)
        try:
            out[kind] = Threshold(kind=kind, **entry)
        except TypeError as e:
            msg = f"{where}: qualify.agreement.thresholds.{kind}: {e}"
            raise ConfigError(msg) from e
    return out


def for_engine(engine: str) -> dict[str, Threshold]:
    from harness.engine.descriptor import load_engine
    from harness.engine.qualify_settings import qualify_settings

    spec = load_engine(engine)
    return thresholds(qualify_settings(spec).agreement, where=str(spec.root / "engine.yaml"))


def agreement_settings(engine: str) -> dict[str, Any]:
    """``qualify.agreement`` of the engine's descriptor, without the thresholds (window, tokens)."""
    from harness.engine.descriptor import load_engine
    from harness.engine.qualify_settings import qualify_settings

    raw = qualify_settings(load_engine(engine)).agreement
    return {k: v for k, v in raw.items() if k != "thresholds"}
