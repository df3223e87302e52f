from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .video_engines import FamilyEngine, install


@pytest.fixture
def fake_video_engine(monkeypatch: pytest.MonkeyPatch) -> FamilyEngine:
    """A video engine called ``fake`` (the minimax-h3 family), registered as a plugin registers one,
    so that ``backend: fake`` configs validate and render through the CLI."""
    engine = FamilyEngine("fake", "minimax-h3")
    install(monkeypatch, engine)
    return engine


@pytest.fixture
def outside_python(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory outside this interpreter's prefix. nox points ``TMPDIR`` into its venv
    (``.nox/tests/tmp``), so ``tmp_path`` sits inside the prefix a sandbox shows read-only as a whole:
    decoys there would be visible through it, and a build dir there is refused."""
    import shutil
    import sys
    import tempfile

    prefixes = [os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
    if not any(os.path.realpath(tmp_path).startswith(p.rstrip("/") + "/") for p in prefixes):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(prefix="harness-outside-python-", dir="/var/tmp" if os.path.isdir("/var/tmp") else "/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def _progress_not_quiet() -> Iterator[None]:
    """``harness.cli.main`` sets the process-wide quiet flag from ``--json``/``--quiet``; a test that calls
    a command's function directly (not through main) must not inherit the last test's flag."""
    from harness.core import progress

    progress.set_quiet(False)
    yield
    progress.set_quiet(False)
