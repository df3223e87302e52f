"""Sampling parameters: typed, validated before they reach the engine."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.core.errors import InvalidRequestError
from harness.runtime.requests import LIMITS

_NUMBERS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")


def _type_problems(s: Sampling) -> list[str]:
    """Type errors first, so no comparison below meets a string or a NaN."""
    out = []
    for name in _NUMBERS:
        v = getattr(s, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            out.append(f"{name} must be a number, got {v!r:.40}")
        elif not math.isfinite(v):
            out.append(f"{name} must be finite, got {v}")
    for name, optional in (("top_k", False), ("max_tokens", True), ("seed", True), ("repeat_last_n", True)):
        v = getattr(s, name)
        if v is None and optional:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            out.append(f"{name} must be an integer, got {v!r:.40}")
    if not isinstance(s.ignore_eos, bool):
        out.append(f"ignore_eos must be true or false, got {s.ignore_eos!r:.40}")
    if s.grammar is not None and not isinstance(s.grammar, str):
        out.append(f"grammar must be a GBNF string, got {type(s.grammar).__name__}")
    if not isinstance(s.stop, (tuple, list, str)):
        out.append(f"stop must be a sequence of strings, got {type(s.stop).__name__}")
    return out



def _is_utf8(text: str) -> bool:
    """Whether ``text`` can go to the engine as UTF-8 (JSON's \\ud800 escapes make lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

@dataclass(frozen=True, kw_only=True)
class Sampling:
    """How to pick tokens. Defaults follow llama.cpp's."""

    temperature: float = 0.8
    """0 samples greedily."""
    top_p: float = 0.95
    """Nucleus mass in (0, 1]; 1 disables."""
    top_k: int = 40
    """0 = the whole vocabulary."""
    min_p: float = 0.05
    """Drop tokens below min_p x the top probability; 0 disables."""
    max_tokens: int | None = 256
    """At least 1; None = until the context is full (OpenAI's null). 0 is refused, as OpenAI does."""
    seed: int | None = None
    """None = a random seed per request."""
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    """1 disables."""
    repeat_last_n: int | None = None
    """How many recent tokens the penalties look at (-1: the whole context); None: the engine's default."""
    ignore_eos: bool = False
    """Keep generating past end-of-generation tokens."""
    stop: tuple[str, ...] = ()
    """Stop strings, matched across token boundaries and never emitted."""
    grammar: str | None = None
    """A GBNF grammar constraining the output."""

    def __post_init__(self) -> None:
        problems = _type_problems(self)
        if problems:
            raise InvalidRequestError("invalid sampling: " + "; ".join(problems))
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            problems.append(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            problems.append(f"top_k must be >= 0, got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            problems.append(f"min_p must be in [0, 1], got {self.min_p}")
        if self.max_tokens is not None and not 1 <= self.max_tokens <= LIMITS.max_tokens:
            problems.append(f"max_tokens must be in [1, {LIMITS.max_tokens}] (None = until the context is full), "
                            f"got {self.max_tokens}")
        if self.top_k > LIMITS.top_k:
            problems.append(f"top_k must be <= {LIMITS.top_k}, got {self.top_k}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not -2 <= v <= 2:
                problems.append(f"{name} must be in [-2, 2], got {v}")
        if self.repeat_last_n is not None and not -1 <= self.repeat_last_n < 2**31:
            problems.append(f"repeat_last_n must be in [-1, 2^31), got {self.repeat_last_n}")
        if self.seed is not None and not 0 <= self.seed < 2**32:
            problems.append(f"seed must be in [0, 2^32), got {self.seed}")
        if isinstance(self.stop, str) or any(not isinstance(s, str) or not s for s in self.stop):
            problems.append("stop must be a sequence of non-empty strings")
        elif len(self.stop) > LIMITS.stop_strings or any(len(s) > LIMITS.stop_chars for s in self.stop):
            problems.append(f"stop takes at most {LIMITS.stop_strings} strings of at most {LIMITS.stop_chars} characters")
        elif not all(_is_utf8(s) for s in self.stop):
            problems.append("stop is not valid Unicode text (a lone surrogate)")
        if self.grammar is not None and not _is_utf8(self.grammar):
            problems.append("grammar is not valid Unicode text (a lone surrogate)")
        if self.grammar is not None and len(self.grammar) > LIMITS.grammar_chars:
            problems.append(f"grammar is longer than {LIMITS.grammar_chars} characters")
        if problems:
            raise InvalidRequestError("invalid sampling: " + "; ".join(problems))

    @classmethod
    def make(cls, sampling: Sampling | dict[str, Any] | None = None, **overrides: Any) -> Sampling:
        """Merge a Sampling, a dict and keyword overrides; unknown keys are refused."""
        base: dict[str, Any] = {}
        if isinstance(sampling, Sampling):
            base = dataclasses.asdict(sampling)
        elif sampling:
            base = dict(sampling)
        base.update(overrides)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(base) - known)
        if unknown:
            from harness.core.errors import did_you_mean

            hint = did_you_mean(unknown[0], known)
            raise InvalidRequestError(f"unknown sampling parameter {unknown[0]!r}{hint}")
        stop = base.get("stop")
        if stop is None:
            base.pop("stop", None)
        elif isinstance(stop, str):  # OpenAI takes one stop string as well as a list
            base["stop"] = (stop,)
        elif isinstance(stop, (list, tuple)):
            base["stop"] = tuple(stop)
        return cls(**base)

    def to_core(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "min_p": self.min_p,
            "max_tokens": self.max_tokens or 0, "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty, "repetition_penalty": self.repetition_penalty,
            "ignore_eos": self.ignore_eos, "stop": list(self.stop),
        }
        if self.seed is not None:
            d["seed"] = self.seed
        if self.repeat_last_n is not None:
            d["penalty_last_n"] = self.repeat_last_n
        if self.grammar:
            d["grammar"] = self.grammar
        return d


#: A model config's sampling keys (``parameters:``, ``sampling.*``) that this API spells otherwise.
_CONFIG_SPELLINGS = {"repeat_penalty": "repetition_penalty"}


def config_sampling(values: Mapping[str, Any]) -> Sampling:
    """Request defaults from a model config's effective sampling parameters (``sampling.*`` of
    ``harness config show``, without the prefix): max_tokens 0 (up to the context) and seed -1
    (random per request) are None here.

    :raises InvalidRequestError: a value the runtime does not take, naming it.
    """
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = _CONFIG_SPELLINGS.get(key, key)
        if (name == "max_tokens" and value == 0) or (name == "seed" and value == -1):
            value = None
        out[name] = value
    try:
        return Sampling.make(out)
    except InvalidRequestError as e:
        raise InvalidRequestError(f"the model config's sampling defaults: {e}") from e
