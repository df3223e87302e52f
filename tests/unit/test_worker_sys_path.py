"""Python children never import from the current directory (issue 54, case 8).

``python -m mod`` puts the current directory first on ``sys.path``: a worker started from the parent
of a checkout died with ``cannot import name '__version__' from 'harness' (unknown location)``, and a
``yaml.py`` there would have been imported in place of PyYAML. Every child the harness starts is
``python -P`` (:func:`harness.core.pyexec.python_argv`); here one runs from a directory holding a
``harness/`` package and a ``yaml.py`` that fail loudly when imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.core import crash
from harness.core.pyexec import python_argv

DECOY = "raise SystemExit('decoy imported from the current directory: ' + __file__)\n"


@pytest.fixture
def decoys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__init__.py").write_text(DECOY)
    (tmp_path / "harness" / "__main__.py").write_text(DECOY)
    (tmp_path / "yaml.py").write_text(DECOY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_decoys_would_be_imported_without_it(decoys: Path) -> None:
    r = subprocess.run([sys.executable, "-c", "import yaml"], capture_output=True, text=True, check=False)
    assert "decoy imported" in r.stderr


def test_a_child_imports_the_real_modules(decoys: Path) -> None:
    code = "import harness, yaml; print(harness.__file__); print(yaml.__file__)"
    out = subprocess.run(python_argv("-c", code), capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == harness.__file__ and not out[1].startswith(str(decoys))


def test_a_supervised_worker_runs_from_a_directory_of_decoys(decoys: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(crash.SUPERVISED_ENV, raising=False)
    assert crash.supervise(["--version"], "harness --version") == 0
    out, err = capfd.readouterr()
    assert out.strip() == f"harness {harness.__version__}" and "decoy" not in err


def test_no_child_is_started_without_it() -> None:
    """``sys.executable, "-m"`` / ``"-c"`` anywhere but :mod:`harness.core.pyexec` is a child that
    would import from the current directory."""
    import re

    root = Path(__file__).parents[2]
    pattern = re.compile(r"sys\.executable\s*,\s*[\"']-[mc][\"']")
    files = [*root.glob("harness/**/*.py"), *root.glob("plugins/*.py"), *root.glob("engines/*/plugin/**/*.py")]
    found = [f"{p.relative_to(root)}:{n}" for p in files for n, line in enumerate(p.read_text().splitlines(), 1)
             if pattern.search(line)]
    assert not found, f"start Python children with harness.core.pyexec.python_argv (-P): {found}"
