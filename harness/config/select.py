"""Engine selection (SPEC.md section 3): every engine plugin says yes or why not.

Each plugin answers ``harness_engine_match(engine, model, host)`` for its own
engines with a :class:`~harness.types.MatchResult`; selection is transparent:
``harness select`` shows the chosen engine and variant and every rejection's
reason. Also here: the CUDA-version -> GPU wheel index mapping used when
installing variant wheels, and the per-engine translation of speculative
decoding with the draft family/size rule (spellings are data: ``localai.yaml``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pluggy

from harness.config.facts import model_facts
from harness.config.localai import BackendVerdict, resolve_backend, vocabulary
from harness.config.model import ModelConfig
from harness.errors import ConfigError, UnknownNameError
from harness.types import HostInfo, MatchResult

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
                return f"backend {self.declared!r} is not a registered engine plugin"
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


def engine_names(pm: pluggy.PluginManager) -> list[str]:
    """Engine names of every registered plugin, in registration order, without repeats."""
    out: list[str] = []
    # pluggy calls the last-registered plugin first; built-ins were registered first.
    for group in reversed(pm.hook.harness_engine_names()):
        out += [n for n in group or () if n not in out]
    return out


def ask_engines(facts: dict[str, Any], host: HostInfo, pm: pluggy.PluginManager) -> list[MatchResult]:
    """One answer per engine; an engine nobody answers for, or whose plugin fails, is a rejection."""
    results: list[MatchResult] = []
    for name in engine_names(pm):
        try:
            answers = [r for r in pm.hook.harness_engine_match(engine=name, model=facts, host=host)
                       if isinstance(r, MatchResult)]
        except Exception as e:  # one broken plugin must not hide the others' answers
            answers = [MatchResult(engine=name, ok=False, reason=f"match hook failed: {e}")]
        if not answers:
            answers = [MatchResult(engine=name, ok=False, reason="no plugin answered for this engine")]
        results.append(next((a for a in answers if a.ok), answers[0]))
    return results


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
) -> Selection:
    """Ask every engine plugin about ``config``'s model on ``host``."""
    if pm is None:
        from harness.plugin import get_manager

        pm = get_manager()
    facts = model_facts(config, models_dir)
    results = ask_engines(facts, host, pm)
    verdict = resolve_backend(config.backend, engine_names(pm)) if config.backend else None
    if verdict is not None and verdict.engine is None:
        chosen = None  # a LocalAI backend this harness does not build, or an unknown name
    else:
        chosen = choose(results, verdict.engine if verdict is not None else None)
    return Selection(chosen=chosen, results=tuple(results), facts=facts, declared=config.backend,
                     backend=verdict)


# ---------------------------------------------------------------------------
# speculative decoding
# ---------------------------------------------------------------------------


def speculative_spelling(engine: str) -> dict[str, Any] | None:
    """How ``engine`` (a harness engine or a LocalAI backend name) spells speculative decoding."""
    v = vocabulary()
    name = v.speculative_engines.get(engine)
    if name is None:
        entry = v.backend(engine)
        name = entry.speculative if entry is not None else None
    return v.speculative_spellings.get(name) if name else None


def speculative_names() -> list[str]:
    """Every engine / backend name whose speculative decoding is known."""
    v = vocabulary()
    return [*v.speculative_engines, *(n for n in v.backends if speculative_spelling(n) is not None)]


def _fill(template: Any, values: dict[str, Any]) -> Any:
    if isinstance(template, dict):
        return {k: _fill(v, values) for k, v in template.items()}
    if isinstance(template, str) and template.startswith("{") and template.endswith("}"):
        return values.get(template[1:-1], template)
    return template


def _norm(value: Any) -> str | None:
    return str(value).strip().lower() if value not in (None, "") else None


def check_draft(target: dict[str, Any], draft: dict[str, Any]) -> None:
    """Refuse a draft whose family or size differs from the target's (never silently degrade)."""
    for key in ("family", "size"):
        t, d = _norm(target.get(key)), _norm(draft.get(key))
        if t is None or d is None:
            msg = (f"cannot confirm the draft model matches the target: {key} unknown "
                   f"(target {target.get(key)!r}, draft {draft.get(key)!r}); refusing the draft. "
                   "Use a draft with GGUF metadata (general.basename, general.size_label) or name it")
            raise ConfigError(msg)
        if t != d:
            msg = (f"draft model {key} {draft.get(key)!r} does not match the target's "
                   f"{target.get(key)!r}; a mismatched draft is refused, not silently degraded. "
                   "Use the target's own MTP draft")
            raise ConfigError(msg)


def translate_speculative(
    engine: str,
    *,
    method: str = "mtp",
    num_tokens: int = 1,
    user_config: dict[str, Any] | None = None,
    target: dict[str, Any] | None = None,
    draft: dict[str, Any] | None = None,
    draft_path: str | None = None,
) -> dict[str, Any]:
    """Launch arguments enabling speculative decoding on ``engine``.

    The spelling per engine is data (``speculative_spellings`` in ``localai.yaml``: a
    nested ``speculative_config {method: mtp, ...}``, an EAGLE-style ``NEXTN``, a
    ``draft-mtp`` spec type). An explicit ``user_config`` is the engine's own spelling
    and is kept as is. When ``draft`` facts are given they must match ``target``'s family
    and size, else :class:`ConfigError`. Measure before enabling: it pays only when
    a draft step is cheap next to a target step.
    """
    spelling = speculative_spelling(engine)
    if spelling is None:
        raise UnknownNameError("engine for speculative decoding", engine, speculative_names())
    if draft is not None:
        check_draft(target or {}, draft)
    if num_tokens < 1:
        msg = f"speculative decoding needs at least 1 draft token, found {num_tokens}"
        raise ConfigError(msg)
    wrap = spelling.get("wrap")
    if user_config is not None:
        return {wrap: dict(user_config)} if wrap else dict(user_config)
    if method != "mtp" and spelling.get("methods") != "any":
        msg = (f"{engine}: only method 'mtp' translates automatically, found {method!r}; "
               "give the engine's own speculative settings explicitly")
        raise ConfigError(msg)
    out: dict[str, Any] = _fill(spelling["mtp"], {"method": method, "tokens": num_tokens,
                                                  "tokens_plus_one": num_tokens + 1})
    if draft_path and spelling.get("draft"):
        out[spelling["draft"]] = draft_path
    return {wrap: out} if wrap else out
