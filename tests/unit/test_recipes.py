"""Another pin's recipe from git history: descriptor, patches and ABI surface travel together."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.build import recipes
from harness.build.cmake import BuildResult, artifact_dir
from harness.build.matrix import get_variant
from harness.core import paths
from harness.core.errors import BenchError
from harness_plugins.llamacpp import bench as real

OLD_SHA = "1139dbb54509074b70893fab8554e3b079aa9f4d312058ce4018ef0019e3de12"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A checkout whose main pins the real descriptor's version and whose branch pins 0.3.35."""
    real_root = paths.project_root()
    root = tmp_path / "checkout"
    for d in ("engines/llamacpp", "matrix"):
        shutil.copytree(real_root / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    for var in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(var, "test")
    for var in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(var, "test@example.org")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "current pin")
    main = _git(root, "rev-parse", "HEAD")
    _git(root, "checkout", "-q", "-b", "pin/old")
    # the old pin's commit predates the one-folder layout: patches/<e>/ and abi/<e>/ beside engines/
    (root / "patches").mkdir()
    (root / "abi").mkdir()
    _git(root, "mv", "engines/llamacpp/patches", "patches/llamacpp")
    _git(root, "mv", "engines/llamacpp/abi", "abi/llamacpp")
    desc = root / "engines/llamacpp/engine.yaml"
    text = desc.read_text()
    pin = re.search(r'version: "([^"]+)"', text)
    assert pin
    text = text.replace(f'version: "{pin.group(1)}"', 'version: "0.3.35"')
    text = re.sub(r"sha256: [0-9a-f]{64}", f"sha256: {OLD_SHA}", text, count=1)
    text = re.sub(r"filename: \S+", "filename: llama_cpp_python-0.3.35.tar.gz", text, count=1)
    desc.write_text(text)
    (root / "patches/llamacpp/0001-ggml-backend-search-library-dir.patch").write_text(
        "Subject: rebased for the old pin\n---\n")
    _git(root, "commit", "-q", "-am", "old pin")
    old = _git(root, "rev-parse", "HEAD")
    _git(root, "checkout", "-q", "main")
    monkeypatch.setenv("HARNESS_ROOT", str(root))
    return {"root": root, "main": main, "old": old, "pin": pin.group(1)}


def test_working_tree_pin_is_the_current_recipe(repo: dict[str, Any]) -> None:
    spec = recipes.recipe_for_pin("llamacpp", repo["pin"])
    assert spec.recipe_commit == "" and spec.root == repo["root"] / "engines" / "llamacpp"
    assert artifact_dir(spec, get_variant("cpu")).name == f"llamacpp-{repo['pin']}-cpu"


def test_old_pin_comes_with_its_own_patches_and_surface(repo: dict[str, Any], cache: Path) -> None:
    spec = recipes.recipe_for_pin("llamacpp", "0.3.35")
    assert spec.pin == "0.3.35" and spec.source.sha256 == OLD_SHA
    assert spec.recipe_commit == repo["old"]
    assert spec.root.is_relative_to(cache / "recipes")
    patch = spec.patches_dir / "0001-ggml-backend-search-library-dir.patch"
    assert patch.read_text().startswith("Subject: rebased for the old pin")
    assert spec.surface_path.is_file() and spec.surface_path.is_relative_to(cache)
    # a recipe from history is untrusted: its artifact path is its own (the commit, and the trust key)
    assert artifact_dir(spec, get_variant("cpu")).name.startswith(f"llamacpp-0.3.35-cpu@{repo['old'][:12]}+untrusted-")
    assert sorted(recipes.pins_on_record("llamacpp")) == sorted([(repo["old"], "0.3.35"), (repo["main"], repo["pin"])])


def test_recipe_materialized_once(repo: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    first = recipes.recipe_at("llamacpp", "pin/old")

    real_git = recipes._git_bytes

    def no_archive(*args: str) -> bytes:
        if args[0] == "archive":
            raise AssertionError("materialized twice")
        return real_git(*args)

    monkeypatch.setattr(recipes, "_git_bytes", no_archive)
    assert recipes.recipe_at("llamacpp", repo["old"]).root == first.root


def test_unknown_pin_says_how_to_add_a_recipe(repo: dict[str, Any]) -> None:
    with pytest.raises(recipes.RecipeError, match=r"pins on record: 0\.3\.35, .*harness pin llamacpp SOURCE"):
        recipes.recipe_for_pin("llamacpp", "0.3.1")


def test_bad_rev_and_mismatched_pin(repo: dict[str, Any]) -> None:
    with pytest.raises(recipes.RecipeError, match="'no-such-branch' is not a commit"):
        recipes.recipe_at("llamacpp", "no-such-branch")
    with pytest.raises(recipes.RecipeError, match=r"pin/old pins llamacpp 0\.3\.35, not 9\.9"):
        recipes.resolve("llamacpp", pin="9.9", rev="pin/old")
    assert recipes.resolve("llamacpp", rev="main").pin == repo["pin"]


def test_rev_without_the_engine(repo: dict[str, Any]) -> None:
    root = repo["root"]
    _git(root, "checkout", "-q", "--orphan", "empty")
    _git(root, "rm", "-rq", "--cached", ".")
    (root / "README").write_text("x")
    _git(root, "add", "README")
    _git(root, "commit", "-q", "-m", "no engines")
    with pytest.raises(recipes.RecipeError, match="has no engines/llamacpp/"):
        recipes.recipe_at("llamacpp", "empty")


def test_not_a_checkout(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    with pytest.raises(recipes.RecipeError, match="is not a commit of the checkout"):
        recipes.recipe_at("llamacpp", "main")


def test_llama_bench_arm_builds_the_pin_it_names(repo: dict[str, Any], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[str, str, str]] = []

    def fake_build(spec: Any, variant: str, pm: Any = None, *, force: bool = False) -> BuildResult:
        built.append((spec.pin, spec.recipe_commit, variant))
        return BuildResult(artifact=tmp_path / "art", build_dir=tmp_path, built=True, seconds=1.0, manifest={})

    from harness.build import pipeline

    monkeypatch.setattr(pipeline, "build_variant", fake_build)
    opts = real.prepare_llama_bench({"pin": "0.3.35", "variant": "cpu-native", "model": "m.gguf"})
    assert opts["artifact"] == str(tmp_path / "art") and opts["pin"] == "0.3.35"
    assert built == [("0.3.35", repo["old"], "cpu-native")]
    assert real.prepare_llama_bench({"artifact": "/x", "model": "m"}) == {"artifact": "/x", "model": "m"}
    with pytest.raises(BenchError, match="needs artifact=DIR, pin=VERSION or rev=GITREV"):
        real.prepare_llama_bench({"model": "m"})


def test_a_recipe_carries_the_shared_binding_headers(repo: dict[str, Any]) -> None:
    """The recipe's own binding includes engines/_shared: it must come along, or no old binding builds."""
    import json

    root = repo["root"]
    (root / "engines/_shared").mkdir()
    (root / "engines/_shared/harness_pydict.h").write_text("// shared\n")
    _git(root, "add", "engines/_shared")
    _git(root, "commit", "-q", "-m", "shared headers")
    spec = recipes.recipe_at("llamacpp", "main")
    assert (spec.root.parent / "_shared" / "harness_pydict.h").read_text() == "// shared\n"
    # a recipe materialized before recipes carried them (no layout in its stamp) is made again
    stamp = spec.root.parent.parent / recipes.STAMP
    data = json.loads(stamp.read_text())
    assert data["layout"] == recipes.LAYOUT and "engines/_shared" in data["dirs"]
    del data["layout"]
    stamp.write_text(json.dumps(data))
    shutil.rmtree(spec.root.parent / "_shared")
    again = recipes.recipe_at("llamacpp", "main")
    assert (again.root.parent / "_shared" / "harness_pydict.h").is_file()
    # a commit without them: the recipe has its engine's folders only
    assert not (recipes.recipe_at("llamacpp", repo["old"]).root.parent / "_shared").exists()
