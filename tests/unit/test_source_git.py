from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness import paths
from harness.errors import SourceError
from harness.plugin import make_manager
from harness.types import SourceSpec


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
