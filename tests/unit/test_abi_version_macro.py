"""The engine's declared ABI version macro (``abi.version_macro``): kept because the descriptor
names it, and a change of it is reported first, as such."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.abi import surface as surf
from harness.abi.check import check_tree, snapshot_config
from harness.abi.diff import diff, render_markdown
from harness.core.errors import AbiError

HEADER = """\
#include <stdint.h>
#define TINY_ABI_LEVEL 3
#define TINY_FORMAT_VERSION 1
#define TINY_LIMIT 5
struct tiny_params { int32_t n; };
int32_t tiny_run(struct tiny_params p);
"""
BASE: dict[str, Any] = {"headers": ["include/tiny.h"], "include_dirs": ["include"], "targets": ["x86_64-linux-gnu"]}
DECLARED: dict[str, Any] = {**BASE, "version_macro": "TINY_ABI_LEVEL"}


def tree(root: Path, text: str = HEADER) -> Path:
    (root / "include").mkdir(parents=True, exist_ok=True)
    (root / "include" / "tiny.h").write_text(text)
    return root


def committed(tmp_path: Path, abi: dict[str, Any]) -> Path:
    path = tmp_path / "engines" / "tiny" / "abi" / "surface.json"
    surf.write(snapshot_config(tree(tmp_path / "old"), abi, meta={"engine": "tiny"}), path)
    return path


def test_the_named_macro_is_kept_whatever_its_name(tmp_path: Path) -> None:
    plain = snapshot_config(tree(tmp_path / "a"), BASE)
    assert plain["constants"] == {"TINY_FORMAT_VERSION": 1}
    named = snapshot_config(tree(tmp_path / "a"), DECLARED)
    assert named["constants"] == {"TINY_ABI_LEVEL": 3, "TINY_FORMAT_VERSION": 1}
    assert named["meta"]["version_macro"] == "TINY_ABI_LEVEL"


def test_check_reports_the_declared_version_first_and_as_such(tmp_path: Path) -> None:
    path = committed(tmp_path, DECLARED)
    new = HEADER.replace("TINY_ABI_LEVEL 3", "TINY_ABI_LEVEL 4").replace("int32_t n;", "int32_t n; int32_t m;")
    new = new.replace("TINY_FORMAT_VERSION 1", "TINY_FORMAT_VERSION 2")
    with pytest.raises(AbiError) as e:
        check_tree("tiny", tree(tmp_path / "new", new), DECLARED, committed_path=path)
    lines = str(e.value).splitlines()
    assert "(4 differences)" in lines[0]
    assert lines[1] == "the engine's declared ABI version moved from 3 to 4 (TINY_ABI_LEVEL)"
    assert set(lines[2:5]) == {"tiny_params: size 4 -> 8", "tiny_params.m: added at offset 4 (int32_t)",
                               "TINY_FORMAT_VERSION 1 -> 2"}
    assert not any(line.startswith("TINY_ABI_LEVEL") for line in lines)
    ok = check_tree("tiny", tree(tmp_path / "old"), DECLARED, committed_path=path)
    assert ok.declared_version == 3


def test_without_a_declared_macro_a_version_constant_is_an_ordinary_constant(tmp_path: Path) -> None:
    path = committed(tmp_path, BASE)
    new = HEADER.replace("TINY_FORMAT_VERSION 1", "TINY_FORMAT_VERSION 2")
    with pytest.raises(AbiError) as e:
        check_tree("tiny", tree(tmp_path / "new", new), BASE, committed_path=path)
    assert str(e.value).splitlines()[1] == "TINY_FORMAT_VERSION 1 -> 2"
    assert check_tree("tiny", tree(tmp_path / "old"), BASE, committed_path=path).declared_version is None


def test_diff_puts_the_declared_version_first(tmp_path: Path) -> None:
    a = snapshot_config(tree(tmp_path / "a"), DECLARED)
    b = snapshot_config(tree(tmp_path / "b", HEADER.replace("LEVEL 3", "LEVEL 4").replace("LIMIT 5", "LIMIT 6")
                             .replace("int32_t tiny_run", "int64_t tiny_run")), DECLARED)
    changes = diff(a, b, version_macro="TINY_ABI_LEVEL")
    assert [str(c) for c in changes] == ["the engine's declared ABI version moved from 3 to 4 (TINY_ABI_LEVEL)",
                                         "tiny_run: return int32_t -> int64_t"]
    md = render_markdown(changes, old="tiny a", new="tiny b")
    assert md.index("### Declared ABI version") < md.index("### Functions")
    # Named as a constant only when the caller does not say it is the declared version.
    assert "TINY_ABI_LEVEL 3 -> 4" in [str(c) for c in diff(a, b)]


def test_declared_version_appears_or_goes(tmp_path: Path) -> None:
    with_macro = snapshot_config(tree(tmp_path / "a"), DECLARED)
    without = snapshot_config(tree(tmp_path / "b", HEADER.replace("#define TINY_ABI_LEVEL 3\n", "")), DECLARED)
    gone = [str(c) for c in diff(with_macro, without, version_macro="TINY_ABI_LEVEL")]
    assert gone == ["the engine's declared ABI version TINY_ABI_LEVEL is gone from the headers (was 3)"]
    came = [str(c) for c in diff(without, with_macro, version_macro="TINY_ABI_LEVEL")]
    assert came == ["the engine's declared ABI version TINY_ABI_LEVEL appeared (3)"]
