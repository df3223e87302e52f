"""The machine's state in a benchmark: governor, turbo, load, other busy processes, affinity, threads."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harness.bench import system
from harness.bench.abba import BenchConfig, BenchResult, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.report import load_results, write_report
from harness.bench.system import BusyProcess, Recorder, Sample, SystemState, findings, static_state

FAKE = ("harness_plugins.bench_fake",)


def _sysfs(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")
    return root


def test_static_state_reads_governor_driver_turbo_smt(tmp_path: Path) -> None:
    root = _sysfs(tmp_path / "intel", {
        "cpu0/cpufreq/scaling_governor": "powersave", "cpu1/cpufreq/scaling_governor": "powersave",
        "cpu2/cpufreq/scaling_governor": "performance", "cpu0/cpufreq/scaling_driver": "intel_pstate",
        "intel_pstate/no_turbo": "0", "smt/control": "on", "isolated": "",
    })
    st = static_state(root)
    assert st["governors"] == {"powersave": 2, "performance": 1}
    assert st["cpufreq_driver"] == "intel_pstate" and st["smt"] == "on"
    assert st["turbo"] is True and st["turbo_control"].endswith("intel_pstate/no_turbo")
    amd = static_state(_sysfs(tmp_path / "amd", {"cpufreq/boost": "0", "isolated": "2-3"}))
    assert amd["turbo"] is False and amd["turbo_control"].endswith("cpufreq/boost") and amd["isolated"] == "2-3"
    vm = static_state(tmp_path / "nothing")
    assert vm["governors"] == {} and vm["turbo"] is None and vm["cpufreq_driver"] is None


def test_memory_policy_reads_hugepages_and_a_damon_pageout_scheme(tmp_path: Path) -> None:
    # the layout and values of a Firecracker guest's DAMON sysfs tree (kernel 6.18): page out
    # unmapped, non-anonymous memory not accessed for 12 aggregations of 5 s
    ctx = "damon/admin/kdamonds/0/contexts/0"
    scheme = f"{ctx}/schemes/0"
    mm = _sysfs(tmp_path / "mm", {
        "transparent_hugepage/enabled": "always [madvise] never",
        "damon/admin/kdamonds/nr_kdamonds": "1", "damon/admin/kdamonds/0/state": "on",
        f"{ctx}/operations": "paddr", f"{ctx}/monitoring_attrs/intervals/aggr_us": "5000000",
        f"{scheme}/action": "pageout", f"{scheme}/access_pattern/age/min": "12",
        f"{scheme}/ops_filters/0/type": "anon", f"{scheme}/ops_filters/0/allow": "N",
        f"{scheme}/ops_filters/1/type": "unmapped", f"{scheme}/ops_filters/1/allow": "Y",
        f"{scheme}/quotas/bytes": "134217728", f"{scheme}/quotas/reset_interval_ms": "1000",
    })
    policy = system.memory_policy(mm)
    assert policy["thp"] == "madvise"
    assert policy["reclaim"] == ("DAMON pageout (paddr) of memory not accessed for >= 60 s (not anon, only unmapped "
                                 "pages), up to 128 MiB per 1000 ms",)
    notes = [f.message for f in findings(_state(**policy))]
    assert len(notes) == 1 and "proactive reclaim" in notes[0] and ">= 60 s" in notes[0]
    assert any("transparent hugepages: madvise" in line for line in system.summary_lines(_state(**policy)))
    # a stopped kdamond or another action is no reclaim; no sysfs at all is "not exposed"
    (mm / "damon/admin/kdamonds/0/state").write_text("off\n")
    assert system.memory_policy(mm)["reclaim"] == ()
    assert system.memory_policy(tmp_path / "none") == {"thp": None, "reclaim": ()}


def _state(**kw: object) -> SystemState:
    base: dict[str, object] = {"kernel": "6.1", "os": "linux", "logical_cpus": 16, "physical_cores": 8,
                               "affinity": tuple(range(16)), "governors": {"performance": 16}, "turbo": False,
                               "turbo_control": "/sys/devices/system/cpu/intel_pstate/no_turbo", "threads": 8,
                               "before": Sample(at=0.0, load_avg=(0.1, 0.1, 0.1)),
                               "during": Sample(at=1.0, load_avg=None, other_cpus=0.0, window_s=60.0)}
    base.update(kw)
    return SystemState(**base)  # type: ignore[arg-type]


def test_a_quiet_tuned_host_gets_no_warning() -> None:
    assert findings(_state()) == []


def test_each_distortion_is_warned_with_its_fix() -> None:
    busy = (BusyProcess(pid=42, name="cc1plus", cpus=1.6), BusyProcess(pid=43, name="ninja", cpus=0.3))
    found = findings(_state(governors={"powersave": 16}, turbo=True,
                            before=Sample(at=0.0, load_avg=(7.5, 3.0, 1.0), busy=busy, other_cpus=1.9),
                            during=Sample(at=9.0, load_avg=None, busy=busy[:1], other_cpus=1.7, window_s=60.0),
                            threads=16))
    assert all(f.level == "warning" and f.kind == "system" for f in found)
    joined = "\n".join(f.message for f in found)
    assert "governor powersave on 16 CPU(s)" in joined and "cpupower frequency-set -g performance" in joined
    assert "turbo/boost is on" in joined and "echo 1 | sudo tee /sys/devices/system/cpu/intel_pstate/no_turbo" in joined
    assert ("other processes used 1.90 CPU(s) of 16 just before the run (load average 7.50): cc1plus (pid 42) 1.6, "
            "ninja (pid 43) 0.3; fix: wait until the host is idle") in joined
    assert "other processes used 1.70 CPU(s) on average during the run (of 16 usable): cc1plus (pid 42) 1.6" in joined
    assert "16 threads on 8 physical cores" in joined and "--threads 8" in joined
    assert len(found) == 5


def test_a_load_average_from_work_that_just_ended_is_a_note() -> None:
    found = findings(_state(before=Sample(at=0.0, load_avg=(9.0, 2.0, 1.0), other_cpus=0.05)))
    assert [(f.level, "work that just ended" in f.message) for f in found] == [("note", True)]


def test_oversubscription_unknown_policy_and_affinity() -> None:
    found = findings(_state(governors={}, turbo=None, threads=8, affinity=(0, 1, 2, 3)))
    levels = {f.level for f in found}
    joined = "\n".join(f.message for f in found)
    assert "8 threads on 4 usable CPU(s)" in joined and "--threads 4" in joined
    assert "not exposed here (a VM or a container?)" in joined
    assert "limited to 4 of 16 CPUs by its affinity mask" in joined
    assert levels == {"warning", "note"}


def test_busy_processes_between_two_tables() -> None:
    t0 = {1: (100.0, 10.0, "old"), 2: (100.0, 5.0, "idle"), 3: (100.0, 1.0, "restarted")}
    t1 = {1: (100.0, 25.0, "old"), 2: (100.0, 5.1, "idle"), 3: (150.0, 2.0, "restarted"),
          4: (160.0, 8.0, "new"), 99: (100.0, 50.0, "me")}
    busy, total = system._busy(t0, t1, 10.0, exclude={99})
    assert [(b.pid, b.cpus) for b in busy] == [(1, 1.5), (4, 0.8), (3, 0.2)]
    assert total == pytest.approx(1.5 + 0.01 + 0.2 + 0.8)


def test_recorder_leaves_out_the_benchmark_itself() -> None:
    rec = Recorder(threads=2, threads_source="--threads", window_s=0.05)
    end = time.monotonic() + 0.4
    while time.monotonic() < end:  # this process is busy: it must not count as "other"
        pass
    state = rec.finish()
    assert os.getpid() not in {b.pid for b in state.during.busy}  # type: ignore[union-attr]
    assert state.kernel and state.physical_cores >= 1 and state.threads == 2
    assert state.before is not None and state.during is not None and state.during.window_s >= 0.4
    assert SystemState.from_dict(state.as_dict()) == state


def test_every_run_records_the_state_and_the_report_shows_it(tmp_path: Path) -> None:
    r = run_abba(ArmSpec.parse("fake:threads=3"), ArmSpec.parse("fake:threads=3"), BenchConfig(blocks=2),
                 isolate=False, extra_plugins=FAKE, threads_source="--threads")
    assert r.system is not None and r.system.threads == 3 and r.system.threads_source == "--threads"
    files = write_report(r, out=tmp_path, plots=False)
    md = files.markdown.read_text()
    assert "- threads per arm: 3 (--threads)" in md
    assert "## System state" in md and "- kernel " in md and "governor:" in md and "load average" in md
    doc = load_results(files.results)
    assert doc["system"]["threads"] == 3 and doc["system"]["kernel"]
    assert BenchResult.from_dict(doc).system == r.system
    # the system's findings go with the others into results.json
    kinds = {f["kind"] for f in doc["findings"]}
    assert kinds <= {"system", "blocks", "wide", "outlier", "drift", "straddles", "outlier-ratio"}
