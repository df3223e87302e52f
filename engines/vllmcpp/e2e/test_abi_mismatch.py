"""A binding compiled for one VLLM_ABI_VERSION, loaded with a libvllm that reports another, is
refused at load, naming both: the installed binding's package is copied and its libvllm replaced
by a stub whose vllm_abi_version() answers one more (every other C ABI symbol defined, never called).

Runs in a child process: one process holds one copy of a native module."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.build.pipeline import fetch
from harness.core.errors import BindingError
from harness.engine.descriptor import load_engine
from harness.runtime import discovery

ENGINE = "vllmcpp"
CHILD = """
import importlib.util, json, sys
from pathlib import Path
from harness.core.errors import BindingError
from harness_plugins.vllmcpp.engine import handshake
loc = Path(sys.argv[1])
spec = importlib.util.spec_from_file_location(sys.argv[2], loc / "__init__.py", submodule_search_locations=[str(loc)])
pkg = importlib.util.module_from_spec(spec); sys.modules[sys.argv[2]] = pkg; spec.loader.exec_module(pkg)
import importlib; core = importlib.import_module(sys.argv[2] + "._core")
out = {"compiled": core.COMPILED_ABI_VERSION, "library": core.library_abi_version()}
try:
    handshake(core)
except BindingError as e:
    out["handshake"] = str(e)
try:
    core.Engine("/nonexistent", {})
except core.AbiMismatchError as e:
    out["engine"] = str(e)
print(json.dumps(out))
"""


def test_a_library_of_another_abi_version_is_refused_naming_both(tmp_path: Path) -> None:
    if not shutil.which("cc"):
        pytest.skip("needs a C compiler")
    spec = load_engine(ENGINE)
    try:
        cand = discovery.choose(ENGINE, spec.pin, discovery.committed_fingerprint(ENGINE))
    except BindingError as e:
        pytest.skip(f"no usable vllm.cpp binding: {e}")
    copy = tmp_path / cand.location.name
    shutil.copytree(cand.location, copy)
    surface = json.loads(spec.surface_path.read_text())
    compiled = int(surface["constants"]["VLLM_ABI_VERSION"])
    stubs = [f"void {name}(void) {{}}" for name in sorted(surface["functions"])
             if name not in ("vllm_abi_version", "vllm_version")]
    src = tmp_path / "stub.c"
    src.write_text("\n".join([*stubs, f"int vllm_abi_version(void) {{ return {compiled + 1}; }}",
                              'const char* vllm_version(void) { return "stub"; }', ""]))
    for lib in (copy / "lib").glob("libvllm.so*"):
        lib.unlink()
    # the real library's symbols carry the version node of upstream's cmake/vllm_export.map: the stub's must too
    vmap = fetch(spec).path / "cmake" / "vllm_export.map"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libvllm.so.0", f"-Wl,--version-script,{vmap}",
                    "-o", str(copy / "lib" / "libvllm.so.0"), str(src)], check=True)
    r = subprocess.run([sys.executable, "-c", CHILD, str(copy), cand.package], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert (out["compiled"], out["library"]) == (compiled, compiled + 1)
    assert f"VLLM_ABI_VERSION {compiled}" in out["handshake"] and f"vllm_abi_version() {compiled + 1}" in out["handshake"]
    assert f"ABI version {compiled + 1}" in out["engine"] and f"VLLM_ABI_VERSION {compiled}" in out["engine"]
