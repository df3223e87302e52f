"""A deterministic fake bench arm: computed timings, no model, no sleeping.

Its numbers come from a seeded RNG around configured base speeds, so tests of
the runner, the statistics and the reports do not depend on timing noise. The
knobs let a test make one side slower, inject an outlier block or a drift.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
from dataclasses import dataclass
from typing import Any

from harness import __version__
from harness.core.errors import BenchError, did_you_mean


@dataclass(frozen=True, kw_only=True)
class FakeOptions:
    """Options of the ``fake`` arm kind (``--a fake:slowdown=1.1,seed=3``)."""

    seed: int = 0
    """RNG seed; the two roles (A, B) draw from distinct streams of it."""
    decode_tps: float = 25.0
    """Per-sequence decode speed at concurrency 1, tokens/s."""
    prefill_tps: float = 1000.0
    """Prompt processing speed, tokens/s (TTFT = pn / prefill_tps)."""
    slowdown: float = 1.0
    """Every time is multiplied by this (1.10 = 10% slower)."""
    noise: float = 0.01
    """Relative standard deviation of each number (log-normal)."""
    contention: float = 0.15
    """Per-sequence slowdown per extra concurrent sequence."""
    drift: float = 0.0
    """Relative slowdown added per block (0.02 = each block 2% slower than the one before)."""
    process_sd: float = 0.0
    """Relative standard deviation of a per-process offset: each worker process of the arm draws one
    (log-normal) and keeps it for its life, as a real process keeps its memory layout."""
    outlier_block: int = -1
    """Block whose measurements are ``outlier_factor`` times slower (-1 = none)."""
    outlier_factor: float = 3.0
    model_bytes: int = 94_000_000
    """Bytes read per decoded token (the roofline uses it); default about SmolLM2-135M Q4_1."""
    n_params: int = 134_515_008
    """Parameters (2 FLOPs each per prompt token for the compute roofline)."""
    fail_in: str = ""
    """Raise in ``create``, ``warmup`` or ``measure`` (tests error paths)."""
    threads: int = 0
    """Compute threads (recorded like a real arm's; the fake's numbers do not depend on it)."""

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> FakeOptions:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in options.items():
            if key.startswith("_"):
                continue
            if key not in fields:
                msg = f"unknown option {key!r} for bench arm kind 'fake'{did_you_mean(key, fields)}"
                msg += f" (known: {', '.join(fields)})"
                raise BenchError(msg)
            kind: type[Any] = type(fields[key].default)
            try:
                kwargs[key] = kind(value)
            except (TypeError, ValueError) as e:
                msg = f"fake arm option {key}={value!r}: expected {kind.__name__}"
                raise BenchError(msg) from e
        opts = cls(**kwargs)
        if min(opts.decode_tps, opts.prefill_tps, opts.slowdown, opts.outlier_factor) <= 0:
            msg = "fake arm: decode_tps, prefill_tps, slowdown and outlier_factor must be positive"
            raise BenchError(msg)
        return opts


class FakeArm:
    """Implements the :class:`harness.bench.arms.Arm` protocol with computed numbers."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.opts = FakeOptions.from_options(options)
        self.role = str(options.get("_role", "A"))
        if self.opts.fail_in == "create":
            msg = "fake arm: failing in create as configured (fail_in=create)"
            raise BenchError(msg)
        self.process = int(options.get("_process", 0))
        # str seeds are hashed with sha512 by random.Random: stable across runs and processes
        seed = f"harness-fake:{self.opts.seed}:{self.role}" + (f":{self.process}" if self.process else "")
        self._rng = random.Random(seed)
        self._offset = math.exp(random.Random(seed + ":process").gauss(0.0, self.opts.process_sd))
        self._calls: dict[int, int] = {}
        self.warmed = False
        self._warming = False

    def warmup(self) -> None:
        if self.opts.fail_in == "warmup":
            msg = "fake arm: failing in warmup as configured (fail_in=warmup)"
            raise BenchError(msg)
        self.warmed = True
        self._warming = True  # the runner's discarded warm-up measurement comes next

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
        o = self.opts
        if o.fail_in == "measure":
            msg = "fake arm: failing in measure as configured (fail_in=measure)"
            raise BenchError(msg)
        if self._warming:  # not a block of its own: keeps drift and outlier blocks where they were
            self._warming = False
            block = self.process
        else:
            block = self.process + self._calls.get(concurrency, 0)
            self._calls[concurrency] = self._calls.get(concurrency, 0) + 1
        slow = o.slowdown * self._offset * (1.0 + o.drift) ** block
        if block == o.outlier_block:
            slow *= o.outlier_factor
        per_seq = o.decode_tps / (1.0 + o.contention * (concurrency - 1)) / slow
        # concurrent prompts share the prefill: the last one waits for all of them
        ttft = pn * concurrency / o.prefill_tps * slow * self._jitter()
        decode = per_seq * self._jitter()
        aggregate = per_seq * concurrency * self._jitter()
        return {"ttft_s": ttft, "decode_tps": decode, "aggregate_tps": aggregate,
                "prefill_tps": pn * concurrency / ttft, "decode_s": gn / decode,
                # what the runner gave this process: its environment padding (see harness.bench.arms)
                "env_pad_bytes": len(os.environ.get("HARNESS_BENCH_ENV_PAD", ""))}

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "fake",
            "engine": "fake",
            "pin": f"fake-{__version__}",
            "versions": {"harness": __version__},
            "options": dataclasses.asdict(self.opts),
            "model": {"name": "fake-135M", "bytes": self.opts.model_bytes, "n_params": self.opts.n_params},
        }

    def close(self) -> None:
        self._calls.clear()

    def _jitter(self) -> float:
        if self.opts.noise <= 0:
            return 1.0
        return math.exp(self._rng.gauss(0.0, self.opts.noise))
