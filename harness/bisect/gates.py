"""What decides whether a commit is good: a gate, evaluated on the commit's build against the good one.

- **speed** (``decode>=0.97``, ``prefill>=0.95``): the build's speed per token relative to the good
  build, decided by CPU simulation (:mod:`harness.bench.simulation`: instructions and estimated cycles
  under cachegrind, the same figures on any host). The target is the engine's own benchmark tool
  (``EngineImpl.old_pin_bench_arm``, e.g. the engine's bench program on ``artifact=DIR``). A ratio
  whose interval straddles the floor decides nothing: the commit is skipped, and says why.
- **agreement** (``kld<=0.01``, ``top1>=0.99``): the next-token distributions of the build against
  the good build's (``EngineImpl.compare_outputs``).
- **e2e** (``e2e:PATH`` or ``e2e:PATH::TEST``): an e2e spec, run with ``$HARNESS_ARTIFACT`` set to the
  commit's build; passing is good.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError

#: Gate kinds, and the metrics of each with the comparison that passes.
METRICS: dict[str, tuple[str, str]] = {"decode": ("speed", ">="), "prefill": ("speed", ">="),
                                       "kld": ("agreement", "<="), "top1": ("agreement", ">=")}

_GATE = re.compile(r"^\s*(?P<metric>[a-z0-9]+)\s*(?P<op>>=|<=)\s*(?P<value>[0-9]*\.?[0-9]+)\s*$")


@dataclass(frozen=True, kw_only=True)
class Gate:
    """One gate: ``kind`` (speed, agreement, e2e), its ``metric`` and threshold, or the spec it runs."""

    kind: str
    metric: str
    op: str = ""
    threshold: float = 0.0
    spec: str = ""

    @property
    def text(self) -> str:
        return f"e2e:{self.spec}" if self.kind == "e2e" else f"{self.metric}{self.op}{self.threshold:g}"

    def passes(self, value: float) -> bool:
        return value >= self.threshold if self.op == ">=" else value <= self.threshold

    @classmethod
    def parse(cls, text: str) -> Gate:
        """``decode>=0.97``, ``prefill>=0.95``, ``kld<=0.01``, ``top1>=0.99`` or ``e2e:PATH[::TEST]``."""
        if text.startswith("e2e:"):
            spec = text[4:]
            path = spec.split("::", 1)[0]
            if not path or not Path(path).exists():
                msg = f"--gate {text!r}: no spec file {path!r} (e2e:PATH or e2e:PATH::TEST, a file of an engine's e2e/)"
                raise UsageError(msg)
            return cls(kind="e2e", metric="e2e", spec=spec)
        m = _GATE.match(text)
        if m is None or m["metric"] not in METRICS:
            msg = (f"--gate {text!r} is not a gate: decode>=R or prefill>=R (speed relative to the good build, "
                   f"by CPU simulation, e.g. decode>=0.97), kld<=X or top1>=F (agreement with the good build's "
                   f"outputs, e.g. kld<=0.01), or e2e:PATH[::TEST] (an e2e spec)")
            raise UsageError(msg)
        kind, op = METRICS[m["metric"]]
        if m["op"] != op:
            msg = f"--gate {text!r}: {m['metric']} passes when it is {op} a threshold (e.g. {m['metric']}{op}{m['value']})"
            raise UsageError(msg)
        value = float(m["value"])
        if kind == "speed" and not 0 < value <= 2:
            msg = f"--gate {text!r}: a speed floor is a ratio to the good build (0 < R <= 2, e.g. 0.97: 3% slower fails)"
            raise UsageError(msg)
        if m["metric"] == "top1" and not 0 < value <= 1:
            msg = f"--gate {text!r}: top1 is a fraction of positions (0 < F <= 1, e.g. 0.99)"
            raise UsageError(msg)
        return cls(kind=kind, metric=m["metric"], op=op, threshold=value)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """A gate on one build: ``passed`` (None: the gate could not decide), the figure and its words."""

    passed: bool | None
    figure: float | None
    text: str
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "figure": self.figure, "text": self.text, "detail": self.detail}


def evaluate(gate: Gate, engine: str, good: Path, probe: Path, *, options: dict[str, Any], workdir: Path,
             sim_shape: str | None = None) -> Outcome:
    """``gate`` on the build ``probe`` against the good build ``good`` (artifact dirs)."""
    if gate.kind == "speed":
        return _speed(gate, engine, good, probe, options=options, workdir=workdir, sim_shape=sim_shape)
    if gate.kind == "agreement":
        return _agreement(gate, engine, good, probe, options=options, workdir=workdir)
    return _e2e(gate, probe)


def speed_kind(engine: str) -> str:
    """The bench arm kind a speed gate simulates: the engine's own benchmark tool on an artifact."""
    from harness.engine import registry
    from harness.engine.plugin import get_manager

    impl = registry.engines(get_manager()).get(engine)
    if impl is None or not impl.old_pin_bench_arm:
        msg = (f"engine {engine} names no benchmark tool of its artifacts (EngineImpl.old_pin_bench_arm): a speed "
               "gate cannot be simulated for it; use an agreement or e2e gate")
        raise UsageError(msg)
    return impl.old_pin_bench_arm


def _speed(gate: Gate, engine: str, good: Path, probe: Path, *, options: dict[str, Any], workdir: Path,
           sim_shape: str | None) -> Outcome:
    from harness.bench import simulation

    kind = speed_kind(engine)
    level = simulation.level_for_host()
    plan = simulation.SimPlan.parse(sim_shape) if sim_shape else simulation.SimPlan()
    a = simulation.target_for(kind, {**options, "engine": engine, "artifact": str(good), "name": "good"}, level=level)
    b = simulation.target_for(kind, {**options, "engine": engine, "artifact": str(probe), "name": "probe"}, level=level)
    workdir.mkdir(parents=True, exist_ok=True)
    fa, fb, seconds = _measure_against_good(simulation, a, b, plan, workdir)
    # compare() takes the percent the probe may be slower: a floor of 0.97 is 3%
    checks = simulation.compare(fa, fb, {gate.metric: (1.0 - gate.threshold) * 100.0})
    check = next((c for c in checks if c.metric == gate.metric), None)
    assert check is not None  # compare() checks every metric it is given a floor for
    passed = True if check.verdict == "passed" else False if check.verdict == "FAILED" else None
    detail = {"speed": check.speed, "interval": [check.lo, check.hi], "ir_ratio": check.ir_ratio,
              "decided_by": check.decided_by, "verdict": check.verdict,
              "good_cycles_per_token": check.a_cycles, "probe_cycles_per_token": check.b_cycles,
              "resolution_pct": check.resolution_pct, "seconds": round(seconds, 1), "level": level}
    text = (f"{gate.metric} {check.speed:.4f}x of good [{check.lo:.4f}, {check.hi:.4f}], instructions per token "
            f"{check.ir_ratio:.4f}x good's: {check.verdict}")
    return Outcome(passed=passed, figure=check.speed, text=text, detail=detail)


def _measure_against_good(simulation: Any, good: Any, probe: Any, plan: Any, workdir: Path) -> tuple[Any, Any, float]:
    """(good's figures, the probe's, seconds): the good build's runs are measured once per search and kept
    beside the probes' (``good-<key>.json``); each probe then runs alone, in the good runs' environment
    size (the stack's place, which :func:`harness.bench.simulation.measure` shares between arms)."""
    if simulation.identity(good, plan) == simulation.identity(probe, plan):
        msg = "the probe's build is the good build's (same artifact and command): nothing to compare"
        raise UsageError(msg)
    t0 = time.perf_counter()
    key = hashlib.sha256(json.dumps({"good": simulation.identity(good, plan), "plan": plan.as_dict()},
                                    sort_keys=True).encode()).hexdigest()[:16]
    kept = workdir.parent / f"good-{key}.json"
    passes = int(getattr(good, "prompt_passes", 1))
    if kept.is_file():
        data = json.loads(_own(kept))
        runs = [simulation.SimRun(role=r["role"], pn=r["pn"], gn=r["gn"], seconds=r["seconds"], env_pad=r["env_pad"],
                                  counts=simulation.Counts({k: v for k, v in r["counts"].items() if k != "cycles"}))
                for r in data["runs"]]
        fa = simulation.figures_from_runs(good.name, plan, runs, good.describe(), prompt_passes=passes)
        (fb,) = simulation.measure([probe], plan, workdir, env_pad=int(data["env_pad"]))
    else:
        fa, fb = simulation.measure([good, probe], plan, workdir)
        tmp = kept.with_suffix(".tmp")
        tmp.write_text(json.dumps({"env_pad": fa.runs[0].env_pad, "runs": [r.as_dict() for r in fa.runs]}) + "\n")
        tmp.replace(kept)
    return fa, fb, time.perf_counter() - t0


def _own(path: Path) -> str:
    """The good build's runs, kept by this module beside the bisect's probes."""
    return path.read_text()


def _agreement(gate: Gate, engine: str, good: Path, probe: Path, *, options: dict[str, Any], workdir: Path) -> Outcome:
    from harness.engine import registry
    from harness.engine.plugin import get_manager

    impl = registry.engines(get_manager()).get(engine)
    if impl is None or impl.compare_outputs is None:
        msg = (f"engine {engine} cannot compare the outputs of two of its builds (EngineImpl.compare_outputs): "
               "an agreement gate is not available for it; use a speed or e2e gate")
        raise UsageError(msg)
    workdir.mkdir(parents=True, exist_ok=True)
    got = impl.compare_outputs(good, probe, model=options.get("model"), workdir=workdir)
    value = float(got[gate.metric])
    passed = gate.passes(value)
    text = (f"kld {float(got['kld']):.6f}, top1 {float(got['top1']):.4f} over {got.get('positions', '?')} positions: "
            f"{'passed' if passed else 'FAILED'} ({gate.text})")
    return Outcome(passed=passed, figure=value, text=text, detail=dict(got))


def _e2e(gate: Gate, probe: Path) -> Outcome:
    from harness.qualify.e2e import run_specs

    path, _, test = gate.spec.partition("::")
    args = ["-q", *(["-k", test] if test else [])]
    res = run_specs([Path(path)], pytest_args=args, env={**os.environ, "HARNESS_ARTIFACT": str(probe)})
    if res.crashes:
        return Outcome(passed=False, figure=None, text=f"e2e crashed: {'; '.join(res.crashes)}",
                       detail=res.as_dict())
    if res.passed == 0 and not res.failed:
        return Outcome(passed=None, figure=None, text=f"e2e ran nothing ({res.summary()}): undecided",
                       detail=res.as_dict())
    passed = res.ok
    return Outcome(passed=passed, figure=float(res.passed), text=f"e2e {res.summary()}", detail=res.as_dict())
