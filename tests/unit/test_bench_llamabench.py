from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.build.recipes import RecipeError
from harness.core.errors import BenchError
from harness_plugins.llamacpp.bench import LlamaBenchArm

FAKE = """#!/usr/bin/env python3
import json, os, sys
a = sys.argv
pn, gn = int(a[a.index("-p") + 1]), int(a[a.index("-n") + 1])
depth = int(a[a.index("-d") + 1]) if "-d" in a else 0
with open(os.path.join(os.path.dirname(__file__), "calls.txt"), "a") as f:
    f.write(" ".join(a[1:]) + "\\n")
rows = ([{"n_prompt": pn, "n_gen": 0, "n_depth": depth, "avg_ts": 400.0}] if pn else []) + (
    [{"n_prompt": 0, "n_gen": gn, "n_depth": depth, "avg_ts": 100.0 - depth / 64}] if gn else [])
print(json.dumps(rows))
"""


@pytest.fixture
def artifact(cache: Path, tmp_path: Path) -> Path:
    d = cache / "dist" / "llamacpp-9.9.9-cpu"
    (d / "bin").mkdir(parents=True)
    exe = d / "bin" / "llama-bench"
    exe.write_text(FAKE)
    exe.chmod(0o755)
    (d / "manifest.json").write_text(json.dumps({"engine": "llamacpp", "pin": "9.9.9", "variant": "cpu"}))
    return d


def test_pin_resolves_to_the_artifact_and_metrics_follow_llama_bench(artifact: Path, tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    arm = LlamaBenchArm({"pin": "9.9.9", "model": str(model), "_role": "A"})
    m = arm.measure(512, 128, 1)
    assert m["ttft_s"] == pytest.approx(512 / 400.0)
    # tg is measured after a 512-token prompt (depth 512), as the other arms decode; pp at depth 0
    assert m["decode_tps"] == 92.0 and m["depth"] == 512
    assert m["aggregate_tps"] == pytest.approx(128 / (512 / 400.0 + 128 / 92.0))
    calls = (artifact / "bin" / "calls.txt").read_text().splitlines()
    assert any("-p 512 -n 0" in c and "-d" not in c for c in calls)
    assert any("-p 0 -n 128 -d 512" in c for c in calls)
    assert arm.describe()["options"]["threads"] >= 1
    assert LlamaBenchArm({"pin": "9.9.9", "model": str(model), "depth": 0}).measure(512, 128, 1)["decode_tps"] == 100.0
    assert arm.describe()["pin"] == "9.9.9"
    with pytest.raises(BenchError, match="single stream"):
        arm.measure(512, 128, 4)


def test_missing_pin_says_how_to_build_it(cache: Path, tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"no recipe pins llamacpp 0\.0\.1 .*harness pin"):
        LlamaBenchArm({"pin": "0.0.1", "model": str(tmp_path / "m.gguf")})


def test_not_an_artifact_dir(cache: Path, tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="not an artifact dir"):
        LlamaBenchArm({"artifact": str(tmp_path), "model": str(tmp_path / "m.gguf")})
