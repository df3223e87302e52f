"""Roofline: host bandwidth/GEMM measurement, its per-host cache, and the percentage helpers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.bench import roofline


def test_measure_bandwidth_and_gemm_small() -> None:
    bw = roofline.measure_bandwidth(size_mib=8, repeats=2, threads=2)
    assert bw["copy_gbs"] > 0 and bw["triad_gbs"] > 0
    assert bw["bandwidth_gbs"] == max(bw["copy_gbs"], bw["triad_gbs"]) and bw["threads"] == 2
    g = roofline.measure_gemm(n=128, repeats=1)
    assert g["gemm_gflops"] > 0 and g["n"] == 128


def test_measure_host_is_cached_per_host(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def bw(**kw: Any) -> dict[str, Any]:
        calls.append("bw")
        return {"bandwidth_gbs": 12.5, "copy_gbs": 10.0, "triad_gbs": 12.5, "threads": 2}

    def gemm(**kw: Any) -> dict[str, Any]:
        calls.append("gemm")
        return {"gemm_gflops": 99.0, "n": 1024}

    monkeypatch.setattr(roofline, "measure_bandwidth", bw)
    monkeypatch.setattr(roofline, "measure_gemm", gemm)
    first = roofline.measure_host()
    assert first["cached"] is False and first["bandwidth_gbs"] == 12.5 and first["gemm_gflops"] == 99.0
    assert first["measured_at"] and first["timestamp"] > 0
    second = roofline.measure_host()
    assert second["cached"] is True and second["measured_at"] == first["measured_at"]
    assert calls == ["bw", "gemm"]
    roofline.measure_host(force=True)
    assert calls == ["bw", "gemm", "bw", "gemm"]
    data = json.loads((cache / "host-measure.json").read_text())
    assert list(data["hosts"]) == [roofline.host_id()]
    # another host's record in the same cache is kept, not reused
    monkeypatch.setattr(roofline, "host_id", lambda: "other|x86_64|64")
    assert roofline.measure_host()["cached"] is False
    assert len(json.loads((cache / "host-measure.json").read_text())["hosts"]) == 2
    rows = dict(roofline.measure_rows(second))
    assert "12.5 GB/s" in rows["memory bandwidth"] and "cached" in rows["measured"]


def test_roofline_percentages() -> None:
    # 10 GB/s over a 100 MB model: 100 tok/s ceiling
    assert roofline.decode_roofline_tps(100e6, 10.0) == pytest.approx(100.0)
    assert roofline.decode_pct(25.0, 100e6, 10.0) == pytest.approx(25.0)
    # 100 GFLOP/s, 50M params: 1000 tok/s ceiling
    assert roofline.prefill_roofline_tps(50e6, 100.0) == pytest.approx(1000.0)
    assert roofline.prefill_pct(500.0, 50e6, 100.0) == pytest.approx(50.0)
    describe = {"model": {"bytes": 100e6, "n_params": 50e6}}
    pcts = roofline.roofline_pcts(describe, {"bandwidth_gbs": 10.0, "gemm_gflops": 100.0},
                                  decode_tps=25.0, prefill_tps=500.0)
    assert pcts == pytest.approx({"decode_pct": 25.0, "prefill_pct": 50.0})
    assert roofline.roofline_pcts({}, {"bandwidth_gbs": 10.0}, decode_tps=1, prefill_tps=1) == {}
    assert roofline.roofline_pcts(describe, None, decode_tps=1, prefill_tps=1) == {}
