"""The shipped pre-commit hook, run the way a models repository runs it.

A models repository lists this repository and a rev in its ``.pre-commit-config.yaml``
(the snippet in ``.pre-commit-hooks.yaml``) and runs ``pre-commit run``. Here the rev is
the working tree as git sees it (tracked and untracked files, ignored ones left out),
committed into a side repository under ``~/.cache/harness-tests``, so uncommitted work is
what gets tested.

Why not ``pre-commit try-repo``: it installs the hook into a throwaway store on every call
(``Store(tempdir)``, whatever ``PRE_COMMIT_HOME`` says), and its snapshot of local changes
takes tracked files only (``git add -u``), so a new, not yet added module is missing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from tests.install.conftest import REPO_ROOT, check_ok, clean_env, record_time, run

CACHE = Path.home() / ".cache" / "harness-tests"
# Safe to keep across runs: pre-commit keys each clone and its hook venv by (repo, rev), and the
# rev below is a commit id computed from the tree alone, so an unchanged working tree reuses the
# installed hook and any change gets a new rev and a fresh install. Installs hold the store's lock.
PRE_COMMIT_HOME = CACHE / "pre-commit"
_KEY = hashlib.sha256(str(REPO_ROOT).encode()).hexdigest()[:12]  # one side repo per checkout
SIDE_REPO = CACHE / "pre-commit-src" / f"{_KEY}.git"
#: This checkout's current config, kept so ``pre-commit gc`` drops only hook venvs of older revs.
KEEP_CONFIG = CACHE / "pre-commit-configs" / f"{_KEY}.yaml"
#: Fixed identity and dates: the commit id depends on the files only.
_FIXED = {f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
          for what, value in (("NAME", "harness tests"), ("EMAIL", "tests@harness.invalid"),
                              ("DATE", "2000-01-01T00:00:00+0000"))}
EXAMPLE = REPO_ROOT / "examples" / "models" / "smollm2-chat.yaml"
GOOD_LINE, BAD_LINE = "context_size: 2048", "context_size: lots"


def git(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    return check_ok(run(["git", *args], cwd=cwd, env=env, stdin=stdin)).strip()


@pytest.fixture(scope="module", autouse=True)
def _total_time(pytestconfig: pytest.Config) -> Iterator[None]:
    start = time.monotonic()
    yield
    record_time(pytestconfig, "test_precommit.py total", time.monotonic() - start)


@pytest.fixture(scope="module")
def hook_rev(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The working tree committed into the side repository; returns the commit id."""
    if shutil.which("git") is None or run(["git", "rev-parse", "--git-dir"], cwd=REPO_ROOT).returncode:
        pytest.skip("needs git and a git checkout")
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO_ROOT)
    files = [f for f in listed.split("\0") if f and os.path.lexists(REPO_ROOT / f)]
    SIDE_REPO.parent.mkdir(parents=True, exist_ok=True)
    git("init", "--quiet", "--bare", SIDE_REPO, cwd=SIDE_REPO.parent)
    # The checkout's own .git is only read: objects and the index go to the side repository.
    env = clean_env(GIT_DIR=str(SIDE_REPO), GIT_WORK_TREE=str(REPO_ROOT),
                    GIT_INDEX_FILE=str(tmp_path_factory.mktemp("git") / "index"), **_FIXED)
    git("add", "--force", "--pathspec-from-file=-", "--pathspec-file-nul", cwd=REPO_ROOT, env=env,
        stdin="\0".join(files))
    tree = git("write-tree", cwd=REPO_ROOT, env=env)
    rev = git("commit-tree", tree, "-m", "harness working tree", cwd=REPO_ROOT, env=env)
    git("update-ref", f"refs/tags/wt-{rev}", rev, cwd=REPO_ROOT, env=env)
    return rev


def _config(rev: str) -> str:
    return (f"repos:\n  - repo: {SIDE_REPO}\n    rev: {rev}\n    hooks:\n"
            "      - id: harness-validate\n")


@pytest.fixture(scope="module")
def precommit_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return clean_env(PRE_COMMIT_HOME=str(PRE_COMMIT_HOME),
                     HARNESS_CACHE=str(tmp_path_factory.mktemp("harness-cache")))


@pytest.fixture(scope="module")
def models_repo(tmp_path_factory: pytest.TempPathFactory, hook_rev: str, precommit_env: dict[str, str],
                pytestconfig: pytest.Config) -> Iterator[Path]:
    """A models repository with a good and a bad config and the hook configured; hook installed."""
    repo = tmp_path_factory.mktemp("models-repo")
    git("init", "--quiet", cwd=repo)
    text = EXAMPLE.read_text(encoding="utf-8")
    assert GOOD_LINE in text.splitlines(), f"{EXAMPLE} no longer has {GOOD_LINE!r}: pick another field"
    (repo / "good.yaml").write_text(text, encoding="utf-8")
    (repo / "bad.yaml").write_text(text.replace(GOOD_LINE, BAD_LINE), encoding="utf-8")
    (repo / ".pre-commit-config.yaml").write_text(_config(hook_rev), encoding="utf-8")
    git("add", "--all", cwd=repo)

    KEEP_CONFIG.parent.mkdir(parents=True, exist_ok=True)
    KEEP_CONFIG.write_text(_config(hook_rev), encoding="utf-8")
    precommit = [sys.executable, "-m", "pre_commit"]
    start = time.monotonic()
    check_ok(run([*precommit, "install-hooks", "--config", KEEP_CONFIG], cwd=repo, env=precommit_env))
    record_time(pytestconfig, "pre-commit hook venv (install-hooks; ~0 when warm)", time.monotonic() - start)
    check_ok(run([*precommit, "gc"], cwd=repo, env=precommit_env))
    yield repo
    # pytest keeps old temporary dirs: without its config this repo no longer pins a hook venv for gc.
    (repo / ".pre-commit-config.yaml").unlink()


def run_hook(repo: Path, env: dict[str, str], *files: str) -> CompletedProcess[str]:
    return run([sys.executable, "-m", "pre_commit", "run", "harness-validate", "--color", "never",
                "--files", *files], cwd=repo, env=env)


def test_hook_passes_a_good_config(models_repo: Path, precommit_env: dict[str, str]) -> None:
    proc = run_hook(models_repo, precommit_env, "good.yaml")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "harness validate (model configs)" in out and "Passed" in out, out


def test_hook_fails_a_bad_config_at_its_line(models_repo: Path, precommit_env: dict[str, str]) -> None:
    lines = (models_repo / "bad.yaml").read_text(encoding="utf-8").splitlines()
    line = lines.index(BAD_LINE) + 1
    column = BAD_LINE.index("lots") + 1
    proc = run_hook(models_repo, precommit_env, "bad.yaml")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Failed" in out, out
    assert f"bad.yaml:{line}:{column}" in out, out
    assert "context_size" in out, out
    assert "Traceback" not in out, out
