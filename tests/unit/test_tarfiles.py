"""``harness.core.tarfiles``: extraction filters whatever the interpreter's tarfile has."""

from __future__ import annotations

import importlib
import io
import re
import tarfile as stdlib_tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import harness.core.tarfiles as tarfiles


def _archive(path: Path, *, link_target: str | None = None) -> Path:
    with stdlib_tarfile.open(path, "w:gz") as tf:
        data = b"hello\n"
        info = stdlib_tarfile.TarInfo("pkg/hello.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        if link_target is not None:
            link = stdlib_tarfile.TarInfo("pkg/escape")
            link.type, link.linkname = stdlib_tarfile.SYMTYPE, link_target
            tf.addfile(link)
    return path


@pytest.fixture(params=["interpreter", "backport"])
def tarfile_module(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The module harness.core.tarfiles picks here, and the one it picks where the stdlib lacks filters."""
    if request.param == "backport":
        pytest.importorskip("backports.tarfile", reason="backports.tarfile is installed only where it is needed")
        monkeypatch.delattr(stdlib_tarfile, "data_filter", raising=False)
    yield importlib.reload(tarfiles).tarfile
    monkeypatch.undo()
    importlib.reload(tarfiles)


def test_the_backport_only_where_the_stdlib_lacks_filters(tarfile_module: object) -> None:
    backport = not hasattr(stdlib_tarfile, "data_filter")
    assert (tarfile_module is stdlib_tarfile) is not backport
    assert hasattr(tarfile_module, "data_filter")


def test_data_filter_extracts_and_refuses_an_escaping_link(tarfile_module: object, tmp_path: Path) -> None:
    tarfile = tarfiles.tarfile
    good = _archive(tmp_path / "good.tar.gz")
    with tarfile.open(good) as tf:
        tf.extractall(tmp_path / "out", filter="data")
    assert (tmp_path / "out" / "pkg" / "hello.txt").read_text() == "hello\n"
    bad = _archive(tmp_path / "bad.tar.gz", link_target="/etc/passwd")
    with tarfile.open(bad) as tf, pytest.raises(tarfile.FilterError):
        tf.extractall(tmp_path / "bad", filter="data")
    assert not (tmp_path / "bad" / "pkg" / "escape").exists()


def test_every_filtered_extraction_imports_tarfile_from_here() -> None:
    """A module that extracts with ``filter=`` but imports the stdlib's tarfile breaks on Debian 12's 3.11.2."""
    root = Path(__file__).resolve().parents[2]
    offenders = [str(p.relative_to(root)) for top in ("harness", "plugins") for p in sorted((root / top).rglob("*.py"))
                 if p.name != "tarfiles.py" and re.search(r"\.extract(?:all)?\([^)]*\bfilter=", p.read_text())
                 and re.search(r"^\s*import tarfile\b", p.read_text(), re.M)]
    assert not offenders, f"import tarfile from harness.core.tarfiles in {offenders}"
