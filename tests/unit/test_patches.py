from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.errors import PatchError
from harness.patches import apply_series, check_series, load_series, parse_header
from harness.types import SourceTree

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
    series = load_series(root / "patches" / "llamacpp")
    assert series, "at least one real patch ships for the pinned llama.cpp"
    for p in series:
        assert p.header["Retire-when"]
