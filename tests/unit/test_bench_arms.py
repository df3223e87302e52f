"""Bench arms: spec parsing, the deterministic fake arm, worker processes and their cleanup."""

from __future__ import annotations

import multiprocessing

import psutil
import pytest

from harness.bench.arms import ArmSpec, ArmWorker, InProcessArm, create_arm, started_arms
from harness.bench.fake import FakeArm
from harness.core.errors import BenchError

FAKE = ("harness_plugins.bench_fake",)


def _children() -> set[int]:
    """Live child processes, less multiprocessing's resource tracker (one per parent, by design)."""
    return {c.pid for c in psutil.Process().children(recursive=True)
            if "resource_tracker" not in " ".join(c.cmdline())}


def test_parse_spec_coerces_values() -> None:
    spec = ArmSpec.parse("fake:slowdown=1.1,seed=3,noise=0,fail_in=,flag=true,model=/m/x.gguf")
    assert spec.kind == "fake"
    # the display name leaves out context (model, seed) and empty values; the full spec stays
    assert spec.name == "fake:slowdown=1.1,noise=0,flag=True"
    assert spec.options == {"slowdown": 1.1, "seed": 3, "noise": 0, "fail_in": "", "flag": True,
                            "model": "/m/x.gguf"}
    assert spec.spec == "fake:slowdown=1.1,seed=3,noise=0,fail_in=,flag=True,model=/m/x.gguf"
    assert ArmSpec.parse("in-process").options == {}


@pytest.mark.parametrize(("text", "name"), [
    ("in-process:model=/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf,variant=cpu,threads=16,n_ctx=2624", "in-process:cpu"),
    ("xllamacpp:model=/m/x.gguf,threads=2,n_ctx=2624,max_num_seqs=4", "xllamacpp"),
    ("llama-bench:pin=0.3.35,model=/m/x.gguf", "llama-bench:0.3.35"),
    ("fake:artifact=a-very-long-artifact-directory-name-without-slashes", "fake"),
    ("in-process:variant=cpu,model=/m/x.gguf,name=ours", "ours"),
])
def test_short_display_names(text: str, name: str) -> None:
    spec = ArmSpec.parse(text)
    assert spec.name == name
    assert "name" not in spec.options and spec.as_dict()["spec"].startswith(spec.kind)


@pytest.mark.parametrize("text", ["", ":a=1", "fake:slowdown", "fake:=3"])
def test_parse_spec_rejects_malformed(text: str) -> None:
    with pytest.raises(BenchError, match="expected"):
        ArmSpec.parse(text)


def test_fake_is_deterministic_and_slowdown_scales() -> None:
    a1, a2 = FakeArm({"seed": 7, "_role": "A"}), FakeArm({"seed": 7, "_role": "A"})
    assert [a1.measure(512, 128, 1) for _ in range(3)] == [a2.measure(512, 128, 1) for _ in range(3)]
    # the other role draws another stream, so an A/A run is not trivially exact
    assert FakeArm({"seed": 7, "_role": "B"}).measure(512, 128, 1) != FakeArm(
        {"seed": 7, "_role": "A"}).measure(512, 128, 1)
    base = FakeArm({"noise": 0}).measure(512, 128, 4)
    slow = FakeArm({"noise": 0, "slowdown": 1.25}).measure(512, 128, 4)
    assert slow["ttft_s"] == pytest.approx(base["ttft_s"] * 1.25)
    assert slow["aggregate_tps"] == pytest.approx(base["aggregate_tps"] / 1.25)
    assert base["aggregate_tps"] > base["decode_tps"] > 0


def test_fake_outlier_block_counts_per_concurrency() -> None:
    arm = FakeArm({"noise": 0, "outlier_block": 1, "outlier_factor": 3.0})
    c1 = [arm.measure(512, 128, 1)["decode_tps"] for _ in range(3)]
    c4 = [arm.measure(512, 128, 4)["decode_tps"] for _ in range(3)]
    assert c1[1] == pytest.approx(c1[0] / 3) and c1[2] == pytest.approx(c1[0])
    assert c4[1] == pytest.approx(c4[0] / 3)


def test_fake_rejects_unknown_option() -> None:
    with pytest.raises(BenchError, match=r"did you mean 'slowdown'"):
        FakeArm({"slowdwn": 1.1})


def test_create_arm_unknown_kind() -> None:
    with pytest.raises(BenchError, match="no engine or plugin provides bench arm kind 'nope'"):
        create_arm(ArmSpec.parse("nope"), "A", FAKE)


def test_in_process_arm_validates_measure() -> None:
    arm = InProcessArm(ArmSpec.parse("fake"), "A", FAKE)
    r = arm.measure(512, 128, 1)
    assert set(r) == {"metrics", "started_at", "finished_at", "peak_rss_bytes"}
    assert r["metrics"]["ttft_s"] > 0 and r["peak_rss_bytes"] > 0
    arm.close()
    with pytest.raises(BenchError, match="closed"):
        arm.measure(512, 128, 1)


def test_worker_runs_arm_in_own_process_and_cleans_up() -> None:
    before = _children()
    with ArmWorker(ArmSpec.parse("fake:seed=1"), "B", FAKE) as w:
        desc = w.wait_ready(timeout=60)
        assert desc["kind"] == "fake" and desc["model"]["n_params"] > 0
        assert w.pid is not None and w.pid in _children()
        w.warmup()
        r = w.measure(512, 128, 4)
        assert r["metrics"]["aggregate_tps"] > r["metrics"]["decode_tps"]
        # the numbers are those of the same fake, role B, in this process
        expected = FakeArm({"seed": 1, "_role": "B"}).measure(512, 128, 4)
        assert r["metrics"]["ttft_s"] == pytest.approx(expected["ttft_s"])
    assert _children() == before
    assert not multiprocessing.active_children()


def test_worker_errors_surface_and_worker_is_reaped() -> None:
    before = _children()
    with pytest.raises(BenchError, match=r"arm A \('fake:fail_in=measure'\) failed in measure"), \
            started_arms({"A": ArmSpec.parse("fake:fail_in=measure")}, extra_plugins=FAKE) as arms:
        arms["A"].warmup()
        arms["A"].measure(512, 128, 1)
    with pytest.raises(BenchError, match=r"failed in start.*unknown option"), \
            started_arms({"A": ArmSpec.parse("fake:bogus=1")}, extra_plugins=FAKE):
        pass
    assert _children() == before

