from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core import progress
from harness.core.errors import PatchError
from harness.core.types import SourceTree
from harness.source.cache import checking, temp_prefix
from harness.source.patches import (
    STAMP,
    Patch,
    apply_series,
    check_series,
    copy_state,
    load_series,
    parse_header,
    series_hash,
)

HEADER = """Subject: {subject}
Why: because the test says so
Upstream: pending
Retire-when: never
---
"""


def _tree(root: Path, text: str) -> SourceTree:
    root.mkdir(parents=True)
    (root / "src").mkdir()
    (root / "src" / "a.c").write_text(text)
    return SourceTree(engine="toy", pin="1.0", path=root, digest="d" * 64, fetched=True)


def _make_patch(tmp: Path, name: str, before: str, after: str) -> Path:
    """Produce a real git-format diff turning ``before`` into ``after`` for src/a.c."""
    work = tmp / f"mk-{name}"
    (work / "a" / "src").mkdir(parents=True)
    (work / "b" / "src").mkdir(parents=True)
    (work / "a" / "src" / "a.c").write_text(before)
    (work / "b" / "src" / "a.c").write_text(after)
    r = subprocess.run(["git", "diff", "--no-index", "--no-prefix", "a/src/a.c", "b/src/a.c"], cwd=work,
                       capture_output=True, text=True, check=False)
    diff = r.stdout.replace("a/a/src/a.c", "a/src/a.c").replace("b/b/src/a.c", "b/src/a.c")
    diff = diff.replace("--- a/src/a.c", "--- a/src/a.c").replace(" a/src/a.c b/src/a.c", " a/src/a.c b/src/a.c")
    lines = []
    for line in diff.splitlines():
        if line.startswith("diff --git"):
            line = "diff --git a/src/a.c b/src/a.c"
        elif line.startswith("--- "):
            line = "--- a/src/a.c"
        elif line.startswith("+++ "):
            line = "+++ b/src/a.c"
        lines.append(line)
    p = tmp / "patches" / name
    p.parent.mkdir(exist_ok=True)
    p.write_text(HEADER.format(subject=name) + "\n".join(lines) + "\n")
    return p


BASE = "int a(void) {\n    return 1;\n}\n\nint b(void) {\n    return 2;\n}\n"
FIXED = BASE.replace("return 1;", "return 10;")


def test_header_is_parsed(tmp_path: Path) -> None:
    p = _make_patch(tmp_path, "0001-fix.patch", BASE, FIXED)
    h = parse_header(p)
    assert h["Subject"] == "0001-fix.patch"
    assert h["Upstream"] == "pending"


def test_series_applies_to_a_copy_and_second_run_is_noop(tmp_path: Path, cache: Path) -> None:
    src = _tree(tmp_path / "src", BASE)
    _make_patch(tmp_path, "0001-fix.patch", BASE, FIXED)
    series = load_series(tmp_path / "patches")
    first = apply_series(src, series, engine="toy")
    assert first.applied
    assert (first.path / "src" / "a.c").read_text() == FIXED
    assert (src.path / "src" / "a.c").read_text() == BASE, "pristine source untouched"
    second = apply_series(src, series, engine="toy")
    assert not second.applied and second.path == first.path


def test_failing_patch_names_patch_path_and_hunk_and_leaves_pristine(tmp_path: Path, cache: Path) -> None:
    src = _tree(tmp_path / "src", BASE.replace("return 1;", "return 7;"))
    patch = _make_patch(tmp_path, "0001-fix.patch", BASE, FIXED)
    with pytest.raises(PatchError) as e:
        apply_series(src, load_series(tmp_path / "patches"), engine="toy")
    msg = str(e.value)
    assert str(patch) in msg
    assert "src/a.c" in msg and "patch failed" in msg
    assert "return 7;" in (src.path / "src" / "a.c").read_text()
    assert not list((cache / "work").glob("toy-*")), "no stamped working copy after a failure"


def test_check_reports_applies_upstream_and_conflicts(tmp_path: Path, cache: Path) -> None:
    src = _tree(tmp_path / "src", FIXED)  # 0001's fix is already in this "new pin"
    _make_patch(tmp_path, "0001-upstreamed.patch", BASE, FIXED)
    _make_patch(tmp_path, "0002-applies.patch", FIXED, FIXED.replace("return 2;", "return 20;"))
    _make_patch(tmp_path, "0003-conflicts.patch", BASE.replace("return 1;", "return 99;"), BASE)
    outcomes = check_series(src, load_series(tmp_path / "patches"))
    assert [o.status for o in outcomes] == ["already-upstream", "applies", "conflicts"]
    assert "retire" in outcomes[0].detail
    assert "src/a.c" in outcomes[2].detail


def test_patch_without_header_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "patches"
    d.mkdir()
    (d / "0001-x.patch").write_text("diff --git a/x b/x\n")
    with pytest.raises(PatchError, match="Why"):
        load_series(d)


def test_shipped_llamacpp_patches_have_headers() -> None:
    root = Path(__file__).resolve().parents[2]
    series = load_series(root / "engines" / "llamacpp" / "patches")
    assert series, "at least one real patch ships for the pinned llama.cpp"
    for p in series:
        assert p.header["Retire-when"]


# --- the working copy is checked at every use (issue 15) ---------------------------------


def _applied(tmp_path: Path) -> tuple[SourceTree, list[Patch], Path]:
    src = _tree(tmp_path / "src", BASE)
    (src.path / "src" / "b.c").write_text("int b;\n")
    _make_patch(tmp_path, "0001-fix.patch", BASE, FIXED)
    series = load_series(tmp_path / "patches")
    return src, series, apply_series(src, series, engine="toy").path


def test_stamp_records_full_source_digest_series_hash_and_manifest(tmp_path: Path, cache: Path) -> None:
    src, series, tree = _applied(tmp_path)
    stamp = json.loads((tree.parent / STAMP).read_text())
    assert stamp["source_digest"] == src.digest and stamp["series_hash"] == series_hash(series)
    assert sorted(stamp["manifest"]) == [".", "src", "src/a.c", "src/b.c"]


@pytest.mark.parametrize("edit", ["edited", "added", "removed"])
def test_an_edited_working_copy_is_recreated_and_the_output_says_so(
        tmp_path: Path, cache: Path, edit: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "_quiet", False)
    src, series, tree = _applied(tmp_path)
    target = tree / "src" / ("new.c" if edit == "added" else "a.c")
    if edit == "removed":
        target.unlink()
    else:
        target.write_text("int hacked;\n")
    again = apply_series(src, series, engine="toy")
    assert again.applied and again.path == tree
    assert (tree / "src" / "a.c").read_text() == FIXED
    assert not (tree / "src" / "new.c").exists()
    err = capsys.readouterr().err
    assert edit in err and str(target) in err and "re-creating" in err


def test_check_reports_an_edited_working_copy_without_touching_it(tmp_path: Path, cache: Path) -> None:
    src, series, tree = _applied(tmp_path)
    (tree / "src" / "b.c").write_text("int hacked;\n")
    path, problem = copy_state(src, series, engine="toy")
    assert path == tree and problem and str(tree / "src" / "b.c") in problem
    assert (tree / "src" / "b.c").read_text() == "int hacked;\n"
    apply_series(src, series, engine="toy")
    assert copy_state(src, series, engine="toy") == (tree, None)


def test_recreating_keeps_build_dirs_and_freshens_only_changed_files(tmp_path: Path, cache: Path) -> None:
    src, series, tree = _applied(tmp_path)
    build = tree.parent / "build" / "cpu-abc"
    build.mkdir(parents=True)
    (build / "a.o").write_text("object")
    past = time.time_ns() - 3600 * 10**9
    for f in ("a.c", "b.c"):
        os.utime(tree / "src" / f, ns=(past, past))
    (tree / "src" / "b.c").write_text("int hacked;\n")
    os.utime(tree / "src" / "b.c", ns=(past, past))  # an edit that would fool an mtime-based build
    before = time.time_ns()
    apply_series(src, series, engine="toy")
    assert (build / "a.o").read_text() == "object", "build dirs beside the copy survive"
    assert (tree / "src" / "a.c").stat().st_mtime_ns == past, "unchanged: old mtime, no recompile"
    assert (tree / "src" / "b.c").stat().st_mtime_ns >= before, "restored: fresh mtime, recompiled"
    assert (tree / "src" / "b.c").read_text() == "int b;\n"


def test_python_byte_code_in_the_copy_is_an_edit(tmp_path: Path, cache: Path) -> None:
    # A .pyc runs when the copy is imported from (the GGUF converter): it is code the manifest
    # must vouch for, so the copy is made again without it (nothing writes byte code there).
    src, series, tree = _applied(tmp_path)
    (tree / "src" / "__pycache__").mkdir()
    (tree / "src" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert apply_series(src, series, engine="toy").applied
    assert not (tree / "src" / "__pycache__").exists()


def test_full_check_rehashes_the_copy(tmp_path: Path, cache: Path) -> None:
    src, series, tree = _applied(tmp_path)
    (tree / "src" / "b.c").write_text("int c;\n")  # same size; the stat vouchers are made to match
    st = (tree / "src" / "b.c").stat()
    stamp = json.loads((tree.parent / STAMP).read_text())
    stamp["manifest"]["src/b.c"][3:] = [st.st_mtime_ns, st.st_ctime_ns]
    (tree.parent / STAMP).write_text(json.dumps(stamp))
    assert not apply_series(src, series, engine="toy").applied
    with checking(full=True):
        assert apply_series(src, series, engine="toy").applied


def test_a_copy_from_an_older_harness_or_another_source_is_made_again(tmp_path: Path, cache: Path) -> None:
    src, series, tree = _applied(tmp_path)
    stamp = json.loads((tree.parent / STAMP).read_text())
    (tree.parent / STAMP).write_text(json.dumps({k: v for k, v in stamp.items() if k != "manifest"}))
    assert apply_series(src, series, engine="toy").applied
    other = SourceTree(engine="toy", pin="1.0", path=src.path, digest=src.digest[:12] + "e" * 52, fetched=False)
    assert apply_series(other, series, engine="toy").applied


def test_debris_of_a_killed_patch_run_is_swept(tmp_path: Path, cache: Path) -> None:
    work = cache / "work"
    work.mkdir(parents=True)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    host = temp_prefix("x").split("-")[-2]
    debris = work / f".toy-1.0-dddddddddddd-0123456789ab.tmp-{p.pid}-{host}-abcd1234"
    (debris / "tree").mkdir(parents=True)
    _applied(tmp_path)
    assert not debris.exists()
