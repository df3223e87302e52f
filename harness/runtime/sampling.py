"""Sampling parameters: typed, validated before they reach the engine."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from harness.errors import InvalidRequestError


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
    max_tokens: int = 256
    """0 = until the context is full."""
    seed: int | None = None
    """None = a random seed per request."""
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    """1 disables."""
    ignore_eos: bool = False
    """Keep generating past end-of-generation tokens."""
    stop: tuple[str, ...] = ()
    """Stop strings, matched across token boundaries and never emitted."""
    grammar: str | None = None
    """A GBNF grammar constraining the output."""

    def __post_init__(self) -> None:
        problems = []
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            problems.append(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            problems.append(f"top_k must be >= 0, got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            problems.append(f"min_p must be in [0, 1], got {self.min_p}")
        if self.max_tokens < 0:
            problems.append(f"max_tokens must be >= 0 (0 = until the context is full), got {self.max_tokens}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not -2 <= v <= 2:
                problems.append(f"{name} must be in [-2, 2], got {v}")
        if self.seed is not None and not 0 <= self.seed < 2**32:
            problems.append(f"seed must be in [0, 2^32), got {self.seed}")
        if isinstance(self.stop, str) or any(not isinstance(s, str) or not s for s in self.stop):
            problems.append("stop must be a sequence of non-empty strings")
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
            from harness.errors import did_you_mean

            hint = did_you_mean(unknown[0], known)
            raise InvalidRequestError(f"unknown sampling parameter {unknown[0]!r}{hint}")
        if "stop" in base and base["stop"] is not None and not isinstance(base["stop"], str):
            base["stop"] = tuple(base["stop"])
        return cls(**base)

    def to_core(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "min_p": self.min_p,
            "max_tokens": self.max_tokens, "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty, "repetition_penalty": self.repetition_penalty,
            "ignore_eos": self.ignore_eos, "stop": list(self.stop),
        }
        if self.seed is not None:
            d["seed"] = self.seed
        if self.grammar:
            d["grammar"] = self.grammar
        return d
