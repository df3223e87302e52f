"""Check against a committed surface, the used set, pins for `abi diff`, and the CLI handlers."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import sysconfig
import tarfile
from pathlib import Path
from typing import Any

import pytest

from harness.abi import pins
from harness.abi import surface as surf
from harness.abi.check import check_tree, differences, snapshot_config
from harness.abi.used import source_identifiers, undefined_symbols, used_from
from harness.cli import abi as abi_cli
from harness.core.errors import AbiError, SourceError, UsageError
from harness.core.types import EngineSpec, SourceSpec

from .test_index import isolate_pip, write_project

HEADER = """\
#include <stdint.h>
#include <stdbool.h>
#define LLAMA_STATE_SEQ_VERSION 2
struct llama_context_params { uint32_t n_ctx; bool flash_attn; };
struct llama_unused { int x; };
struct llama_context_params llama_context_default_params(void);
int32_t llama_decode(int32_t n);
int32_t llama_unused_fn(struct llama_unused * u);
"""
ABI: dict[str, Any] = {"headers": ["include/llama.h"], "include_dirs": ["include"],
                       "targets": ["x86_64-linux-gnu", "arm64-apple-darwin"]}


def tree(root: Path, text: str = HEADER) -> Path:
    (root / "include").mkdir(parents=True, exist_ok=True)
    (root / "include" / "llama.h").write_text(text)
    return root


def commit(tmp_path: Path, used: set[str] | None) -> Path:
    s = snapshot_config(tree(tmp_path / "old"), ABI, meta={"engine": "llamacpp"})
    if used is not None:
        s = surf.filter_surface(s, used)
    path = tmp_path / "engines" / "llamacpp" / "abi" / "surface.json"
    surf.write(s, path)
    return path


def test_check_passes_on_the_committed_headers(tmp_path: Path) -> None:
    path = commit(tmp_path, {"llama_decode", "llama_context_default_params"})
    r = check_tree("llamacpp", tree(tmp_path / "old"), ABI, committed_path=path)
    assert r.functions == 2 and r.structs == 1 and r.seconds < 10
    assert r.targets == ("x86_64-linux-gnu", "arm64-apple-darwin")


def test_check_fails_with_one_line_per_difference(tmp_path: Path) -> None:
    path = commit(tmp_path, {"llama_decode", "llama_context_default_params"})
    new = HEADER.replace("bool flash_attn;", "int32_t flash_attn_type;").replace("SEQ_VERSION 2", "SEQ_VERSION 3")
    with pytest.raises(AbiError) as e:
        check_tree("llamacpp", tree(tmp_path / "new", new), ABI, pin="0.3.36", committed_path=path)
    msg = str(e.value).splitlines()
    assert "(3 differences)" in msg[0] and "(0.3.36)" in msg[0]
    assert set(msg[1:4]) == {
        "llama_context_params.flash_attn: removed",
        "llama_context_params.flash_attn_type: added at offset 4 (int32_t)",
        "LLAMA_STATE_SEQ_VERSION 2 -> 3",
    }
    assert "`harness abi snapshot llamacpp`" in msg[-1]


def test_check_ignores_what_the_module_does_not_use(tmp_path: Path) -> None:
    path = commit(tmp_path, {"llama_decode"})
    new = HEADER.replace("struct llama_unused { int x; };", "struct llama_unused { long x; };")
    check_tree("llamacpp", tree(tmp_path / "new", new), ABI, committed_path=path)
    removed = HEADER.replace("int32_t llama_decode(int32_t n);\n", "")
    assert differences(tree(tmp_path / "gone", removed), ABI, surf.load(path)) == ["llama_decode: removed"]


def test_check_without_committed_surface(tmp_path: Path) -> None:
    with pytest.raises(AbiError, match="harness abi snapshot llamacpp"):
        check_tree("llamacpp", tree(tmp_path / "old"), ABI, committed_path=tmp_path / "missing.json")


def test_hand_edited_fingerprint_is_caught(tmp_path: Path) -> None:
    path = commit(tmp_path, None)
    data = surf.load(path)
    data["fingerprint"] = "0" * 64
    assert differences(tree(tmp_path / "old"), ABI, data)[0].startswith("fingerprint 0000")


def test_committed_file_is_stable(tmp_path: Path) -> None:
    path = commit(tmp_path, {"llama_decode"})
    first = path.read_text()
    commit(tmp_path, {"llama_decode"})
    assert path.read_text() == first
    assert first == surf.dumps(surf.load(path))


# --------------------------------------------------------------------------- used set


def test_used_from_sources(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "engine.cpp").write_text("auto p = llama_context_default_params();\nx = LLAMA_VOCAB_TYPE_SPM; foo_llama_x();\n")
    (src / "notes.txt").write_text("llama_ignored")
    prefixed = r"\b(?:llama|ggml|gguf|LLAMA|GGML|GGUF)_\w+"
    assert source_identifiers([src], prefixed) == {"llama_context_default_params", "LLAMA_VOCAB_TYPE_SPM"}
    assert used_from(src, prefixed) == source_identifiers([src], prefixed)
    # The default keeps every identifier: the surface's own names filter them (no engine prefix assumed).
    assert source_identifiers([src]) == {"auto", "p", "llama_context_default_params", "x",
                                         "LLAMA_VOCAB_TYPE_SPM", "foo_llama_x"}
    with pytest.raises(UsageError):
        used_from(tmp_path / "nope")


@pytest.mark.skipif(shutil.which("nm") is None or sys.platform != "linux", reason="needs binutils nm on Linux")
def test_used_from_shared_module() -> None:
    dynload = Path(sysconfig.get_paths()["platstdlib"]) / "lib-dynload"
    mod = next(iter(sorted(dynload.glob("_json*.so"))), None)
    if mod is None:
        pytest.skip("no _json extension module to read")
    syms = undefined_symbols(mod)
    assert any(s.startswith("Py") for s in syms)
    assert not any("@" in s for s in syms)
    assert used_from(mod) == syms


# --------------------------------------------------------------------------- pins


def _fake_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file:// simple index (PIP_INDEX_URL) with the 0.3.16 sdist and a yanked 0.3.15."""
    top = tmp_path / "build" / "llama_cpp_python-0.3.16"
    tree(top / "vendor" / "llama.cpp")
    archive = tmp_path / "llama_cpp_python-0.3.16.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(top, arcname=top.name)
    isolate_pip(monkeypatch)
    write_project(tmp_path / "mirror", "llama-cpp-python",
                  {archive.name: archive.read_bytes(), "llama_cpp_python-0.3.15.tar.gz": b"old"},
                  yanked=("llama_cpp_python-0.3.15.tar.gz",), json_page=False)
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "mirror" / "simple").as_uri())
    return archive


def test_fetch_sdist_version_verifies_and_extracts(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_index(tmp_path, monkeypatch)
    top = pins.fetch_sdist_version("llama-cpp-python", "0.3.16")
    assert top.name == "llama_cpp_python-0.3.16" and top.is_relative_to(cache)
    path = pins.resolve_pin("0.3.16", package="llama-cpp-python", subdir="vendor/llama.cpp")
    assert (path / "include" / "llama.h").is_file()
    with pytest.raises(SourceError, match=r"sdist of llama-cpp-python==0\.3\.15 is not on .* 0\.3\.15 \(yanked\), 0\.3\.16"):
        pins.find_sdist("llama-cpp-python", "0.3.15")
    with pytest.raises(UsageError):
        pins.resolve_pin("not-a-version", package="llama-cpp-python")
    assert pins.resolve_pin(str(tmp_path), package="x") == tmp_path


# --------------------------------------------------------------------------- CLI


def spec(root: Path) -> EngineSpec:
    return EngineSpec(name="llamacpp", root=root / "engines" / "llamacpp",
                      source=SourceSpec(kind="pypi-sdist", package="llama-cpp-python", version="0.3.16"),
                      upstream={}, cmake={}, targets=(), artifacts={}, abi=dict(ABI))


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    abi_cli.register(parser.add_subparsers())
    return parser.parse_args(argv)


def test_cli_diff_markdown_between_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(abi_cli, "_load", lambda name: spec(tmp_path))
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b", HEADER.replace("SEQ_VERSION 2", "SEQ_VERSION 3"))
    args = parse(["abi", "diff", str(a), str(b), "--markdown"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "### Constants" in out and "- `LLAMA_STATE_SEQ_VERSION 2 -> 3`" in out


def test_cli_snapshot_then_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    import harness.abi.check as check_mod
    import harness.build.pipeline as pipeline

    src = tree(tmp_path / "src")
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))
    monkeypatch.setattr(abi_cli, "_load", lambda name: spec(tmp_path))
    monkeypatch.setattr(pipeline, "patched_tree", lambda s: argparse.Namespace(path=src))
    mod = tmp_path / "module"
    mod.mkdir()
    (mod / "engine.cpp").write_text("llama_decode(1);")
    args = parse(["abi", "snapshot", "llamacpp", "--used-from", str(mod), "--json"])
    assert args.func(args) == 0
    written = surf.load(tmp_path / "engines" / "llamacpp" / "abi" / "surface.json")
    assert list(written["functions"]) == ["llama_decode"] and written["used"] == ["llama_decode"]
    capsys.readouterr()
    monkeypatch.setattr(check_mod, "check_engine", lambda s, tree: check_tree(s.name, tree, s.abi))
    args = parse(["abi", "check", "llamacpp", "--json"])
    assert args.func(args) == 0
    assert '"ok": true' in capsys.readouterr().out


def test_a_name_the_binding_calls_outside_the_committed_used_set_is_a_difference(tmp_path: Path) -> None:
    # seen on 0.3.36: the binding had started calling llama_get_logits_ith, llama_synchronize, ... after the
    # surface was cut, so a change of those upstream would have passed the check unseen
    from harness.abi import surface as surf
    from harness.abi.check import surface_path, uncovered_uses

    full = surf.load(surface_path("llamacpp"))
    used = sorted(full["used"])
    assert "llama_get_logits_ith" in used
    committed = {**full, "used": [n for n in used if n != "llama_get_logits_ith"]}
    src = tmp_path / "src"
    src.mkdir()
    (src / "engine.cpp").write_text("float * l = llama_get_logits_ith(ctx, -1); llama_decode(ctx, b);\n")
    abi = {"used_from": str(src), "used_pattern": r"\b(?:llama|ggml|gguf|LLAMA|GGML|GGUF)_\w+"}
    assert uncovered_uses(abi, committed, full) == [
        "the binding now uses llama_get_logits_ith, which the committed surface does not cover (it was cut "
        "before the binding called it)"]
    assert uncovered_uses(abi, full, full) == []
    assert uncovered_uses({**abi, "used_from": str(tmp_path / "absent")}, committed, full) == []


# --------------------------------------------------------------------------- another pin's recipe

PREFIXED = r"\b(?:llama|ggml|gguf|LLAMA|GGML|GGUF)_\w+"
USED_FROM = "engines/llamacpp/binding/src"


def _binding(root: Path, text: str) -> None:
    src = root / USED_FROM
    src.mkdir(parents=True, exist_ok=True)
    (src / "engine.cpp").write_text(text)


def _recipe(tmp_path: Path, binding: str) -> EngineSpec:
    """An old pin's recipe as harness.build.recipes materializes it: engines/, abi/ and the binding
    source of its commit under one root, its surface cut to what that binding used then."""
    root = tmp_path / "recipes" / "llamacpp-0123456789ab"
    _binding(root, binding)
    s = surf.filter_surface(snapshot_config(tree(tmp_path / "cut"), ABI, meta={"engine": "llamacpp"}),
                            {"llama_decode"})
    surf.write(s, root / "engines" / "llamacpp" / "abi" / "surface.json")
    return dataclasses.replace(spec(root), abi={**ABI, "used_from": USED_FROM, "used_pattern": PREFIXED},
                               recipe_commit="0123456789ab" * 3)


def test_an_old_pins_check_reads_the_binding_source_of_its_recipe(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.abi.check import check_engine

    # the working tree's binding calls only what the old recipe's surface covers ...
    checkout = tmp_path / "checkout"
    _binding(checkout, "llama_decode(1);\n")
    monkeypatch.setenv("HARNESS_ROOT", str(checkout))
    # ... but the old recipe's own binding (the one its binding is built from) calls one more name:
    # the check reads that source, not the working tree's
    old = _recipe(tmp_path, "llama_decode(1); auto p = llama_context_default_params();\n")
    with pytest.raises(AbiError, match="the binding now uses llama_context_default_params") as e:
        check_engine(old, tree(tmp_path / "pinned"))
    assert "(0.3.16)" in str(e.value).splitlines()[0]
    # the other way round: the working tree calls more, the recipe's binding does not: the old pin passes
    _binding(checkout, "llama_decode(1); auto p = llama_context_default_params();\n")
    ok = check_engine(_recipe(tmp_path / "b", "llama_decode(1);\n"), tree(tmp_path / "pinned"))
    assert ok.functions == 1


def test_cli_check_of_another_pin_checks_its_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import harness.build.pipeline as pipeline
    from harness.build import recipes

    old = _recipe(tmp_path, "llama_decode(1);\n")
    asked: list[tuple[str, str | None, str | None]] = []

    def resolve(engine: str, *, pin: str | None = None, rev: str | None = None) -> EngineSpec:
        asked.append((engine, pin, rev))
        return old

    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))
    monkeypatch.setattr(recipes, "resolve", resolve)
    monkeypatch.setattr(abi_cli, "_load", lambda name: pytest.fail("the working tree's recipe was loaded"))
    monkeypatch.setattr(pipeline, "patched_tree", lambda s: argparse.Namespace(path=tree(tmp_path / "pinned")))
    args = parse(["abi", "check", "llamacpp", "--pin", "0.3.35", "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert asked == [("llamacpp", "0.3.35", None)]
    assert out["ok"] is True and out["pin"] == "0.3.16" and out["recipe_commit"] == old.recipe_commit
    args = parse(["abi", "check", "llamacpp", "--rev", "main"])
    assert args.func(args) == 0
    assert asked[-1] == ("llamacpp", None, "main")
    with pytest.raises(SystemExit):
        parse(["abi", "check", "llamacpp", "--pin", "0.3.35", "--rev", "main"])
