"""A pin move, as a release engineer makes it: ``harness pin`` moves a tiny C/C++ engine's pin to an upstream
commit whose C++ header changed a signature the binding calls; the check before any build fails naming the
binding's line and the upstream declaration; a fixed binding passes. The written descriptor is compared byte
for byte (comments, order and quoting kept; pinned_on bumped; build and commit derived from the git source:
the build from upstream's build tag at the commit, ``provenance.build_tags``).

The engine ``tinypp`` is one folder on ``$HARNESS_ENGINES_PATH`` (descriptor, ABI surface, binding sources),
its upstream a local git repository with two commits: the second changes ``tiny_scaled(float, float)`` into
``tiny_scaled(const tiny_options &, float)`` in ``include/tiny.hpp`` and leaves the C header alone.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from tests.unit.test_third_engine import CMAKELISTS, HEADER, SOURCE, _git

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("git", "cmake", "c++", "cc")),
    reason="needs git, cmake and a C/C++ compiler (bash scripts/install-system-deps.sh)")

HPP_1 = """\
#pragma once
#include "tiny.h"

inline float tiny_scaled(float x, float scale) { return x * scale; }
"""
HPP_2 = """\
#pragma once
#include "tiny.h"

struct tiny_options {
    float scale = 1.0f;
};

inline float tiny_scaled(const tiny_options & o, float x) { return x * o.scale; }
"""
BINDING_CMAKE = """\
cmake_minimum_required(VERSION 3.21)
project(tinypp_binding LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
set(HARNESS_ARTIFACT "" CACHE PATH "artifact dir")
option(HEADERS_ONLY "configure for the syntax-only compile check" OFF)
add_library(_core MODULE src/binding.cpp)
target_include_directories(_core PRIVATE "${HARNESS_ARTIFACT}/include")
target_compile_definitions(_core PRIVATE TINYPP_BINDING=1)
"""
BINDING_1 = """\
#include "tiny.hpp"

#ifndef TINYPP_BINDING
#error "the binding's own defines are not in the compile command"
#endif

float binding_apply(float x) {
    return tiny_scaled(x, 2.0f);
}
"""
BINDING_2 = """\
#include "tiny.hpp"

float binding_apply(float x) {
    tiny_options o;
    o.scale = 2.0f;
    return tiny_scaled(o, x);
}
"""
DESCRIPTOR = """\
# tinypp: a C library with a C++ header; its binding calls both.
# Move the pin with `harness pin tinypp git:URL@REV`.
name: tinypp
pinned_on: "2026-01-01"
source:
  kind: git
  url: "{url}"
  commit: "{commit}"   # the commit checked out
  filter: "blob:none"
  sparse: [CMakeLists.txt, include, src]
upstream:
  repository: example/tiny
  build: 1
  commit: "{commit}"
provenance:
  build_tags: {{repository: example/tiny, pattern: 'b(?P<build>[0-9]+)'}}
cmake:
  base: {{CMAKE_BUILD_TYPE: Release}}
targets: [tiny]
artifacts:
  lib: ["libtiny.so*"]
  # the binding compiles against both headers
  include: ["include:*.h", "include:*.hpp"]
abi:
  headers: [include/tiny.h]
  include_dirs: [include]
  targets: [x86_64-linux-gnu]
"""


def _upstream(tmp: Path) -> tuple[Path, str, str]:
    work = tmp / "tinypp-src"
    (work / "include").mkdir(parents=True)
    (work / "src").mkdir()
    (work / "include" / "tiny.h").write_text(HEADER)
    (work / "include" / "tiny.hpp").write_text(HPP_1)
    (work / "src" / "tiny.c").write_text(SOURCE)
    (work / "CMakeLists.txt").write_text(CMAKELISTS)
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-qm", "tiny 1", cwd=work)
    _git("tag", "b1", cwd=work)
    one = _git("rev-parse", "HEAD", cwd=work)
    (work / "include" / "tiny.hpp").write_text(HPP_2)
    _git("commit", "-qam", "tiny 2: options", cwd=work)
    _git("tag", "v2", cwd=work)
    _git("tag", "b2", cwd=work)
    two = _git("rev-parse", "HEAD", cwd=work)
    bare = tmp / "tinypp.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp)
    _git("config", "remote.origin.url", "https://example.invalid/example/tiny.git", cwd=bare)  # a mirror of it
    _git("config", "uploadpack.allowFilter", "true", cwd=bare)
    _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare)
    return bare, one, two


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def tinypp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, str, str]:
    import harness.engine.plugin as plugin
    from harness.engine import registry

    bare, one, two = _upstream(tmp_path / "elsewhere")  # inside the recipe's project: an untrusted one may fetch it
    engines = tmp_path / "elsewhere" / "engines"
    folder = engines / "tinypp"
    (folder / "binding" / "src").mkdir(parents=True)
    (folder / "engine.yaml").write_text(DESCRIPTOR.format(url=bare.as_uri(), commit=one))
    (folder / "binding" / "CMakeLists.txt").write_text(BINDING_CMAKE)
    (folder / "binding" / "src" / "binding.cpp").write_text(BINDING_1)
    monkeypatch.setenv("HARNESS_ENGINES_PATH", str(engines))
    monkeypatch.setenv("HARNESS_TRUST", "tinypp")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_NO_PROGRESS", "1")
    plugin.get_manager.cache_clear()
    registry.reset()
    yield folder, bare.as_uri(), one, two
    plugin.get_manager.cache_clear()
    registry.reset()


def test_pin_moves_and_the_binding_check_fails_before_any_build(
        tinypp: tuple[Path, str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, url, one, two = tinypp
    # at the old pin: the C surface snapshotted, the binding compiles (its own defines reach the compile)
    code, _, err = _run(capsys, "abi", "snapshot", "tinypp")
    assert code == 0, err
    code, out, err = _run(capsys, "abi", "check", "tinypp", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ok"] and doc["binding"]["ok"]
    assert [Path(u).name for u in doc["binding"]["units"]] == ["binding.cpp"]
    before = (folder / "engine.yaml").read_text()

    # the move: dry run first (prints the diff, writes nothing)
    code, out, err = _run(capsys, "pin", "tinypp", f"git:{url}@v2", "--dry-run")
    assert code == 0, err
    assert f'-  commit: "{one}"   # the commit checked out' in out
    assert f'+  commit: "{two}"   # the commit checked out' in out
    assert (folder / "engine.yaml").read_text() == before

    code, out, err = _run(capsys, "pin", "tinypp", f"git:{url}@v2")
    assert code == 7, out + err
    # the descriptor, byte for byte: only the pin's fields and the date moved, comments and quoting kept
    # the mirror lies in the engine folder's project: written relative to it, never as this machine's path
    expected = (before.replace(f'commit: "{one}"', f'commit: "{two}"').replace(f'url: "{url}"', 'url: "tinypp.git"')
                .replace("  build: 1\n", "  build: 2\n")
                .replace('pinned_on: "2026-01-01"', f'pinned_on: "{datetime.date.today().isoformat()}"'))
    assert (folder / "engine.yaml").read_text() == expected
    # derived from the source: the commit v2 names, which is upstream's build tag b2; the move's direction first
    assert out.splitlines()[0] == "pin tinypp: forward, build 1 -> 2 (1 build newer)"
    assert f"build 2: commit {two[:12]} is the build tag b2 of example/tiny" in err
    # the failure names the binding's line and the upstream declaration it met, and what to do
    assert "binding.cpp:8:" in err and "tiny_scaled" in err
    assert "upstream: include/tiny.hpp:" in err
    assert "The binding must change" in err
    assert "  fetch: ok" in err and "  patch --check: ok" in err
    # before any build: no build directory, no artifact
    cache = Path(os.environ["HARNESS_CACHE"])
    assert not list(cache.glob("work/*/build")) and not (cache / "dist").exists()

    # the binding follows the new API: the check passes, in seconds
    (folder / "binding" / "src" / "binding.cpp").write_text(BINDING_2)
    code, out, err = _run(capsys, "abi", "check", "tinypp", "--json")
    assert code == 0, out + err
    assert json.loads(out)["binding"]["ok"]
    # a second check with nothing changed compiles nothing (stamped)
    code, out, _ = _run(capsys, "abi", "check", "tinypp", "--json")
    assert code == 0 and json.loads(out)["binding"]["cached"]

    # the report a pull request takes names the pins, never this host's cache: two cached trees as pins
    trees = sorted(cache.glob("sources/git-*/tree"))
    assert len(trees) == 2
    code, out, err = _run(capsys, "abi", "diff", str(trees[0]), str(trees[1]), "--markdown", "--engine", "tinypp")
    assert code == 0, err
    assert str(cache) not in out and str(Path.home()) + "/" not in out
    assert "## ABI/API changes: tinypp git " in out


def test_a_descriptor_the_source_contradicts_is_refused_at_fetch(
        tinypp: tuple[Path, str, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    folder, _, one, two = tinypp
    text = (folder / "engine.yaml").read_text()
    # the old pin's upstream commit left beside a moved source: what a hand edit did
    (folder / "engine.yaml").write_text(text.replace(f'commit: "{one}"   #', f'commit: "{two}"   #'))
    code, _, err = _run(capsys, "fetch", "tinypp")
    assert code == 3, err
    assert f"upstream.commit: {one}, but the source holds commit {two}" in err
    assert "harness pin tinypp" in err


def test_provenance_from_a_package_version() -> None:
    from harness.source.provenance import disagreements, from_source

    rules = {"build_from_version": {"xllamacpp": r"\d{4}\.\d{1,2}\.(?P<build>\d+)(?:\.\d+)?"}}
    found = from_source({"kind": "pypi-sdist", "package": "xllamacpp", "version": "2026.10.11549"}, rules)
    assert found.build == 11549 and found.commit is None
    assert from_source({"kind": "pypi-sdist", "package": "xllamacpp", "version": "2026.4.8672.1"}, rules).build == 8672
    # llama-cpp-python's version says nothing of the build
    assert from_source({"kind": "pypi-sdist", "package": "llama-cpp-python", "version": "0.3.36"}, rules).build is None
    assert disagreements({"build": 11312, "commit": "0c1e570"}, found) == [
        "upstream.build: 11312, but the source holds build 11549 (build 11549: xllamacpp's version 2026.10.11549 "
        r"encodes it (provenance.build_from_version: \d{4}\.\d{1,2}\.(?P<build>\d+)(?:\.\d+)?))"]
    assert disagreements({"build": 11549, "commit": "unknown"}, found) == []


def test_the_committed_llamacpp_descriptor_agrees_with_its_source() -> None:
    from harness.engine.descriptor import load_engine
    from harness.source import provenance

    spec = load_engine("llamacpp")
    found = provenance.check(spec)  # raises on a disagreement
    if spec.source.package == "xllamacpp":
        assert found.build == spec.upstream["build"]


@pytest.mark.skipif(os.environ.get("HARNESS_OFFLINE") == "1", reason="needs the package index (HARNESS_OFFLINE=1)")
def test_pin_llamacpp_to_llama_cpp_python_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Another package's sdist: its engine tree found by the ABI headers; its version encodes no build, so the
    build must be given, and the commit nobody gave is written unknown, never the current pin's."""
    from harness.engine.descriptor import load_engine

    path = load_engine("llamacpp").root / "engine.yaml"
    before = path.read_text()
    code, _, err = _run(capsys, "pin", "llamacpp", "pypi:llama-cpp-python==0.3.35", "--dry-run")
    assert code == 2, err
    assert "does not carry the upstream build" in err and "--upstream-build" in err
    code, out, err = _run(capsys, "pin", "llamacpp", "pypi:llama-cpp-python==0.3.35", "--dry-run",
                          "--upstream-build", "11268", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["new"]["source"]["package"] == "llama-cpp-python"
    assert doc["new"]["source"]["version"] == "0.3.35"
    assert doc["new"]["source"]["subdir"] == "vendor/llama.cpp"
    assert len(doc["new"]["source"]["sha256"]) == 64
    assert doc["new"]["upstream"]["build"] == 11268
    assert doc["new"]["upstream"]["commit"] == "unknown"
    assert "build 11268: given (--upstream-build)" in doc["provenance"]
    assert "+  package: llama-cpp-python" in doc["diff"] and not doc["written"]
    assert path.read_text() == before


def test_an_untrusted_recipe_s_binding_is_checked_in_the_sandbox(
        tinypp: tuple[Path, str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The check configures the binding's CMake project and compiles its units: code of the recipe. For a
    recipe the user has not trusted, both run in the build sandbox: a unit that includes a host file gets no
    such file, and its content never reaches the diagnostics."""
    from harness.sandbox.bwrap import unavailable

    if unavailable():
        pytest.skip(f"no sandbox here: {unavailable()}")
    folder, *_ = tinypp
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET_TOKEN_4711 leaked;\n")
    (folder / "binding" / "src" / "binding.cpp").write_text(f'#include "{secret}"\n' + BINDING_1)
    monkeypatch.delenv("HARNESS_TRUST")
    code, out, err = _run(capsys, "abi", "check", "tinypp", "--json")
    assert code == 7
    problems = json.loads(out)["binding"]["problems"]
    assert any("secret.txt" in p["message"] and "No such file" in p["message"] for p in problems), problems
    assert "SECRET_TOKEN_4711" not in out + err
    # trusted, the same unit reads the file on the host (the sandbox made the difference)
    monkeypatch.setenv("HARNESS_TRUST", "tinypp")
    code, out, err = _run(capsys, "abi", "check", "tinypp", "--json")
    assert code == 7 and "SECRET_TOKEN_4711" in out


def test_cpp_records_differ_by_name_signature_member_and_enumerator() -> None:
    from harness.abi.cpp import diff_records, merge_used

    a = {"functions": {"f": ["int (int)"], "g": ["void ()"]}, "classes": {"C": {"x": ["int"], "y": ["bool"]}, "D": {}},
         "enums": {"E": {"A": 1}}}
    b = {"functions": {"f": ["int (long)"], "h": ["void ()"]}, "classes": {"C": {"x": ["long"]}},
         "enums": {"E": {"A": 2, "B": 3}}}
    assert diff_records(a, b) == ["f: int (int) -> int (long)", "g: removed (was void ())", "h: added (void ())",
                                  "C::x: int -> long", "C::y: removed (was bool)", "D: class removed",
                                  "E::A: 1 -> 2", "E::B: absent -> 3"]
    assert diff_records(a, a) == []
    # what either binding used: the old binding's members stay in view after the new one stopped using them
    old = {"headers": ["common/chat.h"], "include_dirs": ["include"],
           "used": {"functions": ["f"], "members": {"C": ["load"]}, "enums": {}}}
    new = {"headers": ["common/peg.h"], "include_dirs": ["include", "include/common"],
           "used": {"functions": ["g"], "members": {"C": ["parse"]}, "enums": {"E": ["A"]}}}
    both = merge_used(new, old)
    assert both["used"] == {"functions": ["f", "g"], "members": {"C": ["load", "parse"]}, "enums": {"E": ["A"]}}
    assert both["headers"] == ["common/chat.h", "common/peg.h"] and both["include_dirs"] == ["include", "include/common"]
