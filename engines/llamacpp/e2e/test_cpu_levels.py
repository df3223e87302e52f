"""Every CPU level of the built cpu artifact: audited statically, probed, forceable.

The AMX regression test inspects the built libggml-cpu-sapphirerapids.so on any x86-64
host (AMD included): every ldtilecfg must load a config with non-zero rows and column
bytes. Without patch 0002, GCC leaves only zeros and the palette byte in it, and the
first tile instruction on a Sapphire Rapids host raises SIGILL.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from harness.audit.isa import audit_library
from harness.engine.descriptor import load_engine
from harness.qualify.specs import model_path, require_variant
from harness.runtime import discovery, levels
from harness_plugins.llamacpp.engine import _committed_fingerprint

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 levels")


def test_amx_tile_config_is_whole(artifact: Path) -> None:
    lib = artifact / "lib" / "libggml-cpu-sapphirerapids.so"
    assert lib.is_file(), f"the cpu artifact has no sapphirerapids level: {sorted(p.name for p in lib.parent.iterdir())}"
    a = audit_library(lib, None)
    assert a.tile_configs, "no ldtilecfg in the sapphirerapids level: the AMX kernels are not built"
    for t in a.tile_configs:
        assert t.ok, f"ldtilecfg in {t.function} ({t.operand}): {t.detail}"
        assert t.storage == "static" and t.palette == 1
        assert t.tiles == {0: (8, 64), 1: (8, 64), 2: (16, 32), 3: (16, 32),
                           4: (16, 64), 5: (16, 64), 6: (16, 64), 7: (16, 64)}


def test_isa_audit_every_level_is_clean(artifact: Path) -> None:
    from harness.audit.artifact import audit_engine, findings_lines

    r = audit_engine(load_engine("llamacpp"), "cpu", artifact)
    assert r["arch"] == "x86_64"
    names = [a["level"] for a in r["levels"]]
    assert {"x64", "haswell", "zen4", "sapphirerapids"} <= set(names)
    assert all(a["present"] for a in r["levels"])
    assert r["clean"], findings_lines(r["levels"])


def _lib(variant: str) -> Path:
    require_variant(variant)
    spec = load_engine("llamacpp")
    return discovery.choose("llamacpp", spec.pin, _committed_fingerprint(), variant).location / "lib"


def _complete_info(variant: str, **env: str) -> dict[str, object]:
    r = subprocess.run([sys.executable, "-m", "harness", "complete", str(model_path("HARNESS_MODEL")),
                        "--prompt", "The capital of France is", "--max-tokens", "4", "--variant", variant, "--json"],
                       capture_output=True, text=True, env={**os.environ, **env}, check=False, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(json.loads(r.stdout)["info"])


def test_smoke_probe_passes_ggmls_choice(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # ggml's own pick, even in a run that forces a level (a qualification with $HARNESS_CPU_LEVEL)
    monkeypatch.delenv(levels.LEVEL_ENV, raising=False)
    lib = _lib(variant)
    if len(levels.cpu_levels(lib)) < 2:
        pytest.skip(f"{variant} has one built-in CPU level")
    v = levels.verdict(lib, refresh=True)
    assert not v.error, v.error
    assert v.excluded == {}, f"levels crashed the smoke probe on this host: {v.excluded}"
    # With nothing excluded the engine loads from the artifact dir, so ggml's own pick is the one probed.
    natural = _complete_info(variant, HARNESS_BINDING_LIB_DIR=str(lib), **{levels.LEVEL_ENV: ""})
    assert natural["cpu_variant"] == v.chosen
    assert levels.select(lib).lib_dir == lib


def test_forced_level_is_loaded(variant: str) -> None:
    lib = _lib(variant)
    if "x64" not in levels.cpu_levels(lib):
        pytest.skip(f"{variant} has no x64 level")
    assert _complete_info(variant, HARNESS_CPU_LEVEL="x64")["cpu_variant"] == "x64"
