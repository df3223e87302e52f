"""Engine selection (SPEC.md section 3): every engine plugin says yes or why not.

Each registered engine answers through its ``match(model, host)`` (see
:mod:`harness.engine.registry`) with a :class:`~harness.core.types.MatchResult`; selection is transparent:
``harness select`` shows the chosen engine and variant and every rejection's
reason. Also here: the CUDA-version -> GPU wheel index mapping used when
installing variant wheels. LocalAI backend names resolve through ``localai.yaml``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pluggy

from harness.config.facts import model_facts
from harness.config.localai import BackendVerdict, resolve_backend
from harness.config.model import ModelConfig
from harness.core.types import HostInfo, MatchResult

# ---------------------------------------------------------------------------
# CUDA -> wheel index
# ---------------------------------------------------------------------------

_CUDA = re.compile(r"^\D*?(\d+)(?:\.(\d+))?")


def cuda_wheel_index(cuda_version: str | None) -> str | None:
    """GPU wheel index for a CUDA runtime: 13.x -> ``cu132``, >= 12.8 -> ``cu128``.

    Anything else (12.6, 11.8, unparsable, no CUDA) -> None: use the default CPU index.
    """
    if not cuda_version:
        return None
    m = _CUDA.match(cuda_version.strip())
    if m is None:
        return None
    version = (int(m.group(1)), int(m.group(2) or 0))
    if version[0] == 13:
        return "cu132"
    if version >= (12, 8):
        return "cu128"
    return None


# ---------------------------------------------------------------------------
# selection
# ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The outcome of asking every engine about one model."""

    chosen: MatchResult | None
    results: tuple[MatchResult, ...]
    facts: dict[str, Any]
    declared: str | None = None
    backend: BackendVerdict | None = None
    """What ``declared`` resolves to (LocalAI's names included)."""

    @property
    def reason(self) -> str:
        """Why nothing was chosen ("" when something was)."""
        if self.chosen is not None:
            return ""
        if self.declared is not None:
            verdict = self.backend
            engine = verdict.engine if verdict is not None else self.declared
            mine = [r for r in self.results if r.engine == engine]
            if verdict is not None and verdict.kind != "engine":
                return verdict.message
            if not mine:
                return (f"backend {self.declared!r} is not a known engine (no plugin registers it and "
                        "no engine descriptor has that name)")
            named = repr(self.declared) if engine == self.declared else f"{self.declared!r} ({engine})"
            return f"backend {named} rejects this model: {mine[0].reason}"
        if not self.results:
            return "no engine plugin is registered"
        return "no engine can serve this model here"

    def to_json(self) -> dict[str, Any]:
        def one(r: MatchResult) -> dict[str, Any]:
            return {"engine": r.engine, "ok": r.ok, "variant": r.variant, "reason": r.reason}

        return {"chosen": one(self.chosen) if self.chosen else None, "declared": self.declared,
                "engine": self.backend.engine if self.backend is not None else None,
                "reason": self.reason, "results": [one(r) for r in self.results], "facts": self.facts}


def engine_names(pm: pluggy.PluginManager, described: Iterable[str] = ()) -> list[str]:
    """Registered engine names, in registration order, then engines that only have a
    descriptor (``described``), without repeats."""
    from harness.engine import registry

    out = list(registry.names(pm))
    return out + [n for n in dict.fromkeys(described) if n not in out]


def ask_engines(facts: dict[str, Any], host: HostInfo, pm: pluggy.PluginManager,
                described: Iterable[str] = ()) -> list[MatchResult]:
    """One answer per engine; an engine nobody answers for, or whose plugin fails, is a rejection.

    An engine in ``described`` that no plugin registers is known (a descriptor exists) but
    cannot serve models: its rejection says so.
    """
    from harness.engine import registry

    registered = registry.engines(pm)
    results: list[MatchResult] = []
    for name in engine_names(pm, described):
        impl = registered.get(name)
        if impl is None:
            results.append(MatchResult(engine=name, ok=False,
                                       reason="the engine has a descriptor but no plugin yet: it cannot serve "
                                              "models (its configs are checked against the shared schema only)"))
            continue
        answer: object = None
        if impl.match is not None:
            try:
                answer = impl.match(facts, host)
            except Exception as e:  # one broken engine must not hide the others' answers
                answer = MatchResult(engine=name, ok=False, reason=f"match hook failed: {e}")
        if not isinstance(answer, MatchResult):
            answer = MatchResult(engine=name, ok=False, reason="no plugin answered for this engine")
        results.append(answer)
    return results


def refuse_unrendered_families(config: ModelConfig, results: list[MatchResult],
                               pm: pluggy.PluginManager) -> list[MatchResult]:
    """A video config's family, resolved per engine (its ``video_family``, else the engine's): an
    engine that accepted the model but does not render that family is a rejection saying so."""
    from harness.config.options import config_options
    from harness.config.video_rules import family_refusal

    opts = config_options({"options": list(config.options), "engine_args": dict(config.engine_args)})
    if not opts.video_engaged:
        return results
    declared = opts.get("video_family")
    out: list[MatchResult] = []
    for r in results:
        why = family_refusal(r.engine, declared if isinstance(declared, str) else None, pm) if r.ok else None
        out.append(MatchResult(engine=r.engine, ok=False, reason=why) if why else r)
    return out


def choose(results: Iterable[MatchResult], declared: str | None) -> MatchResult | None:
    """The declared backend if it accepts, else (nothing declared) the first that accepts."""
    for r in results:
        if r.ok and (declared is None or r.engine == declared):
            return r
    return None


def select_engine(
    config: ModelConfig,
    host: HostInfo,
    *,
    pm: pluggy.PluginManager | None = None,
    models_dir: Path | None = None,
    described: Iterable[str] | None = None,
) -> Selection:
    """Ask every engine about ``config``'s model on ``host``.

    With the default plugin manager, engines that only have a descriptor are listed too (as
    rejections that say why); a caller's own ``pm`` is its own world unless ``described`` is given.
    """
    if pm is None:
        from harness.engine.descriptor import engine_names as descriptor_names
        from harness.engine.plugin import get_manager

        pm = get_manager()
        described = descriptor_names() if described is None else described
    facts = model_facts(config, models_dir)
    results = refuse_unrendered_families(config, ask_engines(facts, host, pm, described or ()), pm)
    verdict = resolve_backend(config.backend, engine_names(pm, described or ())) if config.backend else None
    if verdict is not None and verdict.engine is None:
        chosen = None  # a LocalAI backend this harness does not build, or an unknown name
    else:
        chosen = choose(results, verdict.engine if verdict is not None else None)
    return Selection(chosen=chosen, results=tuple(results), facts=facts, declared=config.backend,
                     backend=verdict)
