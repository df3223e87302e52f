"""The artifact collector reads CMake's file API: libraries are found wherever the build writes them.

The llama.cpp and stable-diffusion.cpp layouts below are those of their real cpu builds (every
library in ``<build>/bin``, SONAME links beside them); the expected file lists are the ``lib/`` and
``bin/`` entries of the artifacts the previous collector (``bin/`` and one level below) made.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from harness.build import cmake_fileapi
from harness.build.cmake import _collect
from harness.core.errors import BuildError
from harness.core.types import EngineSpec, SourceSpec
from harness.engine.descriptor import load_engine
from harness.sandbox.confined import Tree

LEVELS = ["alderlake", "cannonlake", "cascadelake", "cooperlake", "haswell", "icelake", "ivybridge", "piledriver",
          "sandybridge", "sapphirerapids", "skylakex", "sse42", "x64", "zen4"]
_ids = itertools.count()


def write_reply(build: Path, targets: list[tuple[str, str, list[str]]]) -> None:
    """A codemodel-v2 reply as CMake writes it for the ``client-harness`` query."""
    reply = build / cmake_fileapi.API / "reply"
    reply.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, kind, artifacts in targets:
        jf = f"target-{name}-{next(_ids):04x}.json"
        (reply / jf).write_text(json.dumps({"name": name, "type": kind, "artifacts": [{"path": a} for a in artifacts]}))
        entries.append({"name": name, "id": f"{name}::@1", "jsonFile": jf})
    (reply / "codemodel-v2-1.json").write_text(json.dumps(
        {"kind": "codemodel", "paths": {"build": str(build), "source": "/src"},
         "configurations": [{"name": "Release", "targets": entries}]}))
    (reply / "index-2026-01-01T00-00-00-0000.json").write_text(json.dumps(
        {"reply": {"client-harness": {"codemodel-v2": {"jsonFile": "codemodel-v2-1.json", "kind": "codemodel"}}}}))


def versioned(d: Path, name: str, soversion: str, version: str) -> None:
    """``lib<name>.so -> .so.<soversion> -> .so.<version>`` as CMake writes them."""
    d.mkdir(parents=True, exist_ok=True)
    (d / f"lib{name}.so.{version}").write_bytes(name.encode())
    (d / f"lib{name}.so.{soversion}").symlink_to(f"lib{name}.so.{version}")
    (d / f"lib{name}.so").symlink_to(f"lib{name}.so.{soversion}")


def plain(d: Path, filename: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / filename).write_bytes(filename.encode())


def llamacpp_build(build: Path) -> None:
    b = build / "bin"
    for name in ("ggml", "ggml-base"):
        versioned(b, name, "0", "0.25.3")
    for name in ("llama", "llama-common", "mtmd"):
        versioned(b, name, "0", "0.5.0")
    for level in LEVELS:
        plain(b, f"libggml-cpu-{level}.so")
    for impl in ("bench", "cli", "server"):
        plain(b, f"libllama-{impl}-impl.so")
    for exe in ("llama-bench", "llama-cli", "llama-server", "llama-quantize"):
        plain(b, exe)
    plain(build / "common", "libbuild_info.a")
    plain(build / "src", "llama.pc")
    targets = [("ggml", "SHARED_LIBRARY", ["bin/libggml.so"]), ("ggml-base", "SHARED_LIBRARY", ["bin/libggml-base.so"]),
               ("llama", "SHARED_LIBRARY", ["bin/libllama.so"]), ("llama-common", "SHARED_LIBRARY", ["bin/libllama-common.so"]),
               ("mtmd", "SHARED_LIBRARY", ["bin/libmtmd.so"]), ("build_info", "STATIC_LIBRARY", ["common/libbuild_info.a"])]
    targets += [(f"ggml-cpu-{lv}", "MODULE_LIBRARY", [f"bin/libggml-cpu-{lv}.so"]) for lv in LEVELS]
    targets += [(f"llama-{i}-impl", "SHARED_LIBRARY", [f"bin/libllama-{i}-impl.so"]) for i in ("bench", "cli", "server")]
    targets += [(e, "EXECUTABLE", [f"bin/{e}"]) for e in ("llama-bench", "llama-cli", "llama-server", "llama-quantize")]
    write_reply(build, targets)


def sdcpp_build(build: Path) -> None:
    b = build / "bin"
    for name in ("ggml", "ggml-base"):
        versioned(b, name, "0", "0.9.8")
    plain(b, "libstable-diffusion.so")
    for level in LEVELS:
        plain(b, f"libggml-cpu-{level}.so")
    targets = [("stable-diffusion", "SHARED_LIBRARY", ["bin/libstable-diffusion.so"]),
               ("ggml", "SHARED_LIBRARY", ["bin/libggml.so"]), ("ggml-base", "SHARED_LIBRARY", ["bin/libggml-base.so"])]
    targets += [(f"ggml-cpu-{lv}", "MODULE_LIBRARY", [f"bin/libggml-cpu-{lv}.so"]) for lv in LEVELS]
    write_reply(build, targets)


def listing(dest: Path) -> dict[str, str]:
    return {p.relative_to(dest).as_posix(): f"-> {os.readlink(p)}" if p.is_symlink() else "file"
            for p in sorted(dest.rglob("*")) if p.is_file() or p.is_symlink()}


def _names(versioned_libs: dict[str, tuple[str, str]], plain_libs: list[str]) -> set[str]:
    out = set(plain_libs)
    for name, (so, ver) in versioned_libs.items():
        out |= {f"lib{name}.so", f"lib{name}.so.{so}", f"lib{name}.so.{ver}"}
    return out


LLAMACPP_LIBS = _names({"ggml": ("0", "0.25.3"), "ggml-base": ("0", "0.25.3"), "llama": ("0", "0.5.0"),
                        "llama-common": ("0", "0.5.0"), "mtmd": ("0", "0.5.0")},
                       [f"libggml-cpu-{lv}.so" for lv in LEVELS]
                       + [f"libllama-{i}-impl.so" for i in ("bench", "cli", "server")])
SDCPP_LIBS = _names({"ggml": ("0", "0.9.8"), "ggml-base": ("0", "0.9.8")},
                    [f"libggml-cpu-{lv}.so" for lv in LEVELS] + ["libstable-diffusion.so"])


@pytest.mark.parametrize(("engine_name", "make", "libs", "bins"), [
    ("llamacpp", llamacpp_build, LLAMACPP_LIBS, {"llama-bench", "llama-cli", "llama-server"}),
    ("sdcpp", sdcpp_build, SDCPP_LIBS, set()),
])
def test_collected_files_keep_the_engines_lists(tmp_path: Path, engine_name: str, make: object, libs: set[str],
                                                bins: set[str]) -> None:
    engine = load_engine(engine_name)
    build = tmp_path / "build"
    make(build)  # type: ignore[operator]
    (tmp_path / "tree").mkdir()
    _collect(engine, tmp_path / "tree", build, tmp_path / "dest")
    got = listing(tmp_path / "dest")
    assert {k[4:] for k in got if k.startswith("lib/")} == libs
    assert {k[4:] for k in got if k.startswith("bin/")} == bins
    assert len(libs) == (32 if engine_name == "llamacpp" else 21)  # the real artifacts' counts
    # SONAME links stay links, relative, as the build wrote them.
    assert got["lib/libggml.so"] == "-> libggml.so.0"


def _tiny(tmp_path: Path, bins: tuple[str, ...] = ()) -> EngineSpec:
    return EngineSpec(name="tiny", root=tmp_path / "engines" / "tiny", source=SourceSpec(kind="git"), upstream={},
                      cmake={"base": {}}, targets=("tiny",),
                      artifacts={"lib": ("lib*.so*",), "bin": bins, "include": ()}, abi={})


def test_libraries_at_the_build_root_and_deeper_are_found(tmp_path: Path) -> None:
    build = tmp_path / "build"
    versioned(build, "tiny", "3", "3.1.0")
    plain(build / "plugins" / "deep", "libtiny-extra.so")
    plain(build / "tools", "tiny-info")
    plain(build / "unrelated", "libstale.so")  # no target writes here: not collected
    write_reply(build, [("tiny", "SHARED_LIBRARY", ["libtiny.so"]),
                        ("tiny-extra", "MODULE_LIBRARY", ["plugins/deep/libtiny-extra.so"]),
                        ("tiny-info", "EXECUTABLE", ["tools/tiny-info"])])
    (tmp_path / "tree").mkdir()
    _collect(_tiny(tmp_path, ("tiny-info",)), tmp_path / "tree", build, tmp_path / "dest")
    assert listing(tmp_path / "dest") == {
        "bin/tiny-info": "file", "lib/libtiny-extra.so": "file", "lib/libtiny.so": "-> libtiny.so.3",
        "lib/libtiny.so.3": "-> libtiny.so.3.1.0", "lib/libtiny.so.3.1.0": "file"}


def test_without_a_reply_the_old_places_are_searched(tmp_path: Path) -> None:
    """A build dir configured before the query existed: bin/ and one level below, as before."""
    build = tmp_path / "build"
    versioned(build / "bin", "tiny", "3", "3.1.0")
    (tmp_path / "tree").mkdir()
    _collect(_tiny(tmp_path), tmp_path / "tree", build, tmp_path / "dest")
    assert sorted(listing(tmp_path / "dest")) == ["lib/libtiny.so", "lib/libtiny.so.3", "lib/libtiny.so.3.1.0"]
    root_only = tmp_path / "b2"
    versioned(root_only, "tiny", "3", "3.1.0")
    with pytest.raises(BuildError, match="one level below"):
        _collect(_tiny(tmp_path), tmp_path / "tree", root_only, tmp_path / "dest2")


def test_no_library_names_the_directories_searched(tmp_path: Path) -> None:
    build = tmp_path / "build"
    plain(build / "out", "libother.a")
    write_reply(build, [("other", "SHARED_LIBRARY", ["out/libother.so"])])
    (tmp_path / "tree").mkdir()
    with pytest.raises(BuildError, match=r"lib\*\.so\*.*library directories of the build: .*out"):
        _collect(_tiny(tmp_path), tmp_path / "tree", build, tmp_path / "dest")
    with pytest.raises(BuildError, match="expected binary tiny-info not built"):
        _collect(_tiny(tmp_path, ("tiny-info",)), tmp_path / "tree", build, tmp_path / "dest3")


def test_query_file_and_unreadable_reply(tmp_path: Path) -> None:
    cmake_fileapi.write_query(Tree(tmp_path))
    assert (tmp_path / ".cmake/api/v1/query/client-harness/codemodel-v2").is_file()
    assert cmake_fileapi.read_targets(Tree(tmp_path)) is None
    reply = tmp_path / cmake_fileapi.API / "reply"
    reply.mkdir(parents=True)
    (reply / "index-1.json").write_text("{not json")
    assert cmake_fileapi.read_targets(Tree(tmp_path)) is None


def test_headers_keep_their_directories_below_the_dir_named(tmp_path: Path) -> None:
    """``DIR:GLOB`` keeps paths relative to DIR (``.``: the tree's root, so common/chat.h stays there and its
    ``#include "jinja/parser.h"`` finds common/jinja/parser.h); a bare glob flattens into include/."""
    build = tmp_path / "build"
    versioned(build / "bin", "tiny", "3", "3.1.0")
    tree = tmp_path / "tree"
    for rel in ("include/tiny.h", "common/chat.h", "common/jinja/parser.h", "extra/flat.h"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text("// header\n")
    engine = replace(_tiny(tmp_path), artifacts={"lib": ("lib*.so*",), "bin": (), "include": (
        "include:*.h", ".:common/*.h", ".:common/jinja/*.h", "extra/*.h")})
    _collect(engine, tree, build, tmp_path / "dest")
    assert sorted(k for k in listing(tmp_path / "dest") if k.startswith("include/")) == [
        "include/common/chat.h", "include/common/jinja/parser.h", "include/flat.h", "include/tiny.h"]


def test_a_dot_dir_include_keeps_the_paths_below_the_tree(tmp_path: Path) -> None:
    """``.:common/*.h`` keeps ``common/`` (the binding includes ``common/...`` and ``common/jinja/...``); a bare
    glob flattens. The collector rewritten over the confined accessor once flattened the first (jinja/parser.h
    then missed the binding's build)."""
    tree = tmp_path / "tree"
    (tree / "common" / "jinja").mkdir(parents=True)
    (tree / "common" / "chat.h").write_text("/* chat */\n")
    (tree / "common" / "jinja" / "parser.h").write_text("/* parser */\n")
    (tree / "include").mkdir()
    (tree / "include" / "llama.h").write_text("/* llama */\n")
    build = tmp_path / "build"
    plain(build / "bin", "libtiny.so")
    engine = _tiny(tmp_path)
    engine = EngineSpec(**{**engine.__dict__, "artifacts": {
        **engine.artifacts, "include": ("include:*.h", ".:common/*.h", ".:common/jinja/*.h", "common/jinja/*.h")}})
    _collect(engine, tree, build, tmp_path / "dest")
    got = {p.relative_to(tmp_path / "dest" / "include").as_posix() for p in (tmp_path / "dest" / "include").rglob("*.h")}
    assert got == {"llama.h", "common/chat.h", "common/jinja/parser.h", "parser.h"}
