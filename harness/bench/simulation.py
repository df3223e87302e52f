"""CPU simulation: an arm measured by counting what it executes, not by timing it.

Wall-clock ABBA cannot resolve a few percent on a shared 2-core VM (per-block sd ~3%, the host's
speed drifting ~15% within an hour). This instrument runs one request of each arm under Valgrind's
cachegrind, single-threaded, at a CPU level Valgrind executes, and reads what was executed:
instructions (``Ir``) and the misses of a simulated L1/last-level cache. They combine into one
figure, :data:`FORMULA` (KCachegrind's cycle estimate without branch simulation; CodSpeed's "CPU
simulation" instrument gates pull requests on shared runners the same way). The figure does not move
with the host's load: it depends on the binary, its input and its environment only.

Per token, a figure is the difference between two run lengths (:class:`SimPlan`): prefill is
``(run(P2, G1) - run(P1, G1)) / (P2 - P1)``, decode ``(run(P1, G2) - run(P1, G1)) / (G2 - G1)``, so
start-up, model load and whatever a process does once cancel out. Every run of one measurement, of
both arms, sees the same environment size (random per measurement, 0-4 KiB): the stack's place moves
a whole run's simulated misses by up to ~12 M estimated cycles, and sharing it keeps that out of the
differences (measured 2026-12-04, binding, SmolLM2 at P8/P40, G2/G10, three sizes: per-token figures
within 0.26%). Identical runs still differ, and not symmetrically. Most of the time by ~0.3 M
instructions: glibc's allocator takes other paths as the engine's threads interleave (cg_diff of two
identical tiny-model runs, 2026-12-06: 82% of it in ``_int_malloc``, ``unlink_chunk`` and realloc's
copies; a fixed hash seed, one malloc arena, no tcache, fair scheduling and no ASLR each left it at
0.25-0.54 M). Sometimes by 3-5 M more: Python's type-attribute cache, indexed by object addresses,
misses more when the heap lands elsewhere (``_Py_dict_lookup``, ``find_name_in_mro``). A run never
executes less than its luckiest layout, so every shape runs ``1 + repeats`` times
(:attr:`SimPlan.repeats`, default 1) and each shape's figure is its minimum per event. The jitter is
read from the differences between runs of one shape, pooled over both arms, by their median (an
outlier moves a standard deviation, not a median: one 4 M run among twelve widened an A/A interval from
a few percent to +-37%): sigma = median |difference| / (0.6745 sqrt 2). A ratio's interval is Student's t
at the confidence asked (99%; as many degrees of freedom as differences) on that sigma over both arms'
spans. Measured on synthetic Gaussian jitter: 99% intervals miss 1.0 in <= 1% of A/A draws; with one run
in ten 13 sigma out, two runs per shape cover 97% and three runs 99.7% (a shape whose runs are all
outliers keeps one). Spans must dwarf the outliers: on the 0.5 MB tiny model's 8-token spans (1.7 M
instructions) an A/A once read 2.87x; SmolLM2's per-token figures are ~10^8 instructions.

A gate is decided on two figures per token, each with its own resolution: the estimated cycles and
the instructions. Whichever resolves below the floor fails it; it passes when both resolve at or above
it. The instruction count is the code path itself; the estimate charges each simulated last-level
miss 100 cycles, which a hardware prefetcher mostly hides when weights stream: at decode, 63% of
SmolLM2's estimate is misses, and a change that executes 2% more instructions per token moves the
estimate by 0.7% only.

The cache geometry is pinned (:data:`CACHE`), not read from the host: the same binary and input give
the same figure on a Zen 3, a Zen 4 or a Sapphire Rapids. Valgrind 3.19 (Debian 12) decodes AVX2,
FMA and F16C but no AVX-512 and no AMX: on x86-64 an arm runs :data:`X86_LEVEL`; the report says so.

Blind spots, by construction: threads and OpenMP teams (one thread only), memory bandwidth and
latency beyond the miss counts, the device, and time spent waiting (a ``sleep`` costs no
instruction). Wall-clock ABBA runs beside it for those.

Arms are simulated through targets their engine provides (``BenchArmKind.sim_target``; the
``harness_sim_target`` hook for engine-free kinds): a
target names the command that runs one request of ``pn`` prompt and ``gn`` generated tokens.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.core import progress
from harness.core.errors import BenchError, HostError

#: The instruments ``harness bench --instrument`` knows.
INSTRUMENTS: tuple[str, ...] = ("walltime", "simulation", "counters")

#: Cache geometry (bytes, ways, line bytes), the same on every host: a 32 KiB 8-way L1 for code and
#: for data (every x86 core since Haswell) and an 8 MiB 16-way last level (Valgrind needs a power-of-two
#: set count; a core's share of an L3 is of that order).
CACHE: dict[str, tuple[int, int, int]] = {"I1": (32768, 8, 64), "D1": (32768, 8, 64), "LL": (8 << 20, 16, 64)}
#: Cycles an L1 miss (served by the last level) and a last-level miss (served by memory) add.
L1_MISS_CYCLES = 10
LL_MISS_CYCLES = 100
FORMULA = (f"estimated cycles = Ir + {L1_MISS_CYCLES} x (I1mr + D1mr + D1mw) + {LL_MISS_CYCLES} x (ILmr + DLmr + DLmw)"
           " (KCachegrind's cycle estimate, no branch simulation)")
#: The events cachegrind writes with cache simulation on.
EVENTS: tuple[str, ...] = ("Ir", "I1mr", "ILmr", "Dr", "D1mr", "DLmr", "Dw", "D1mw", "DLmw")
#: The x86-64 CPU level an arm runs under simulation: the highest Valgrind 3.19 executes.
X86_LEVEL = "haswell"
#: Seconds one simulated run may take before it is stopped.
RUN_TIMEOUT_S = 3600.0
#: The most repeats of each shape a plan takes.
MAX_REPEATS = 16
#: The confidence of a simulated ratio's interval (Student's t on the pooled run-to-run jitter).
CONFIDENCE = 0.99
#: The median of |N(0, 2 sigma^2)| is this many sigma.
_MEDIAN_ABS_DIFF = 0.6744897501960817 * 2**0.5


#: The three shapes of a plan, by role.
SHAPES: tuple[str, ...] = ("base", "prompt", "generation")


def shape_of(role: str) -> str:
    """The shape a run's role belongs to: ``prompt3`` (the third run of the prompt shape) -> ``prompt``."""
    return role.rstrip("0123456789")


def _t(confidence: float, dof: int) -> float:
    from scipy.stats import t as student

    return float(student.ppf(1.0 - (1.0 - confidence) / 2.0, dof))


def level_for_host() -> str | None:
    """The CPU level arms run under simulation here: :data:`X86_LEVEL` on x86-64; elsewhere None
    (the engine's own pick under Valgrind's CPUID)."""
    return X86_LEVEL if platform.machine().lower() in ("x86_64", "amd64") else None


def valgrind() -> str:
    """Valgrind's path, or a :class:`HostError` saying how to install it."""
    exe = shutil.which("valgrind")
    if not exe:
        msg = ("the simulation instrument needs Valgrind (cachegrind), which is not on PATH: "
               "bash scripts/install-system-deps.sh installs Debian's valgrind; or run --instrument walltime")
        raise HostError(msg)
    return exe


def valgrind_version() -> str:
    r = subprocess.run([valgrind(), "--version"], capture_output=True, text=True, check=False, timeout=60)
    return r.stdout.strip() or r.stderr.strip()


# ---------------------------------------------------------------------------
# counts
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """Cachegrind's totals for one run (or a per-token difference of two)."""

    values: Mapping[str, float]

    def __getitem__(self, event: str) -> float:
        return float(self.values.get(event, 0.0))

    @property
    def cycles(self) -> float:
        """:data:`FORMULA`."""
        l1 = self["I1mr"] + self["D1mr"] + self["D1mw"]
        ll = self["ILmr"] + self["DLmr"] + self["DLmw"]
        return self["Ir"] + L1_MISS_CYCLES * l1 + LL_MISS_CYCLES * ll

    def minus(self, other: Counts) -> Counts:
        return Counts({e: self[e] - other[e] for e in EVENTS})

    def scaled(self, factor: float) -> Counts:
        return Counts({e: self[e] * factor for e in EVENTS})

    def as_dict(self) -> dict[str, float]:
        return {**{e: self[e] for e in EVENTS}, "cycles": self.cycles}


_SUMMARY = re.compile(r"^summary:\s*(.*)$", re.MULTILINE)
_EVENTS_LINE = re.compile(r"^events:\s*(.*)$", re.MULTILINE)


def parse_cachegrind(text: str) -> Counts:
    """The totals of a ``cachegrind.out`` file: its ``events:`` names and ``summary:`` numbers."""
    ev, summ = _EVENTS_LINE.search(text), _SUMMARY.search(text)
    if ev is None or summ is None:
        msg = "expected a cachegrind output file with 'events:' and 'summary:' lines; found neither (did valgrind run?)"
        raise BenchError(msg)
    names, numbers = ev.group(1).split(), summ.group(1).split()
    if len(names) != len(numbers):
        msg = f"cachegrind summary has {len(numbers)} numbers for {len(names)} events: {summ.group(0)!r}"
        raise BenchError(msg)
    values = dict(zip(names, (float(n) for n in numbers), strict=True))
    if "D1mr" not in values:
        msg = "cachegrind ran without cache simulation (no D1mr event); expected --cache-sim=yes"
        raise BenchError(msg)
    return Counts(values)


# ---------------------------------------------------------------------------
# targets and plans
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SimCommand:
    """One request of an arm as a command line: what runs under Valgrind."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    """The whole environment of the command (not added to the caller's)."""


@runtime_checkable
class SimTarget(Protocol):
    """What a ``harness_sim_target`` implementation returns."""

    name: str

    def command(self, pn: int, gn: int) -> SimCommand:
        """A command running one request of ``pn`` prompt and ``gn`` generated tokens (greedy), one
        thread, at the level the target was asked for, then exiting."""
        ...

    def describe(self) -> dict[str, Any]:
        """What it runs: engine, pin, artifact or binding, CPU level, the command's form."""
        ...


@dataclass(frozen=True, kw_only=True)
class SimPlan:
    """The run lengths whose differences give a per-token figure."""

    p1: int = 32
    p2: int = 96
    g1: int = 4
    g2: int = 20
    repeats: int = 1
    """More runs of every shape, for the run-to-run jitter (the resolution) and the minimum each figure
    takes; 0 (a study that repeats whole measurements instead) leaves the resolution at 0: each ratio
    is then a point."""

    def __post_init__(self) -> None:
        if not (0 < self.p1 < self.p2 and 0 < self.g1 < self.g2) or not 0 <= self.repeats <= MAX_REPEATS:
            msg = (f"expected simulation shapes 0 < P1 < P2 and 0 < G1 < G2 and 0-{MAX_REPEATS} repeats, found "
                   f"P1={self.p1} P2={self.p2} G1={self.g1} G2={self.g2} repeats={self.repeats}; "
                   f"e.g. --sim-shape 32,96,4,20 (or 32,96,4,20,2: every shape three times)")
            raise BenchError(msg)

    @classmethod
    def parse(cls, text: str) -> SimPlan:
        """``P1,P2,G1,G2[,REPEATS]``."""
        try:
            nums = [int(x) for x in text.split(",")]
            if len(nums) not in (4, 5):
                raise ValueError(text)
        except ValueError:
            msg = (f"expected --sim-shape P1,P2,G1,G2[,REPEATS] (four or five integers), found {text!r}; "
                   f"e.g. 32,96,4,20")
            raise BenchError(msg) from None
        p1, p2, g1, g2 = nums[:4]
        return cls(p1=p1, p2=p2, g1=g1, g2=g2, repeats=nums[4] if len(nums) == 5 else 1)

    def shapes(self) -> list[tuple[str, int, int]]:
        """(role, pn, gn): the base run, the longer prompt, the longer generation; then each again
        ``repeats`` times (``base2``, ``prompt2``, ``generation2``, ``base3``, ...)."""
        shapes = [("base", self.p1, self.g1), ("prompt", self.p2, self.g1), ("generation", self.p1, self.g2)]
        return [(role if n == 1 else f"{role}{n}", pn, gn) for n in range(1, self.repeats + 2) for role, pn, gn in shapes]

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class SimRun:
    role: str
    pn: int
    gn: int
    counts: Counts
    seconds: float
    env_pad: int

    def as_dict(self) -> dict[str, Any]:
        return {"role": self.role, "pn": self.pn, "gn": self.gn, "counts": self.counts.as_dict(),
                "seconds": round(self.seconds, 2), "env_pad": self.env_pad}


@dataclass(frozen=True, kw_only=True)
class ArmFigures:
    """One arm under simulation: per-token counts and the instrument's resolution for each."""

    name: str
    runs: tuple[SimRun, ...]
    prefill: Counts
    decode: Counts
    resolution_pct: Mapping[str, float]
    """Metric -> this arm's own per-token half-width in estimated cycles at :data:`CONFIDENCE`, percent
    (Student's t on the spread within its shapes; 0 without repeats)."""
    ir_resolution_pct: Mapping[str, float] = field(default_factory=dict)
    """The same for instructions."""
    describe: Mapping[str, Any] = field(default_factory=dict)
    jitter: Mapping[str, float] = field(default_factory=dict)
    """``cycles`` / ``Ir`` -> the run-to-run standard deviation, from the median difference within shapes."""
    diffs: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """``cycles`` / ``Ir`` -> every |difference| between two runs of one shape (what the jitter is read from)."""
    spans: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Metric -> ``cycles`` / ``Ir`` -> the whole difference between the longer shape and the base shape."""

    def per_token(self, metric: str) -> Counts:
        return self.prefill if metric == "prefill" else self.decode

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "runs": [r.as_dict() for r in self.runs], "prefill": self.prefill.as_dict(),
                "decode": self.decode.as_dict(), "resolution_pct": dict(self.resolution_pct),
                "ir_resolution_pct": dict(self.ir_resolution_pct), "describe": dict(self.describe),
                "jitter": dict(self.jitter), "diffs": {k: list(v) for k, v in self.diffs.items()},
                "spans": {k: dict(v) for k, v in self.spans.items()}}


def figures_from_runs(name: str, plan: SimPlan, runs: Sequence[SimRun],
                      describe: Mapping[str, Any] | None = None, *, prompt_passes: int = 1) -> ArmFigures:
    """Per-token prefill and decode from the plan's runs (see the module docstring);
    ``prompt_passes``: how often a run processes its prompt (a tool that cannot skip its warm-up: 2)."""
    roles = {role for role, _, _ in plan.shapes()}
    by: dict[str, list[Counts]] = {shape: [] for shape in SHAPES}
    for r in runs:
        if r.role in roles:
            by[shape_of(r.role)].append(r.counts)
    missing = sorted(roles - {r.role for r in runs})
    if missing:
        raise BenchError(f"simulation of {name}: runs {', '.join(missing)} are missing")
    # each shape's figure: its luckiest run, per event (a run never executes less than that layout's)
    base, prompt, gen = (_least(by[shape]) for shape in SHAPES)
    diffs = {"cycles": _diffs([[c.cycles for c in v] for v in by.values()]),
             "Ir": _diffs([[c["Ir"] for c in v] for v in by.values()])}
    jitter = {k: _sigma(v) for k, v in diffs.items()}
    dof = len(diffs["Ir"])
    prefill = prompt.minus(base).scaled(1.0 / ((plan.p2 - plan.p1) * prompt_passes))
    decode = gen.minus(base).scaled(1.0 / (plan.g2 - plan.g1))
    res: dict[str, float] = {}
    ir_res: dict[str, float] = {}
    spans: dict[str, dict[str, float]] = {}
    t = _t(CONFIDENCE, dof) if dof else 0.0
    for metric, longer in (("prefill", prompt), ("decode", gen)):
        span, ir_span = longer.cycles - base.cycles, longer["Ir"] - base["Ir"]
        if span <= 0 or ir_span <= 0:
            msg = (f"simulation of {name}: the longer {metric} run executed no more than the base run "
                   f"({ir_span:+.0f} instructions); does the target run the lengths it is given?")
            raise BenchError(msg)
        spans[metric] = {"cycles": span, "Ir": ir_span}
        # a per-token figure is a difference of two shapes, each off by the run-to-run jitter: sd sqrt(2) jitter
        res[metric] = 100.0 * t * 2**0.5 * jitter["cycles"] / span
        ir_res[metric] = 100.0 * t * 2**0.5 * jitter["Ir"] / ir_span
    return ArmFigures(name=name, runs=tuple(runs), prefill=prefill, decode=decode, resolution_pct=res,
                      ir_resolution_pct=ir_res, describe=dict(describe or {}), jitter=jitter, diffs=diffs,
                      spans=spans)


def _least(counts: Sequence[Counts]) -> Counts:
    return Counts({event: min(c[event] for c in counts) for event in EVENTS})


def _diffs(groups: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """Every |difference| between two values of one group."""
    return tuple(abs(g[i] - g[j]) for g in groups for i in range(len(g)) for j in range(i + 1, len(g)))


def _sigma(diffs: Sequence[float]) -> float:
    """The run-to-run standard deviation from |differences| of identical runs, by their median."""
    if not diffs:
        return 0.0
    ordered = sorted(diffs)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
    return median / _MEDIAN_ABS_DIFF


def _pooled_halfwidth_pct(a: ArmFigures, b: ArmFigures, metric: str, event: str, confidence: float) -> float:
    """The half-width, percent, of the ratio of A's and B's per-token ``event`` (``cycles`` or ``Ir``):
    Student's t at ``confidence`` on the jitter read from both arms' differences within shapes, over both spans
    (each per-token figure is a difference of two shapes). 0 when neither arm repeated its shapes."""
    pooled = (*a.diffs.get(event, ()), *b.diffs.get(event, ()))
    if not pooled:
        return 0.0
    var = _sigma(pooled) ** 2
    dof = len(pooled)
    sa, sb = a.spans[metric][event], b.spans[metric][event]
    return float(100.0 * _t(confidence, dof) * (2.0 * var / sa**2 + 2.0 * var / sb**2) ** 0.5)


# ---------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------


def cachegrind_argv(out_file: Path) -> list[str]:
    """Valgrind's command line before the target's: cachegrind, cache simulation, the pinned geometry."""
    geometry = [f"--{level}={size},{ways},{line}" for level, (size, ways, line) in CACHE.items()]
    return [valgrind(), "--tool=cachegrind", "--cache-sim=yes", *geometry, f"--cachegrind-out-file={out_file}",
            "--trace-children=no"]


def _run_env(cmd: SimCommand, env_pad: int) -> dict[str, str]:
    # the environment's size moves the initial stack (measure() gives every run of a measurement the same)
    return {**cmd.env, "HARNESS_BENCH_ENV_PAD": "x" * env_pad, "PYTHONHASHSEED": "0"}


def _run_logged(argv: list[str], env: Mapping[str, str], log: Path, timeout: float) -> int | None:
    """``argv`` with its output in ``log`` (its command line first): the exit code, None when it ran over."""
    with log.open("w") as fh:
        fh.write(" ".join(argv) + "\n")
        fh.flush()
        try:
            return subprocess.run(argv, env=dict(env), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  check=False, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return None


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-15:])


def run_one(target: SimTarget, role: str, pn: int, gn: int, workdir: Path, *, env_pad: int,
            timeout: float = RUN_TIMEOUT_S) -> SimRun:
    """One request of ``target`` under cachegrind; its log is kept beside the output file."""
    cmd = target.command(pn, gn)
    stem = f"{_slug(target.name)}-{role}-p{pn}-g{gn}"
    out, log = workdir / f"{stem}.cachegrind.out", workdir / f"{stem}.log"
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    code = _run_logged([*cachegrind_argv(out), *cmd.argv], _run_env(cmd, env_pad), log, timeout)
    seconds = time.perf_counter() - t0
    if code is None:
        msg = f"simulation of {target.name} ({role}, pn={pn} gn={gn}) ran over {timeout:.0f} s; log: {log}"
        raise BenchError(msg)
    if code != 0 or not out.is_file():
        msg = (f"simulation of {target.name} ({role}, pn={pn} gn={gn}) exited {code} under valgrind; "
               f"last lines of {log}:\n{_tail(log)}")
        raise BenchError(msg)
    return SimRun(role=role, pn=pn, gn=gn, counts=parse_cachegrind(out.read_text()), seconds=seconds,
                  env_pad=env_pad)


def warm_up(target: SimTarget, plan: SimPlan, workdir: Path, *, env_pad: int, timeout: float = RUN_TIMEOUT_S) -> None:
    """The target's base shape once, natively, before anything is counted: whatever a first run does
    once on a host (caches the page cache, the CPU-level directories, the loader) is done, and a target
    that cannot run fails here in seconds, not after a run under Valgrind. Without it the first counted
    run of a measurement executed 3-6 M instructions more than its repeats (2026-12-06, tiny model, two
    measurements of two)."""
    cmd = target.command(plan.p1, plan.g1)
    log = workdir / f"{_slug(target.name)}-warm-up.log"
    code = _run_logged(list(cmd.argv), _run_env(cmd, env_pad), log, timeout)
    if code is None:
        raise BenchError(f"simulation of {target.name}: its native warm-up ran over {timeout:.0f} s; log: {log}")
    if code != 0:
        msg = (f"simulation of {target.name}: its native warm-up (pn={plan.p1} gn={plan.g1}) exited {code}; "
               f"nothing was simulated; last lines of {log}:\n{_tail(log)}")
        raise BenchError(msg)


def measure(targets: Sequence[SimTarget], plan: SimPlan, workdir: Path, *, jobs: int | None = None,
            env_pad: int | None = None) -> list[ArmFigures]:
    """Every target through every run of ``plan``, ``jobs`` runs at once (default: the CPUs here;
    counts do not depend on what else runs), all in one environment size (``env_pad`` bytes; default:
    random, 0-4 KiB). Each target first runs its base shape once natively (:func:`warm_up`).
    Progress: a line per finished run."""
    workdir.mkdir(parents=True, exist_ok=True)
    pad = _pad() if env_pad is None else env_pad
    # each target's runs and logs by its position, never by its name: two arms may share a name (two
    # builds of one pin), and pooling their runs made both read the same figures (1.0000x)
    dirs = [workdir / f"{i}-{_slug(t.name)}" for i, t in enumerate(targets)]
    for t, d in zip(targets, dirs, strict=True):
        d.mkdir(parents=True, exist_ok=True)
        warm_up(t, plan, d, env_pad=pad)
    work = [(i, t, role, pn, gn) for i, t in enumerate(targets) for role, pn, gn in plan.shapes()]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(work)))
    runs: list[list[SimRun]] = [[] for _ in targets]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, t, role, pn, gn, dirs[i], env_pad=pad): (i, t, role)
                   for i, t, role, pn, gn in work}
        for n, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            i, t, role = futures[fut]
            run = fut.result()
            runs[i].append(run)
            progress.info(f"simulation {n}/{len(work)}: {t.name} {role} (pn={run.pn} gn={run.gn}) "
                          f"{run.counts.cycles / 1e9:.3f} G est. cycles in {run.seconds:.0f} s "
                          f"({time.perf_counter() - t0:.0f} s elapsed)")
    return [figures_from_runs(t.name, plan, runs[i], t.describe(), prompt_passes=int(getattr(t, "prompt_passes", 1)))
            for i, t in enumerate(targets)]


def identity(target: SimTarget, plan: SimPlan) -> str:
    """What a target is, whatever it is called: the sha256 of its description (the artifact and its
    manifest, the binding, the options) and of the command and environment it runs. Two arms of one
    identity measure the same thing: an A/A, which must be asked for."""
    cmd = target.command(plan.p1, plan.g1)
    blob = json.dumps({"describe": target.describe(), "argv": list(cmd.argv), "env": dict(cmd.env)}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _pad() -> int:
    """Environment bytes for one measurement, random (0 to 4 KiB, as the wall-clock arms get): no
    measurement depends on one lucky stack placement, and every run within it shares the placement."""
    return secrets.randbelow(4097)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "arm"


# ---------------------------------------------------------------------------
# verdicts
# ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One simulated figure's speed ratio B/A per token (> 1: B costs less) and its interval."""

    name: str
    """``estimated cycles`` or ``instructions``."""
    a: float
    b: float
    speed: float
    lo: float
    hi: float
    resolution_pct: float

    def verdict(self, floor: float | None) -> str:
        if floor is None:
            return "no gate"
        if self.resolution_pct >= UNRESOLVED_PCT:
            # the run lengths' difference is below the repeat noise: the figure says nothing of the ratio (an
            # A/A on a tiny model's 8-token spans measured 0.0955x +-745%: not a slowdown to fail on)
            return "undecided"
        return "FAILED" if self.hi < floor else "passed" if self.lo >= floor else "undecided"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: A resolution at or above this many percent decides nothing: the per-token figure is within its own noise.
UNRESOLVED_PCT = 100.0


def _figure(name: str, a: float, b: float, res: float) -> Figure:
    speed = a / b
    return Figure(name=name, a=a, b=b, speed=speed, lo=speed * (1 - res / 100.0), hi=speed * (1 + res / 100.0),
                  resolution_pct=res)


@dataclass(frozen=True, kw_only=True)
class SimCheck:
    """One metric's simulated speed ratio B/A (> 1: B executes less per token) and its verdict: of its two
    figures (estimated cycles, instructions), the one that decides (see the module docstring)."""

    metric: str
    a_cycles: float
    b_cycles: float
    speed: float
    """The deciding figure's ratio (``decided_by``); ``lo``/``hi``/``resolution_pct`` are its interval."""
    lo: float
    hi: float
    resolution_pct: float
    ir_ratio: float
    """Instructions per token, B/A (> 1: B executes more)."""
    floor: float | None = None
    verdict: str = "no gate"
    """``passed`` / ``FAILED`` / ``undecided`` against ``floor``, or ``no gate``."""
    decided_by: str = "estimated cycles"
    figures: tuple[Figure, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def text(self) -> str:
        gate = "" if self.floor is None else f", floor {self.floor:.3f}: {self.verdict} on {self.decided_by}"
        figs = "; ".join(f"{f.name} {f.speed:.4f}x [{f.lo:.4f}, {f.hi:.4f}] ±{f.resolution_pct:.3f}%" for f in self.figures)
        return f"{self.metric} {figs}{gate}"


def compare(a: ArmFigures, b: ArmFigures, gate: Mapping[str, float] | None = None, *,
            confidence: float = CONFIDENCE) -> list[SimCheck]:
    """Prefill and decode: A's estimated cycles per token over B's; ``gate`` maps ``prefill`` / ``decode``
    (or ``all``) to the percent B may be slower. The interval is the ratio widened by the run-to-run
    jitter pooled over both arms (Student's t at ``confidence``), for estimated cycles and for
    instructions each: failed when either lies wholly below the floor, passed when both lie wholly at
    or above it."""
    out = []
    for metric in ("prefill", "decode"):
        ac, bc = a.per_token(metric), b.per_token(metric)
        if min(ac.cycles, bc.cycles, ac["Ir"], bc["Ir"]) <= 0:
            msg = (f"simulation: non-positive per-token {metric} cost (A {ac.cycles:.0f} cycles, {ac['Ir']:.0f} "
                   f"instructions; B {bc.cycles:.0f}, {bc['Ir']:.0f})")
            raise BenchError(msg)
        figs = (_figure("estimated cycles", ac.cycles, bc.cycles,
                        _pooled_halfwidth_pct(a, b, metric, "cycles", confidence)),
                _figure("instructions", ac["Ir"], bc["Ir"], _pooled_halfwidth_pct(a, b, metric, "Ir", confidence)))
        pct = None if gate is None else gate.get(metric, gate.get("all"))
        floor = None if pct is None else 1.0 - float(pct) / 100.0
        verdicts = [f.verdict(floor) for f in figs]
        if "FAILED" in verdicts:
            pick = figs[verdicts.index("FAILED")]
        elif "undecided" in verdicts:
            pick = figs[verdicts.index("undecided")]
        else:
            pick = min(figs, key=lambda f: f.speed)
        out.append(SimCheck(metric=metric, a_cycles=ac.cycles, b_cycles=bc.cycles, speed=pick.speed, lo=pick.lo,
                            hi=pick.hi, resolution_pct=pick.resolution_pct, ir_ratio=bc["Ir"] / ac["Ir"],
                            floor=floor, verdict=pick.verdict(floor), decided_by=pick.name, figures=figs))
    return out


@dataclass(frozen=True, kw_only=True)
class SimResult:
    """A simulated comparison: both arms' figures, the checks, how it ran."""

    a: ArmFigures
    b: ArmFigures
    checks: tuple[SimCheck, ...]
    plan: SimPlan
    level: str | None
    valgrind: str
    seconds: float
    confidence: float = CONFIDENCE

    @property
    def failed(self) -> bool:
        return any(c.verdict == "FAILED" for c in self.checks)

    @property
    def decided(self) -> bool:
        return all(c.verdict in ("passed", "FAILED") for c in self.checks if c.floor is not None)

    def check(self, metric: str) -> SimCheck | None:
        return next((c for c in self.checks if c.metric == metric), None)

    def summary(self) -> str:
        return "simulation: " + "; ".join(c.text() for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"instrument": "simulation", "formula": FORMULA, "cache": {k: list(v) for k, v in CACHE.items()},
                "level": self.level, "valgrind": self.valgrind, "plan": self.plan.as_dict(),
                "confidence": self.confidence,
                "seconds": round(self.seconds, 1), "a": self.a.as_dict(), "b": self.b.as_dict(),
                "checks": [c.as_dict() for c in self.checks]}

    def markdown(self) -> str:
        lines = ["### CPU simulation (cachegrind)", "",
                 f"One request per run, one thread, CPU level {self.level or 'the engine pick under Valgrind'}"
                 f"{' (Valgrind executes no AVX-512 or AMX: the level is forced)' if self.level else ''}; "
                 f"{self.valgrind}; runs P{self.plan.p1}/G{self.plan.g1}, P{self.plan.p2}/G{self.plan.g1}, "
                 f"P{self.plan.p1}/G{self.plan.g2}, each {self.plan.repeats + 1} time(s), the least per event; per token = "
                 f"difference of two run lengths; intervals: Student's t ({self.confidence:.1%}) on the spread of "
                 f"identical runs, pooled.",
                 f"{FORMULA}; caches pinned: " + ", ".join(f"{k} {s // 1024} KiB {w}-way" for k, (s, w, _) in CACHE.items())
                 + ".", "",
                 "A gate fails when either figure resolves below its floor and passes when both resolve at or above it.",
                 "",
                 "| metric | figure | A per token | B per token | speed B/A | interval | resolves | verdict |",
                 "|---|---|---:|---:|---:|---|---:|---|"]
        for c in self.checks:
            for f in c.figures:
                verdict = f.verdict(c.floor)
                if c.floor is not None:
                    verdict += f" (floor {c.floor:.3f})" + (", decides" if f.name == c.decided_by else "")
                lines.append(f"| {c.metric} | {f.name} | {f.a:,.0f} | {f.b:,.0f} | {f.speed:.4f}x | "
                             f"[{f.lo:.4f}, {f.hi:.4f}] | ±{f.resolution_pct:.3f}% | {verdict} |")
        lines += ["", f"A: {self.a.name}; B: {self.b.name}; {self.seconds:.0f} s under Valgrind."]
        return "\n".join(lines) + "\n"


def simulate(a: SimTarget, b: SimTarget, plan: SimPlan, workdir: Path, *, gate: Mapping[str, float] | None = None,
             level: str | None = None, jobs: int | None = None, confidence: float = CONFIDENCE,
             aa: bool = False) -> SimResult:
    """Both targets through ``plan`` and the comparison (intervals at ``confidence``); ``level`` is what
    the targets were asked to run. Two targets of one :func:`identity` are refused unless ``aa``."""
    if not aa and identity(a, plan) == identity(b, plan):
        msg = (f"both arms of the simulation are one target ({a.name!r} and {b.name!r}: the same artifact, binding, "
               "options and command): their figures would be one measurement's. Name two different builds "
               "(artifact=DIR of each), or pass --aa to measure an arm against itself")
        raise BenchError(msg)
    t0 = time.perf_counter()
    fa, fb = measure([a, b], plan, workdir, jobs=jobs)
    return SimResult(a=fa, b=fb, checks=tuple(compare(fa, fb, gate, confidence=confidence)), plan=plan,
                     level=level, valgrind=valgrind_version(), seconds=time.perf_counter() - t0,
                     confidence=confidence)


def target_for(kind: str, options: Mapping[str, Any], *, level: str | None) -> SimTarget:
    """The simulation target for an arm of ``kind``: its engine's (``BenchArmKind.sim_target``), else the
    ``harness_sim_target`` hook's (engine-free kinds), asked to run ``level``; a :class:`BenchError` naming the kinds that can be simulated when none answers."""
    from harness.bench.arms import engine_arm
    from harness.engine.plugin import get_manager

    opts = {**options, "threads": 1}
    if level is not None:
        opts["level"] = level
    found = engine_arm(kind, opts)
    if found is not None:
        name, arm_kind = found
        target = None if arm_kind.sim_target is None else arm_kind.sim_target({**opts, "engine": name})
    else:
        target = get_manager().hook.harness_sim_target(kind=kind, options=opts)
    if target is None:
        msg = (f"arm kind {kind!r} cannot be measured by simulation: no engine gives a simulation target for it "
               "(README: Instruments names the kinds that can); measure it with --instrument walltime")
        raise BenchError(msg)
    if not isinstance(target, SimTarget):
        msg = f"the simulation target for {kind!r} lacks name/command()/describe(): a plugin bug"
        raise BenchError(msg)
    return target
