"""``harness fetch --verify`` is anchored to the archive (issue 48, part 5).

With a forged ``.pyc`` added under ``__pycache__`` and the tree's manifest and its ``.sha256``
seal rewritten to match, ``fetch --verify`` printed "archive and every file rehashed, all intact":
the tree was compared with the manifest, which lives in the same writable cache. The pinned
sha256 of the archive is the only anchor: ``--verify`` and ``--repair`` now compare the tree with
the archive's own members (content, kind, mode, and any extra file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.core.errors import IntegrityError
from harness.source.cache import STAMP, seal_path, write_seal
from harness.source.manifest import manifest_to_json, scan_tree

from . import toy_recipe


@pytest.fixture
def recipe(tmp_path: Path) -> toy_recipe.Recipe:
    r = toy_recipe.make(tmp_path / "recipe", tmp_path / "cache")
    run = toy_recipe.harness(r, "fetch", "toy")
    assert run.returncode == 0, run.output
    return r


def _root(recipe: toy_recipe.Recipe) -> Path:
    return recipe.cache / "sources" / recipe.sha256


def _reseal(recipe: toy_recipe.Recipe) -> None:
    """Rewrite the stamp's manifest and its seal to describe the tree as it is now."""
    root = _root(recipe)
    stamp = json.loads((root / STAMP).read_text())
    manifest = scan_tree(root / "tree")
    stamp["manifest"] = manifest_to_json(manifest)
    (root / STAMP).write_text(json.dumps(stamp))
    write_seal(root / STAMP, manifest)


def _forge_pyc(recipe: toy_recipe.Recipe) -> Path:
    pkg = _root(recipe) / "tree" / toy_recipe.TOP
    pkg.chmod(0o755)
    (pkg / "__pycache__").mkdir()
    pyc = pkg / "__pycache__" / "toy.cpython-311.pyc"
    pyc.write_bytes(b"\xa7\r\r\n" + b"\0" * 12 + b"forged code object")
    return pyc


def test_a_forged_pyc_with_a_resealed_manifest_fails_verify(recipe: toy_recipe.Recipe) -> None:
    pyc = _forge_pyc(recipe)
    _reseal(recipe)
    cheap = toy_recipe.harness(recipe, "fetch", "toy")
    assert cheap.returncode == 0, "the fast path trusts the resealed manifest (it is not the anchor)"
    run = toy_recipe.harness(recipe, "fetch", "--verify", "toy")
    assert run.returncode == IntegrityError.exit_code, run.output
    assert "all intact" not in run.output
    assert "differs from toy-1.0.tar.gz" in run.output and "itself" in run.output
    assert f"added   {pyc.parent}" in run.output or f"added   {pyc}" in run.output
    repaired = toy_recipe.harness(recipe, "fetch", "--repair", "toy")
    assert repaired.returncode == 0, repaired.output
    assert not pyc.exists() and not pyc.parent.exists()
    again = toy_recipe.harness(recipe, "fetch", "--verify", "toy")
    assert again.returncode == 0 and "all intact" in again.output, again.output


@pytest.mark.parametrize("forgery", ["content", "mode", "removed", "link"])
def test_edits_hidden_by_a_resealed_manifest_fail_verify(recipe: toy_recipe.Recipe, forgery: str) -> None:
    tree = _root(recipe) / "tree" / toy_recipe.TOP
    header = tree / "include" / "toy.h"
    if forgery == "content":
        header.chmod(0o644)
        header.write_bytes(b"#pragma once\nint toy(void); /* forged */\n")
        header.chmod(0o444)
    elif forgery == "mode":
        header.chmod(0o4555)
    elif forgery == "removed":
        (tree / "include").chmod(0o755)
        header.unlink()
    else:
        (tree / "include").chmod(0o755)
        (tree / "include" / "toy-alias.h").unlink()
        (tree / "include" / "toy-alias.h").symlink_to("toy-extra.h")
    _reseal(recipe)
    run = toy_recipe.harness(recipe, "fetch", "--verify", "toy")
    assert run.returncode == IntegrityError.exit_code, run.output
    assert "include/toy" in run.output


def test_an_intact_tree_with_a_forged_manifest_verifies_and_the_manifest_is_written_again(
        recipe: toy_recipe.Recipe) -> None:
    root = _root(recipe)
    stamp = json.loads((root / STAMP).read_text())
    rel = f"{toy_recipe.TOP}/toy.c"
    stamp["manifest"][rel][1] = "0" * 64  # the manifest lies about an intact file
    (root / STAMP).write_text(json.dumps(stamp))
    seal_path(root / STAMP).write_text("0" * 64 + "\n")
    assert toy_recipe.harness(recipe, "fetch", "toy").returncode == IntegrityError.exit_code
    run = toy_recipe.harness(recipe, "fetch", "--verify", "toy")
    assert run.returncode == 0 and "all intact" in run.output and "written again from the tree" in run.output
    assert toy_recipe.harness(recipe, "fetch", "toy").returncode == 0, "the fast path is right again"
    assert os.listdir(root.parent) == [recipe.sha256], "no scratch tree is left behind"
