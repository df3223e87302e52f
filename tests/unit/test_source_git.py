from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.core import paths
from harness.core.errors import IntegrityError, SourceError
from harness.core.types import SourceSpec
from harness.engine.plugin import make_manager


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def bare_repo(tmp_path: Path) -> tuple[Path, str]:
    work = tmp_path / "work"
    work.mkdir()
    _git("init", "-q", cwd=work)
    (work / "engine").mkdir()
    (work / "engine" / "engine.c").write_text("int main(void) { return 0; }\n")
    _git("add", "-A", cwd=work)
    _git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one", cwd=work)
    commit = _git("rev-parse", "HEAD", cwd=work)
    bare = tmp_path / "repo.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    _git("config", "uploadpack.allowReachableSHA1InWant", "true", cwd=bare)
    return bare, commit


def test_git_source_fetches_pinned_commit_once(bare_repo: tuple[Path, str], cache: Path) -> None:
    bare, commit = bare_repo
    pm = make_manager(autoload=False)
    spec = SourceSpec(kind="git", url=bare.as_uri(), commit=commit, subdir="engine")
    first = pm.hook.harness_source_fetch(engine="toy", spec=spec, cache_dir=paths.sources_dir())
    assert first.fetched and (first.path / "engine.c").is_file()
    second = pm.hook.harness_source_fetch(engine="toy", spec=spec, cache_dir=paths.sources_dir())
    assert not second.fetched and second.path == first.path


def test_git_source_needs_full_commit(cache: Path) -> None:
    pm = make_manager(autoload=False)
    spec = SourceSpec(kind="git", url="file:///nowhere", commit="abc123")
    with pytest.raises(SourceError, match="40-hex"):
        pm.hook.harness_source_fetch(engine="toy", spec=spec, cache_dir=paths.sources_dir())


@pytest.fixture
def big_repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose build needs src/ and CMakeLists.txt, not the large test data."""
    work = tmp_path / "bigwork"
    (work / "src").mkdir(parents=True)
    (work / "testdata").mkdir()
    _git("init", "-q", cwd=work)
    (work / "CMakeLists.txt").write_text("project(x C)\n")
    (work / "src" / "x.c").write_text("int x;\n")
    (work / "testdata" / "huge.bin").write_bytes(bytes(range(256)) * 512)
    _git("add", "-A", cwd=work)
    _git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one", cwd=work)
    commit = _git("rev-parse", "HEAD", cwd=work)
    bare = tmp_path / "big.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    _git("config", "uploadpack.allowFilter", "true", cwd=bare)
    _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare)
    return bare, commit


def test_blob_filter_and_sparse_paths(big_repo: tuple[Path, str], cache: Path) -> None:
    from harness_plugins.source_git import cache_key

    bare, commit = big_repo
    pm = make_manager(autoload=False)
    spec = SourceSpec(kind="git", url=bare.as_uri(), commit=commit, filter="blob:none",
                      sparse=("src", "CMakeLists.txt"))
    tree = pm.hook.harness_source_fetch(engine="toy", spec=spec, cache_dir=paths.sources_dir())
    assert tree.fetched and sorted(p.relative_to(tree.path).as_posix() for p in tree.path.rglob("*")) == [
        "CMakeLists.txt", "src", "src/x.c"]
    # The key still holds the full commit; a sparse tree is not the full tree, so it adds the paths' hash.
    assert tree.path.parent.name == cache_key(spec) and cache_key(spec).startswith(f"git-{commit}-sparse-")
    assert tree.digest != commit and tree.digest.startswith(commit)
    assert cache_key(SourceSpec(kind="git", url="u", commit=commit, filter="blob:none")) == f"git-{commit}"
    stamp = json.loads((tree.path.parent / ".harness-source.json").read_text())
    assert stamp["sparse"] == ["CMakeLists.txt", "src"] and stamp["filter"] == "blob:none"
    assert set(stamp["manifest"]) == {".", "CMakeLists.txt", "src", "src/x.c"}
    # The manifest is checked at every use, as for a full checkout.
    victim = tree.path / "src" / "x.c"
    victim.chmod(0o644)
    victim.write_text("int y;\n")
    with pytest.raises(IntegrityError, match=r"src/x\.c"):
        pm.hook.harness_source_fetch(engine="toy", spec=spec, cache_dir=paths.sources_dir())
    # A filtered full checkout has every file.
    full = pm.hook.harness_source_fetch(engine="toy", spec=SourceSpec(kind="git", url=bare.as_uri(), commit=commit,
                                                                      filter="blob:none"),
                                        cache_dir=paths.sources_dir())
    assert (full.path / "testdata" / "huge.bin").stat().st_size == 256 * 512 and full.digest == commit


def test_sparse_path_that_does_not_exist(big_repo: tuple[Path, str], cache: Path) -> None:
    bare, commit = big_repo
    pm = make_manager(autoload=False)
    spec = SourceSpec(kind="git", url=bare.as_uri(), commit=commit, sparse=("src", "include"))
    with pytest.raises(SourceError, match=r"has no include: fix source\.sparse"):
        pm.hook.harness_source_fetch(engine="toy", spec=spec, cache_dir=paths.sources_dir())
