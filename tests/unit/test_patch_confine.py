"""Patches stay inside the working copy (issue 48, part 2).

A series that turned a header into a symlink to /etc/passwd, or a traditional patch naming an
absolute path, applied with exit 0. Each hostile patch below is refused before anything is
applied, in ``harness patch`` and ``harness patch --check`` alike, with a :class:`PatchError`
naming the patch; the ones the issue reproduced are run through the CLI as it did.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.core.errors import PatchError
from harness.core.types import SourceTree
from harness.source.confine import check_links_inside, scan
from harness.source.patches import apply_series, check_series, load_series

from . import toy_recipe

HEADER = toy_recipe.PATCH_HEADER


def _link(path: str, target: str) -> bytes:
    return (f"diff --git a/{path} b/{path}\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n").encode()


def _new_file(path: str, text: str = "owned") -> bytes:
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1 @@\n+{text}\n").encode()


#: name -> (patch bytes, what the refusal says)
HOSTILE: dict[str, tuple[bytes, str]] = {
    "link to /etc/passwd": (_link("include/toy-passwd.h", "/etc/passwd"), "an absolute target (/etc/passwd)"),
    "header turned into a link out": (
        b"diff --git a/include/toy-extra.h b/include/toy-extra.h\ndeleted file mode 100644\n"
        b"index 1111111..0000000\n--- a/include/toy-extra.h\n+++ /dev/null\n@@ -1,2 +0,0 @@\n"
        b"-#pragma once\n-#define TOY_EXTRA 1\n"
        + _link("include/toy-extra.h", "../../../../../../../../etc/passwd"), "a target outside the tree"),
    "traditional absolute": (b"--- /tmp/harness-issue48-victim.txt\n+++ /tmp/harness-issue48-victim.txt\n"
                             b"@@ -0,0 +1 @@\n+owned\n", "an absolute path"),
    "traditional dotdot": (b"--- a/../../harness-issue48-evil.txt\n+++ b/../../harness-issue48-evil.txt\n"
                           b"@@ -0,0 +1 @@\n+owned\n", "a '..' component"),
    "git dotdot": (_new_file("../harness-issue48-evil.txt"), "a '..' component"),
    "git absolute": (b"diff --git /etc/harness-issue48 /etc/harness-issue48\nnew file mode 100644\n--- /dev/null\n"
                     b"+++ /etc/harness-issue48\n@@ -0,0 +1 @@\n+owned\n", "an absolute path"),
    "quoted dotdot": (b'diff --git "a/../x\\ty" "b/../x\\ty"\nnew file mode 100644\n--- /dev/null\n'
                      b'+++ "b/../x\\ty"\n@@ -0,0 +1 @@\n+owned\n', "a '..' component"),
    "rename out": (b"diff --git a/toy.c b/../toy.c\nsimilarity index 100%\nrename from toy.c\nrename to ../toy.c\n",
                   "a '..' component"),
    "through an existing link": (_new_file("include/toy-alias.h/x.h"), "through the symlink include/toy-alias.h"),
    "through a link it makes": (_link("inc", "include") + _new_file("inc/new.h"), "through the symlink inc"),
    "link type change in place": (b"diff --git a/toy.c b/toy.c\nold mode 100644\nnew mode 120000\n",
                                  "changes a file's type"),
    "binary link": (b"diff --git a/l b/l\nnew file mode 120000\nindex 0000000..1111111\nGIT binary patch\n"
                    b"literal 11\nScmZ?wPIWFWN-XBo00001\n\nliteral 0\nHcmV?d00001\n\n", "binary patch"),
    "moved link": (b"diff --git a/include/toy-alias.h b/include/deep/er/x.h\nsimilarity index 100%\n"
                   b"rename from include/toy-alias.h\nrename to include/deep/er/x.h\n"
                   + _link("include/deep/er/y.h", "../../toy.h"), ""),  # both stay inside: applies
}


@pytest.fixture
def recipe(tmp_path: Path) -> toy_recipe.Recipe:
    return toy_recipe.make(tmp_path / "recipe", tmp_path / "cache")


def _nothing_applied(recipe: toy_recipe.Recipe) -> None:
    work = recipe.cache / "work"
    assert not work.exists() or not [p for p in work.iterdir() if (p / "tree").exists()], \
        "no working copy was made"
    assert not Path("/tmp/harness-issue48-victim.txt").exists()
    assert not list(recipe.root.parent.glob("harness-issue48-evil.txt"))


@pytest.mark.parametrize("name", ["link to /etc/passwd", "traditional absolute"])
@pytest.mark.parametrize("check", [False, True], ids=["patch", "patch --check"])
def test_the_cli_refuses_the_issues_series(recipe: toy_recipe.Recipe, name: str, check: bool) -> None:
    diff, said = HOSTILE[name]
    patch = recipe.patch("0001-hostile.patch", diff)
    run = toy_recipe.harness(recipe, "patch", *(["--check"] if check else []), "toy")
    assert run.returncode == PatchError.exit_code, run.output
    assert f"patch {patch}" in run.output and said in run.output and "before anything is applied" in run.output
    assert "Traceback" not in run.output
    _nothing_applied(recipe)


def _source(recipe: toy_recipe.Recipe, tmp_path: Path) -> SourceTree:
    """The recipe's pristine tree, unpacked by hand (what fetch makes; these tests need no cache)."""
    import tarfile

    with tarfile.open(recipe.archive) as tf:
        tf.extractall(tmp_path / "pristine", filter="data")
    return SourceTree(engine="toy", pin="1.0", path=tmp_path / "pristine" / toy_recipe.TOP, digest="d" * 64,
                      fetched=True)


@pytest.mark.parametrize("name", sorted(n for n, (_, said) in HOSTILE.items() if said))
def test_each_hostile_patch_is_refused_before_anything_is_applied(recipe: toy_recipe.Recipe, tmp_path: Path,
                                                                   cache: Path, name: str) -> None:
    diff, said = HOSTILE[name]
    patch = recipe.patch("0001-hostile.patch", diff)
    source = _source(recipe, tmp_path)
    series = load_series(recipe.patches)
    for run in (lambda: apply_series(source, series, engine="toy"), lambda: check_series(source, series)):
        with pytest.raises(PatchError) as e:
            run()
        assert str(patch) in str(e.value) and said in str(e.value)
    assert not list((cache / "work").glob("toy-*/tree")), "no working copy was made"
    assert not list(tmp_path.glob("**/harness-issue48-evil.txt"))


def test_a_later_patch_through_a_link_an_earlier_one_made_is_refused(recipe: toy_recipe.Recipe, tmp_path: Path,
                                                                      cache: Path) -> None:
    recipe.patch("0001-link.patch", _link("inc", "include"))
    second = recipe.patch("0002-through.patch", _new_file("inc/new.h"))
    with pytest.raises(PatchError, match="through the symlink inc") as e:
        apply_series(_source(recipe, tmp_path), load_series(recipe.patches), engine="toy")
    assert str(second) in str(e.value)


def test_links_and_renames_that_stay_inside_apply(recipe: toy_recipe.Recipe, tmp_path: Path, cache: Path) -> None:
    recipe.patch("0001-inside.patch", HOSTILE["moved link"][0])
    tree = apply_series(_source(recipe, tmp_path), load_series(recipe.patches), engine="toy").path
    assert os.readlink(tree / "include" / "deep" / "er" / "x.h") == "toy.h"
    assert (tree / "include" / "deep" / "er" / "y.h").read_text() == toy_recipe.FILES["include/toy.h"].decode()


def test_a_link_moved_where_its_target_leads_out_is_refused(tmp_path: Path, cache: Path) -> None:
    root = tmp_path / "src"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "x").write_text("x")
    (root / "a" / "b" / "l").symlink_to("../x")
    d = tmp_path / "patches"
    d.mkdir()
    (d / "0001-move.patch").write_bytes(HEADER + b"diff --git a/a/b/l b/l\nsimilarity index 100%\n"
                                        b"rename from a/b/l\nrename to l\n")
    with pytest.raises(PatchError, match=r"makes the symlink l with a target outside the tree \(\.\./x"):
        apply_series(SourceTree(engine="toy", pin="1", path=root, digest="e" * 64, fetched=True),
                     load_series(d), engine="toy")


def test_hunk_lines_that_read_like_headers_are_content(recipe: toy_recipe.Recipe, tmp_path: Path,
                                                       cache: Path) -> None:
    # a C file holding the lines "-- /etc/passwd" and "++ /abs": removed and added, they read
    # "--- /etc/passwd" and "+++ /abs" in the hunk, and are no file names
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.c").write_text("x\n-- /etc/passwd\ny\n")
    d = tmp_path / "patches"
    d.mkdir()
    (d / "0001-content.patch").write_bytes(HEADER + b"diff --git a/a.c b/a.c\nindex 1111111..2222222 100644\n"
                                           b"--- a/a.c\n+++ b/a.c\n@@ -1,3 +1,3 @@\n x\n--- /etc/passwd\n"
                                           b"+++ /abs\n y\n")
    tree = apply_series(SourceTree(engine="toy", pin="1", path=root, digest="f" * 64, fetched=True),
                        load_series(d), engine="toy").path
    assert (tree / "a.c").read_text() == "x\n++ /abs\ny\n"
    assert [n for _, n in scan((d / "0001-content.patch").read_text()).names] == [
        "a/a.c b/a.c", "a/a.c", "b/a.c", "a/a.c", "b/a.c"]


def test_links_that_lead_out_only_when_resolved_are_found_after_applying(recipe: toy_recipe.Recipe,
                                                                         tmp_path: Path, cache: Path) -> None:
    # each link's text stays inside ("sub/s -> .." is the tree's root, "x -> sub/s/.." is "sub"),
    # but x resolves through sub/s to the tree's parent: only resolving the applied tree sees it
    recipe.patch("0001-resolve.patch", _link("sub/s", "..") + _link("x", "sub/s/.."))
    with pytest.raises(PatchError, match=r"the symlink x in .* leads outside the tree"):
        apply_series(_source(recipe, tmp_path), load_series(recipe.patches), engine="toy")
    assert not list((cache / "work").glob("toy-*/tree"))


def test_check_links_inside_passes_a_tree_of_inside_links(tmp_path: Path) -> None:
    (tmp_path / "t" / "d").mkdir(parents=True)
    (tmp_path / "t" / "d" / "f").write_text("f")
    (tmp_path / "t" / "l").symlink_to("d/f")
    (tmp_path / "t" / "dl").symlink_to("d")
    (tmp_path / "t" / "dangling").symlink_to("d/none")
    check_links_inside(tmp_path / "t")
    (tmp_path / "t" / "d" / "out").symlink_to(tmp_path)
    with pytest.raises(PatchError, match="d/out"):
        check_links_inside(tmp_path / "t")
