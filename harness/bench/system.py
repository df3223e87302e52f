"""The state of the machine a benchmark ran on, as pyperf records it, and what in it can distort one.

Read once per run: the kernel, the CPU frequency governor and driver, turbo/boost,
isolated CPUs, SMT, the affinity mask, the thread count and whether the arms' processes
started with glibc's malloc hugepages (:mod:`harness.core.hugepages`), from sysfs and psutil,
no root needed. Sampled twice: the load average and the processes that use CPU
time, once before the arms start (over a short window) and once after the last
measurement, where each other process's CPU time over the whole run gives its
average use while the benchmark ran. The benchmark's own processes (this one and
its arm workers) are left out.

:func:`findings` turns that into warnings that say how to fix each problem.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from harness.bench.stats import Finding, Level
from harness.core.host import physical_cores
from harness.core.hugepages import VALUE, MallocHugepages, tunable_value

CPU_SYSFS = Path("/sys/devices/system/cpu")
MM_SYSFS = Path("/sys/kernel/mm")
#: Seconds the "before" sample watches the other processes.
BUSY_WINDOW_S = 0.2
#: A process using at least this many CPUs (on average over a window) counts as busy.
BUSY_CPUS = 0.2
#: Other processes together using this many CPUs during the run get a warning.
OTHER_LOAD_CPUS = 0.25
#: The 1-minute load average before the run is flagged above this fraction of the usable CPUs.
LOAD_FRACTION = 0.25


@dataclass(frozen=True, kw_only=True)
class BusyProcess:
    pid: int
    name: str
    cpus: float
    """Average CPUs it used over the window (1.0 = one core all the time)."""


@dataclass(frozen=True, kw_only=True)
class Sample:
    """The load at one moment (``before``) or over the run (``during``)."""

    at: float
    """Unix time of the sample."""
    load_avg: tuple[float, float, float] | None
    """1, 5 and 15 minute load averages."""
    busy: tuple[BusyProcess, ...] = ()
    """Other processes using at least ``BUSY_CPUS``, busiest first."""
    other_cpus: float = 0.0
    """CPUs all other processes used together over the window, on average."""
    window_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class SystemState:
    """What a run records about its machine (``results.json`` → ``system``)."""

    kernel: str
    os: str
    logical_cpus: int
    physical_cores: int
    affinity: tuple[int, ...] | None
    """CPUs this process may run on; None where the OS has no affinity call."""
    governors: dict[str, int] = field(default_factory=dict)
    """Frequency governor -> number of CPUs using it; empty when the OS does not expose it."""
    cpufreq_driver: str | None = None
    turbo: bool | None = None
    """Turbo/boost enabled; None when unknown."""
    turbo_control: str = ""
    """The sysfs file that says (and sets) it."""
    isolated: str = ""
    """``isolcpus`` (CPUs the scheduler leaves alone), as the kernel lists them."""
    smt: str | None = None
    """SMT control: on, off, notsupported, ..."""
    thp: str | None = None
    """Transparent hugepages mode (always, madvise, never); None when not exposed."""
    reclaim: tuple[str, ...] = ()
    """Proactive reclaim running on the host (DAMON ``pageout`` schemes), one line each: what it pages out."""
    threads: int | None = None
    """Compute threads each arm runs with."""
    threads_source: str = ""
    malloc_hugetlb: bool | None = None
    """The arms' processes started with glibc's ``glibc.malloc.hugetlb`` on (``GLIBC_TUNABLES``);
    None: not recorded (a report from before it was)."""
    malloc_hugetlb_source: str = ""
    """Why on or off: the harness's default, ``--no-malloc-hugetlb``, the user's own tunable, no glibc."""
    glibc_tunables: str | None = None
    """The ``GLIBC_TUNABLES`` the arms' processes started with."""
    before: Sample | None = None
    during: Sample | None = None
    """Other processes' CPU use from the start to the end of the measurements."""
    load_after: tuple[float, float, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SystemState:
        def sample(raw: Any) -> Sample | None:
            if not raw:
                return None
            return Sample(at=float(raw["at"]), load_avg=_triple(raw.get("load_avg")),
                          busy=tuple(BusyProcess(**b) for b in raw.get("busy", ())),
                          other_cpus=float(raw.get("other_cpus", 0.0)), window_s=float(raw.get("window_s", 0.0)))

        aff = data.get("affinity")
        return cls(kernel=str(data.get("kernel", "")), os=str(data.get("os", "")),
                   logical_cpus=int(data.get("logical_cpus", 0)), physical_cores=int(data.get("physical_cores", 0)),
                   affinity=None if aff is None else tuple(int(c) for c in aff),
                   governors={str(k): int(v) for k, v in dict(data.get("governors") or {}).items()},
                   cpufreq_driver=data.get("cpufreq_driver"), turbo=data.get("turbo"),
                   turbo_control=str(data.get("turbo_control", "")), isolated=str(data.get("isolated", "")),
                   smt=data.get("smt"), thp=data.get("thp"), reclaim=tuple(str(r) for r in data.get("reclaim") or ()),
                   threads=data.get("threads"), threads_source=str(data.get("threads_source", "")),
                   malloc_hugetlb=data.get("malloc_hugetlb"),
                   malloc_hugetlb_source=str(data.get("malloc_hugetlb_source", "")),
                   glibc_tunables=data.get("glibc_tunables"),
                   before=sample(data.get("before")), during=sample(data.get("during")),
                   load_after=_triple(data.get("load_after")))


def _triple(v: Any) -> tuple[float, float, float] | None:
    if not v:
        return None
    a, b, c = (float(x) for x in v)
    return a, b, c


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _load_avg() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except (AttributeError, OSError):  # Windows
        return None


def _bracketed(text: str | None) -> str | None:
    """``always [madvise] never`` -> ``madvise``."""
    if not text:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else text.strip()


def memory_policy(mm: Path = MM_SYSFS) -> dict[str, Any]:
    """Transparent hugepages mode and the proactive reclaim (DAMON ``pageout``) the kernel runs.

    A VM host may run DAMON with a pageout scheme (Firecracker guests do): it pages out memory
    that was not accessed for a while, so a model file's page cache that no process maps is
    read from disk again on the next load. Each running pageout scheme is described in one line.
    """
    thp = _bracketed(_read(mm / "transparent_hugepage" / "enabled"))
    reclaim: list[str] = []
    for kd in sorted((mm / "damon" / "admin" / "kdamonds").glob("[0-9]*")):
        if _read(kd / "state") != "on":
            continue
        for ctx in sorted((kd / "contexts").glob("[0-9]*")):
            aggr_us = _read(ctx / "monitoring_attrs" / "intervals" / "aggr_us")
            for scheme in sorted((ctx / "schemes").glob("[0-9]*")):
                if _read(scheme / "action") != "pageout":
                    continue
                age = _read(scheme / "access_pattern" / "age" / "min")
                cold = (f" not accessed for >= {int(age) * int(aggr_us) / 1e6:g} s"
                        if age and aggr_us and age.isdigit() and aggr_us.isdigit() else "")
                kinds = []
                for f in sorted((scheme / "ops_filters").glob("[0-9]*")) + sorted((scheme / "filters").glob("[0-9]*")):
                    kind, allow = _read(f / "type"), _read(f / "allow")
                    if kind:
                        kinds.append(f"{'only' if allow == 'Y' else 'not'} {kind}")
                space = _read(ctx / "operations") or "?"
                quota = _read(scheme / "quotas" / "bytes")
                rate = (f", up to {int(quota) // 2**20} MiB per {_read(scheme / 'quotas' / 'reset_interval_ms') or '?'} ms"
                        if quota and quota.isdigit() and int(quota) else "")
                reclaim.append(f"DAMON pageout ({space}) of memory{cold}"
                               + (f" ({', '.join(kinds)} pages)" if kinds else "") + rate)
    return {"thp": thp, "reclaim": tuple(reclaim)}


def static_state(root: Path = CPU_SYSFS, mm: Path = MM_SYSFS) -> dict[str, Any]:
    """Governor, driver, turbo, isolated CPUs, SMT (from ``root``), hugepages and reclaim (``mm``);
    Linux sysfs, empty elsewhere."""
    governors: dict[str, int] = {}
    for gov_file in sorted(root.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        gov = _read(gov_file)
        if gov:
            governors[gov] = governors.get(gov, 0) + 1
    driver = next((d for f in sorted(root.glob("cpu[0-9]*/cpufreq/scaling_driver")) if (d := _read(f))), None)
    turbo: bool | None = None
    control = ""
    no_turbo = _read(root / "intel_pstate" / "no_turbo")
    boost = _read(root / "cpufreq" / "boost")
    if no_turbo in ("0", "1"):
        turbo, control = no_turbo == "0", str(root / "intel_pstate" / "no_turbo")
    elif boost in ("0", "1"):
        turbo, control = boost == "1", str(root / "cpufreq" / "boost")
    return {"governors": governors, "cpufreq_driver": driver, "turbo": turbo, "turbo_control": control,
            "isolated": _read(root / "isolated") or "", "smt": _read(root / "smt" / "control"),
            **memory_policy(mm)}


def _affinity() -> tuple[int, ...] | None:
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return None


def _cpu_table() -> dict[int, tuple[float, float, str]]:
    """pid -> (create time, user + system CPU seconds, name) of every process we may read."""
    table: dict[int, tuple[float, float, str]] = {}
    for p in psutil.process_iter(["pid", "name", "create_time", "cpu_times"]):
        with contextlib.suppress(psutil.Error, TypeError):
            ct = p.info["cpu_times"]
            if ct is None:
                continue
            table[int(p.info["pid"])] = (float(p.info["create_time"] or 0.0), float(ct.user + ct.system),
                                         str(p.info["name"] or "?"))
    return table


def own_pids() -> set[int]:
    """This process, its children (the arm workers and what they run) and its ancestors."""
    me = psutil.Process()
    pids = {me.pid}
    with contextlib.suppress(psutil.Error):
        pids |= {c.pid for c in me.children(recursive=True)}
    with contextlib.suppress(psutil.Error):
        pids |= {p.pid for p in me.parents()}
    return pids


def _busy(t0: Mapping[int, tuple[float, float, str]], t1: Mapping[int, tuple[float, float, str]],
          seconds: float, exclude: set[int]) -> tuple[tuple[BusyProcess, ...], float]:
    """Other processes' average CPUs between two tables; a process born in between counts from 0."""
    if seconds <= 0:
        return (), 0.0
    uses: list[BusyProcess] = []
    total = 0.0
    for pid, (created, cpu, name) in t1.items():
        if pid in exclude:
            continue
        base = t0.get(pid)
        start = base[1] if base is not None and abs(base[0] - created) < 0.01 else 0.0
        cpus = max(0.0, cpu - start) / seconds
        total += cpus
        if cpus >= BUSY_CPUS:
            uses.append(BusyProcess(pid=pid, name=name, cpus=round(cpus, 2)))
    uses.sort(key=lambda b: -b.cpus)
    return tuple(uses), round(total, 2)


class Recorder:
    """Samples the machine before and after a run: ``Recorder(threads=..)``, then ``.finish()``.

    ``malloc`` is what the arms' processes start with (:func:`harness.core.hugepages.malloc_hugepages`).
    """

    def __init__(self, *, threads: int | None = None, threads_source: str = "", window_s: float = BUSY_WINDOW_S,
                 root: Path = CPU_SYSFS, mm: Path = MM_SYSFS, malloc: MallocHugepages | None = None) -> None:
        self._static = static_state(root, mm)
        self._threads, self._threads_source = threads, threads_source
        self._malloc: dict[str, Any] = ({} if malloc is None else
                        {"malloc_hugetlb": malloc.on, "malloc_hugetlb_source": malloc.source,
                         "glibc_tunables": malloc.tunables})
        exclude = own_pids()
        t0, start = _cpu_table(), time.monotonic()
        time.sleep(window_s)
        self._table, self._mono = _cpu_table(), time.monotonic()
        busy, other = _busy(t0, self._table, self._mono - start, exclude)
        self.before = Sample(at=time.time(), load_avg=_load_avg(), busy=busy, other_cpus=other,
                             window_s=round(self._mono - start, 3))

    def finish(self) -> SystemState:
        """Call after the last measurement, while the arm workers still live (they are left out)."""
        table, now = _cpu_table(), time.monotonic()
        busy, other = _busy(self._table, table, now - self._mono, own_pids())
        during = Sample(at=time.time(), load_avg=None, busy=busy, other_cpus=other,
                        window_s=round(now - self._mono, 3))
        return SystemState(kernel=platform.release(), os=platform.system().lower(),
                           logical_cpus=os.cpu_count() or 1, physical_cores=physical_cores(),
                           affinity=_affinity(), threads=self._threads, threads_source=self._threads_source,
                           before=self.before, during=during, load_after=_load_avg(), **self._malloc,
                           **self._static)


# ---------------------------------------------------------------------------
# what can distort a result, and how to fix it
# ---------------------------------------------------------------------------


def _names(busy: tuple[BusyProcess, ...], n: int = 4) -> str:
    shown = ", ".join(f"{b.name} (pid {b.pid}) {b.cpus:.1f}" for b in busy[:n])
    return shown + (f" and {len(busy) - n} more" if len(busy) > n else "")


def findings(state: SystemState) -> list[Finding]:
    """Warnings (and notes) about the state, each with what to do about it."""
    out: list[Finding] = []

    def add(level: Level, message: str) -> None:
        out.append(Finding(level=level, metric="", message=message, kind="system"))

    usable = len(state.affinity) if state.affinity else state.logical_cpus
    slow = {g: n for g, n in state.governors.items() if g != "performance"}
    if slow:
        which = ", ".join(f"{g} on {n} CPU(s)" for g, n in slow.items())
        add("warning", f"CPU frequency governor {which}: the clock follows the load, so the first "
            "measurements of a block can run slower; fix: `sudo cpupower frequency-set -g performance` "
            "(`python -m pyperf system tune` sets this and more)")
    if state.turbo:
        how = ("echo 1 | sudo tee " if state.turbo_control.endswith("no_turbo") else "echo 0 | sudo tee ")
        add("warning", "turbo/boost is on: the clock depends on temperature and on how many cores are busy, "
            f"so absolute figures drift over a long run (ABBA ratios cancel most of it); fix: `{how}"
            f"{state.turbo_control}`")
    if not state.governors and state.turbo is None and state.os == "linux":
        add("note", "the CPU frequency governor and turbo state are not exposed here (a VM or a container?): "
            "the host's frequency policy is unknown; expect more drift than on bare metal")
    before = state.before
    if before is not None and before.other_cpus >= OTHER_LOAD_CPUS:
        load = f" (load average {before.load_avg[0]:.2f})" if before.load_avg is not None else ""
        busy = f": {_names(before.busy)}" if before.busy else ""
        add("warning", f"other processes used {before.other_cpus:.2f} CPU(s) of {usable} just before the run{load}"
            f"{busy}; fix: wait until the host is idle, or stop that work")
    elif before is not None and before.load_avg is not None and before.load_avg[0] > max(0.5, LOAD_FRACTION * usable):
        # the 1-minute average still counts work that just ended (a previous run, a build)
        add("note", f"load average {before.load_avg[0]:.2f} before the run on {usable} usable CPU(s), though no "
            "other process was busy when it started: work that just ended still counts in the 1-minute average")
    during = state.during
    if during is not None and during.other_cpus >= OTHER_LOAD_CPUS:
        busy = f": {_names(during.busy)}" if during.busy else ""
        add("warning", f"other processes used {during.other_cpus:.2f} CPU(s) on average during the run "
            f"(of {usable} usable){busy}; their load varies between blocks, which widens the intervals and "
            "can bias one arm; fix: run on an idle host, or keep that work off the benchmark's cores "
            "(`taskset`, `isolcpus`)")
    threads = state.threads
    if threads is not None:
        if threads > usable:
            add("warning", f"{threads} threads on {usable} usable CPU(s): threads wait for each other and "
                f"results depend on the scheduler; fix: `--threads {usable}` or fewer")
        elif threads > state.physical_cores:
            add("warning", f"{threads} threads on {state.physical_cores} physical cores: hyper-threads share a "
                f"core's units and slow a matmul-bound engine down; fix: `--threads {state.physical_cores}`")
    for scheme in state.reclaim:
        add("note", f"the kernel runs proactive reclaim: {scheme}. A model file's page cache that no process "
            "maps is read from disk again after such a pause; each fresh worker's discarded warm-up measurement "
            "absorbs that first touch (a VM's memory balloon policy; nothing to fix inside the guest)")
    if state.affinity is not None and usable < state.logical_cpus:
        add("note", f"the run was limited to {usable} of {state.logical_cpus} CPUs by its affinity mask")
    return out


def malloc_line(state: SystemState) -> str:
    """What the arms' processes started with of glibc's malloc hugepages, and what it does under the THP mode."""
    if state.malloc_hugetlb is None:
        return ""
    tunables = f"GLIBC_TUNABLES={state.glibc_tunables}; " if state.glibc_tunables else ""
    line = (f"glibc malloc hugepages for the arms' processes: {'on' if state.malloc_hugetlb else 'off'} "
            f"({tunables}{state.malloc_hugetlb_source})")
    if state.malloc_hugetlb and tunable_value(state.glibc_tunables) == VALUE:
        effect = {"madvise": "in effect under THP madvise: malloc madvises its blocks of 2 MiB and more",
                  "always": "no change under THP always: the kernel backs large mappings with hugepages anyway",
                  "never": "no effect under THP never"}.get(state.thp or "", "THP mode unknown")
        line += f"; {effect}"
    return line


def summary_lines(state: SystemState) -> list[str]:
    """``- key: value`` markdown lines for a report."""
    usable = len(state.affinity) if state.affinity else state.logical_cpus
    gov = ", ".join(f"{g} ({n})" for g, n in state.governors.items()) or "not exposed"
    turbo = {True: "on", False: "off", None: "unknown"}[state.turbo]
    lines = [f"- kernel {state.kernel} ({state.os}); {state.physical_cores} physical cores, {state.logical_cpus} "
             f"logical CPUs, {usable} usable (affinity); SMT {state.smt or 'unknown'}",
             f"- governor: {gov}" + (f", driver {state.cpufreq_driver}" if state.cpufreq_driver else "")
             + f"; turbo/boost: {turbo}" + (f"; isolated CPUs: {state.isolated}" if state.isolated else ""),
             f"- transparent hugepages: {state.thp or 'not exposed'}; proactive reclaim: "
             + ("; ".join(state.reclaim) if state.reclaim else "none seen")]
    if state.threads is not None:
        lines.append(f"- threads per arm: {state.threads}" + (f" ({state.threads_source})" if state.threads_source else ""))
    if state.malloc_hugetlb is not None:
        lines.append(f"- {malloc_line(state)}")
    b, d = state.before, state.during
    load = []
    if b is not None and b.load_avg is not None:
        load.append(f"load average {b.load_avg[0]:.2f} before")
    if state.load_after is not None:
        load.append(f"{state.load_after[0]:.2f} after (the benchmark's own load included)")
    if load:
        lines.append("- " + ", ".join(load))
    if b is not None:
        lines.append(f"- other busy processes before: {len(b.busy)}" + (f" ({_names(b.busy)})" if b.busy else ""))
    if d is not None:
        lines.append(f"- other processes during the run: {d.other_cpus:.2f} CPU(s) on average, {len(d.busy)} busy"
                     + (f" ({_names(d.busy)})" if d.busy else ""))
    return lines
