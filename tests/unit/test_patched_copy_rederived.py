"""The patched working copy is derived data, checked by deriving it again (issue 54, cases 7 and 8).

A forged copy (a file of ``tree/`` edited, the stamp's manifest and its seal rewritten beside it)
passed ``harness fetch --verify`` and ``--repair``, and the next build compiled it. Now ``--verify``
makes the copy again from the verified pristine tree and the series, compares file by file, and
refuses the forged one (IntegrityError, exit 5, the file named; its stamp removed so that no
command builds it); ``--repair`` re-creates it. And ``harness patch`` refuses a hostile series
before it copies the pristine tree (it copied the whole tree first).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from harness.core.errors import IntegrityError, PatchError
from harness.source import patches
from harness.source.cache import write_json, write_seal
from harness.source.manifest import manifest_to_json, scan_tree

from . import hostile_engine, toy_recipe
from .test_patch_confine import HOSTILE, _source

FIX = (b"diff --git a/toy.c b/toy.c\n--- a/toy.c\n+++ b/toy.c\n@@ -1 +1 @@\n-int toy(void) { return 1; }\n"
       b"+int toy(void) { return 2; }\n")
FORGED = "int toy(void) { return 666; }\n"


def _harness(recipe: toy_recipe.Recipe, *argv: str) -> subprocess.CompletedProcess[str]:
    """The installed ``harness`` on the toy recipe."""
    return subprocess.run([*hostile_engine.harness_exe(), *argv], env=recipe.env(), cwd=recipe.root,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False)


@pytest.fixture
def recipe(tmp_path: Path) -> toy_recipe.Recipe:
    recipe = toy_recipe.make(tmp_path / "recipe", tmp_path / "cache")
    recipe.patch("0001-toy-returns-two.patch", FIX)
    return recipe


def _forge(copy: Path) -> None:
    """Edit the copy's toy.c and rewrite its stamp's manifest and seal to match, as an attacker would."""
    (copy / "tree" / "toy.c").write_text(FORGED)
    stamp = json.loads((copy / patches.STAMP).read_text())
    manifest = scan_tree(copy / "tree")
    write_json(copy / patches.STAMP, {**stamp, "manifest": manifest_to_json(manifest)})
    write_seal(copy / patches.STAMP, manifest)


def test_a_forged_copy_fails_verify_and_repair_makes_it_again(recipe: toy_recipe.Recipe) -> None:
    r = _harness(recipe, "patch", "toy", "--json")
    assert r.returncode == 0, r.stdout
    tree = Path(json.loads(r.stdout)["path"])
    _forge(tree.parent)
    r = _harness(recipe, "patch", "toy", "--json")  # the sealed manifest is the fast path: it vouches
    assert r.returncode == 0 and not json.loads(r.stdout)["applied"]

    r = _harness(recipe, "fetch", "--verify", "toy")
    assert r.returncode == IntegrityError.exit_code, r.stdout
    assert "IntegrityError" in r.stdout and f"edited  {tree / 'toy.c'}" in r.stdout, r.stdout
    assert "harness fetch --repair toy" in r.stdout and "Traceback" not in r.stdout
    assert not (tree.parent / patches.STAMP).exists(), "no command builds the forged copy unverified"
    r = _harness(recipe, "patch", "toy", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["applied"]
    assert (tree / "toy.c").read_text() == "int toy(void) { return 2; }\n"

    _forge(tree.parent)
    r = _harness(recipe, "fetch", "--repair", "toy")
    assert r.returncode == 0, r.stdout
    assert "differs from the verified pristine tree" in r.stdout and "patched working copy: re-created" in r.stdout
    assert (tree / "toy.c").read_text() == "int toy(void) { return 2; }\n"
    r = _harness(recipe, "fetch", "--verify", "toy")
    assert r.returncode == 0 and "every file rehashed, intact" in r.stdout, r.stdout


@pytest.mark.parametrize("name", ["link to /etc/passwd", "git dotdot", "traditional absolute"])
def test_a_hostile_series_is_refused_before_the_tree_is_copied(recipe: toy_recipe.Recipe, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    def no_copy(*args: object, **kwargs: object) -> None:
        raise AssertionError("the pristine tree was copied before the series was confined")

    monkeypatch.setattr(patches.shutil, "copytree", no_copy)
    monkeypatch.setenv("HARNESS_CACHE", str(recipe.cache))
    diff, said = HOSTILE[name]
    patch = recipe.patch("0002-hostile.patch", diff)
    with pytest.raises(PatchError, match=re.escape(said)) as e:
        patches.apply_series(_source(recipe, tmp_path), patches.load_series(recipe.patches), engine="toy")
    assert f"patch {patch}" in str(e.value) and not list((recipe.cache / "work").glob("toy-*/tree"))
