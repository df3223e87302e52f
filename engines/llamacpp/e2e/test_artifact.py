"""The built artifact: layout, manifest, hashes, relocatability, idempotence, packaging rules."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.build.artifacts import package, verify
from harness.core.errors import ArtifactError


def test_layout(artifact: Path) -> None:
    libs = {p.name for p in (artifact / "lib").iterdir()}
    assert any(n.startswith("libllama.so") for n in libs)
    assert any(n.startswith("libggml-base.so") for n in libs)
    assert any(n.startswith("libggml-cpu-") for n in libs), "run-time SIMD variants are backend plugins"
    assert (artifact / "bin" / "llama-server").is_file()
    assert (artifact / "bin" / "llama-bench").is_file()
    assert (artifact / "include" / "llama.h").is_file()
    assert (artifact / "include" / "ggml.h").is_file()


def test_manifest_describes_the_build(artifact: Path) -> None:
    m = json.loads((artifact / "manifest.json").read_text())
    for key in ("engine", "pin", "upstream", "patch_series_hash", "variant", "defines", "toolchain",
                "abi_fingerprint", "files"):
        assert m.get(key), key
    assert m["defines"]["LLAMA_BUILD_NUMBER"] == str(m["upstream"]["build"])
    assert m["defines"]["LLAMA_USE_PREBUILT_UI"] == "OFF"
    assert m["defines"]["GGML_BACKEND_DL"] == "ON"
    assert verify(artifact) == []


def test_tampered_file_is_detected(artifact: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(artifact, copy, symlinks=True)
    (copy / "include" / "llama.h").write_text("/* tampered */\n")
    assert "include/llama.h: sha256 differs" in verify(copy)


def test_relocated_copy_runs(artifact: Path, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / artifact.name
    shutil.copytree(artifact, copy, symlinks=True)
    r = subprocess.run([str(copy / "bin" / "llama-server"), "--version"], capture_output=True, text=True,
                       timeout=60, check=False)
    out = r.stdout + r.stderr
    m = json.loads((artifact / "manifest.json").read_text())
    assert f"build {m['upstream']['build']}, commit {m['upstream']['commit']}" in out, out
    r = subprocess.run([str(copy / "bin" / "llama-bench"), "--list-devices"], capture_output=True, text=True,
                       timeout=60, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    # the CPU backend plugin loads from the relocated lib/, not from the build tree
    assert f"{copy}/bin/../lib/libggml-cpu-" in out or f"{copy}/lib/libggml-cpu-" in out, out


def test_second_build_is_a_noop(artifact: Path) -> None:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "harness", "build", "llamacpp", "--variant", "cpu", "--json"], capture_output=True,
                       text=True, timeout=300, check=True)
    elapsed = time.perf_counter() - t0
    result = json.loads(r.stdout)[0]
    assert result["built"] is False, r.stderr
    print(f"no-op build took {elapsed:.2f} s")


def test_mixed_pin_package_is_refused(artifact: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(artifact, other, symlinks=True)
    m = json.loads((other / "manifest.json").read_text())
    m["pin"] = "0.0.1"
    m["variant"] = "vulkan"
    (other / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="different pin"):
        package([artifact, other], tmp_path / "pkg")


def test_same_pin_package_combines(artifact: Path, tmp_path: Path) -> None:
    m = package([artifact], tmp_path / "pkg")
    assert (tmp_path / "pkg" / "manifest.json").is_file()
    assert m["variants"] == ["cpu"]
    assert verify(tmp_path / "pkg") == []
