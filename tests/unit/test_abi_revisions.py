"""``abi diff`` pins: git revisions for git engines, and which engine pins are for."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.abi import revisions
from harness.abi.revisions import choose_engine, pin_fits, resolve_revision
from harness.core.errors import UsageError
from harness.core.types import EngineSpec, SourceSpec


def spec(name: str, kind: str, header: str) -> EngineSpec:
    return EngineSpec(name=name, root=Path("/x/engines") / name, source=SourceSpec(kind=kind, url="file:///nowhere"),
                      upstream={}, cmake={}, targets=(), artifacts={}, abi={"headers": [header]})


TEXT = spec("text", "pypi-sdist", "include/text.h")
VIDEO = spec("video", "pypi-sdist", "include/video.h")
TINY = spec("tiny", "git", "include/tiny.h")


def test_pin_fits(tmp_path: Path) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "tiny.h").write_text("")
    assert pin_fits(str(tmp_path), TINY) and not pin_fits(str(tmp_path), TEXT)
    assert pin_fits("0.3.16", TEXT) and not pin_fits("main", TEXT)
    assert pin_fits("main", TINY) and pin_fits("a" * 40, TINY)


def test_choose_engine() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    # Commits fit only the git engine, even though the default engine is a text one.
    def refuse() -> str:
        raise AssertionError("the default engine is asked only when several engines fit")

    assert choose_engine([sha, sha], [TEXT, VIDEO, TINY], default=refuse) == "tiny"
    # Versions fit both sdist engines (and are branch names for the git one): the default engine, if it fits.
    assert choose_engine(["0.3.16", "0.3.36"], [TEXT, VIDEO, TINY], default=lambda: "text") == "text"
    with pytest.raises(UsageError, match=r"fit several engines \(text, video, tiny\): name one with --engine"):
        choose_engine(["0.3.16", "0.3.36"], [TEXT, VIDEO, TINY], default=lambda: None)
    with pytest.raises(UsageError, match="no engine fits the pins"):
        choose_engine(["main", "dev"], [TEXT, VIDEO], default=lambda: "text")


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_resolve_revision_branches_and_tags(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    _git("init", "-q", "-b", "main", cwd=work)
    (work / "a").write_text("1")
    _git("add", "-A", cwd=work)
    _git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one", cwd=work)
    first = _git("rev-parse", "HEAD", cwd=work)
    _git("-c", "user.email=t@t", "-c", "user.name=t", "tag", "-a", "v1", "-m", "v1", cwd=work)
    _git("tag", "light", cwd=work)
    (work / "a").write_text("2")
    _git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "two", cwd=work)
    second = _git("rev-parse", "HEAD", cwd=work)
    url = work.as_uri()
    assert resolve_revision(url, "main") == second
    assert resolve_revision(url, "v1") == first  # the commit, not the annotated tag object
    assert resolve_revision(url, "light") == first
    assert resolve_revision(url, first) == first
    with pytest.raises(UsageError, match="'nope' is no branch or tag"):
        resolve_revision(url, "nope")


def test_default_engine_is_none_when_no_plugin_declares_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.core.errors import HarnessError
    from harness.engine import registry

    def none(kind: str = "text") -> object:
        raise HarnessError("no registered engine serves text requests")

    monkeypatch.setattr(registry, "default", none)
    assert revisions.default_engine() is None
