"""A third engine, added the way a release engineer would: data only, no core change, no plugin.

``tiny`` is a small C library written here (a header with ``TINY_ABI_VERSION``, a struct, a few
functions; CMake writes ``libtiny.so`` at the build root), committed into a local bare git
repository. Its project root (``engines/tiny/engine.yaml``, ``patches/tiny/0001-*.patch``,
``abi/tiny/``) lives in a temporary directory found through ``$HARNESS_ENGINES_PATH``. The
engine goes through fetch (git, blob filter, sparse paths), patch, ABI snapshot and check, a
``cpu`` build that collects the library, the refusal of a row it does not map, ``abi diff``
between two commits and the check after a version bump, all through the CLI. A few seconds.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.cli import main

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("git", "cmake", "ninja", "cc")),
    reason="needs git, cmake, ninja and a C compiler (bash scripts/install-system-deps.sh)")

HEADER = """\
#ifndef TINY_H
#define TINY_H
#include <stdint.h>

#define TINY_ABI_VERSION 1

struct tiny_params {
    int32_t n_threads;
    float scale;
};

struct tiny_params tiny_default_params(void);
int32_t tiny_abi_version(void);
float tiny_apply(const struct tiny_params * p, float x);

#endif
"""
SOURCE = """\
#include "tiny.h"

struct tiny_params tiny_default_params(void) {
    struct tiny_params p = {1, 1.0f};
    return p;
}

int32_t tiny_abi_version(void) { return TINY_ABI_VERSION; }

float tiny_apply(const struct tiny_params * p, float x) {
    return x * p->scale;
}
"""
CMAKELISTS = """\
cmake_minimum_required(VERSION 3.21)
project(tiny C)
option(TINY_PORTABLE "no host-specific code" OFF)
add_library(tiny SHARED src/tiny.c)
target_include_directories(tiny PUBLIC include)
set_target_properties(tiny PROPERTIES VERSION 1.0.0 SOVERSION 1)
if (TINY_PORTABLE)
    target_compile_definitions(tiny PRIVATE TINY_PORTABLE=1)
endif()
"""
PATCH = """\
Subject: tiny: a negative scale is clamped to zero
Why: The backend never wants a sign flip from a default-constructed scale; the
 clamp keeps tiny_apply total.
Upstream: pending
Retire-when: upstream clamps the scale itself (harness patch --check tiny says
 "already upstream")
---
diff --git a/src/tiny.c b/src/tiny.c
--- a/src/tiny.c
+++ b/src/tiny.c
@@ -10,3 +10,3 @@ int32_t tiny_abi_version(void) { return TINY_ABI_VERSION; }
 float tiny_apply(const struct tiny_params * p, float x) {
-    return x * p->scale;
+    return x * (p->scale < 0.0f ? 0.0f : p->scale);
 }
"""
DESCRIPTOR = """\
# A third engine: a git source fetched with a blob filter and only the paths the build needs.
name: tiny
source:
  kind: git
  url: "{url}"
  commit: "{commit}"
  filter: "blob:none"
  sparse: [CMakeLists.txt, include, src]
upstream: {{repository: example/tiny, commit: "{commit}"}}
cmake:
  base: {{CMAKE_BUILD_TYPE: Release, CMAKE_C_FLAGS: "-O2"}}
  intents:
    cpu_levels:
      runtime: {{TINY_PORTABLE: "ON"}}
targets: [tiny]
artifacts:
  lib: ["libtiny.so*", "libtiny*.dylib"]
  include: ["include:*.h"]
abi:
  headers: [include/tiny.h]
  include_dirs: [include]
  targets: [x86_64-linux-gnu, aarch64-linux-gnu]
  version_macro: TINY_ABI_VERSION
"""


def _git(*args: str, cwd: Path) -> str:
    r = subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                       capture_output=True, text=True)
    return r.stdout.strip()


def _repo(tmp: Path) -> tuple[Path, str, str]:
    """The library's repository: commit one, then commit two (ABI version 2, a new field)."""
    work = tmp / "tiny-src"
    (work / "include").mkdir(parents=True)
    (work / "src").mkdir()
    (work / "testdata").mkdir()
    (work / "include" / "tiny.h").write_text(HEADER)
    (work / "src" / "tiny.c").write_text(SOURCE)
    (work / "CMakeLists.txt").write_text(CMAKELISTS)
    (work / "testdata" / "weights.bin").write_bytes(bytes(range(256)) * 256)  # the build never needs it
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-qm", "tiny 1", cwd=work)
    one = _git("rev-parse", "HEAD", cwd=work)
    (work / "include" / "tiny.h").write_text(
        HEADER.replace("TINY_ABI_VERSION 1", "TINY_ABI_VERSION 2").replace("    float scale;\n",
                                                                            "    float scale;\n    float bias;\n"))
    _git("commit", "-qam", "tiny 2: bias", cwd=work)
    two = _git("rev-parse", "HEAD", cwd=work)
    bare = tmp / "tiny.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp)
    _git("config", "uploadpack.allowFilter", "true", cwd=bare)
    _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare)
    return bare, one, two


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_third_engine_with_data_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    bare, one, two = _repo(tmp_path / "proj")  # inside the project: the only local repository it may fetch
    proj = tmp_path / "proj"
    (proj / "engines" / "tiny").mkdir(parents=True)
    (proj / "engines" / "tiny" / "patches").mkdir(parents=True)
    descriptor = proj / "engines" / "tiny" / "engine.yaml"
    descriptor.write_text(DESCRIPTOR.format(url=bare.as_uri(), commit=one))
    (proj / "engines" / "tiny" / "patches" / "0001-tiny-clamp-negative-scale.patch").write_text(PATCH)
    monkeypatch.setenv("HARNESS_ENGINES_PATH", str(proj / "engines"))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_NO_PROGRESS", "1")
    monkeypatch.delenv("HARNESS_DIST", raising=False)

    code, out, _ = _run(capsys, "engines", "--json")
    assert code == 0 and "tiny" in [e["engine"] for e in json.loads(out)]

    # fetch: only the sparse paths, keyed by the full commit
    code, out, _ = _run(capsys, "fetch", "tiny", "--json")
    assert code == 0
    fetched = json.loads(out)
    src = Path(fetched["path"])
    assert sorted(p.name for p in src.iterdir()) == ["CMakeLists.txt", "include", "src"]
    assert src.parent.name.startswith(f"git-{one}-sparse-")

    # patch
    code, out, _ = _run(capsys, "patch", "--check", "tiny", "--json")
    assert code == 0 and [p["status"] for p in json.loads(out)] == ["applies"]
    code, out, _ = _run(capsys, "patch", "tiny", "--json")
    assert code == 0 and "p->scale < 0.0f" in (Path(json.loads(out)["path"]) / "src" / "tiny.c").read_text()

    # ABI snapshot, then check
    code, out, _ = _run(capsys, "abi", "snapshot", "tiny", "--json")
    assert code == 0
    surface = json.loads((proj / "engines" / "tiny" / "abi" / "surface.json").read_text())
    assert surface["constants"] == {"TINY_ABI_VERSION": 1}
    assert set(surface["functions"]) == {"tiny_default_params", "tiny_abi_version", "tiny_apply"}
    code, out, _ = _run(capsys, "abi", "check", "tiny", "--json")
    assert code == 0 and json.loads(out)["declared_version"] == 1

    # a cpu build: the intent maps to the engine's own define; the library written at the build root is collected
    code, out, err = _run(capsys, "build", "tiny", "--variant", "cpu", "--json")
    assert code == 0, err
    artifact = Path(json.loads(out)[0]["artifact"])
    files = sorted(p.relative_to(artifact).as_posix() for p in artifact.rglob("*") if not p.is_dir())
    assert files == ["include/tiny.h", "lib/libtiny.so", "lib/libtiny.so.1", "lib/libtiny.so.1.0.0",
                     "manifest.json"]
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["intent"] == {"cpu_levels": "runtime"} and manifest["defines"]["TINY_PORTABLE"] == "ON"
    assert not any(k.startswith("GGML_") for k in manifest["defines"])
    assert manifest["abi_fingerprint"] == surface["fingerprint"]
    code, out, _ = _run(capsys, "build", "tiny", "--variant", "cpu", "--json")
    assert code == 0 and json.loads(out)[0]["built"] is False

    # a row the descriptor does not map is refused, with the reason
    code, _, err = _run(capsys, "build", "tiny", "--variant", "cuda")
    assert code == 2 and "not supported by tiny" in err and "gpu: cuda" in err

    # the engine is known to validate before it has a plugin
    config = tmp_path / "tiny-model.yaml"
    config.write_text("name: tiny-model\nbackend: tiny\nparameters:\n  model: tiny.gguf\n")
    code, out, _ = _run(capsys, "validate", str(config), "--json")
    assert code == 0, out

    # abi diff between two commits: the pins fit only the git engine; the declared version comes first
    code, out, err = _run(capsys, "abi", "diff", one, two, "--json")
    assert code == 0, err
    lines = [c["line"] for c in json.loads(out)["changes"]]
    assert lines[0] == "the engine's declared ABI version moved from 1 to 2 (TINY_ABI_VERSION)"
    assert "tiny_params.bias: added at offset 8 (float)" in lines

    # move the pin to the second commit: the check reports the declared ABI version first
    descriptor.write_text(DESCRIPTOR.format(url=bare.as_uri(), commit=two))
    code, _, err = _run(capsys, "abi", "check", "tiny")
    assert code == 7
    reported = [line.strip() for line in err.splitlines()]
    first = next(i for i, line in enumerate(reported) if "disagree with the committed ABI surface" in line)
    assert reported[first + 1] == "the engine's declared ABI version moved from 1 to 2 (TINY_ABI_VERSION)"
