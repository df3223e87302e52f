"""An installed harness (pip install ., not editable) finds its data under <prefix>/share/harness."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from harness.core import paths

ROOT = Path(__file__).parents[2]


def test_setup_ships_every_data_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("harness_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    setup_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_py)
    monkeypatch.chdir(ROOT)
    shipped = {f for _, files in setup_py.data_files() for f in files}
    for must in ("engines/llamacpp/engine.yaml", "matrix/variants.yaml", "engines/llamacpp/abi/surface.json",
                 "engines/llamacpp/patches/0002-ggml-cpu-amx-tile-config-static.patch",
                 "engines/llamacpp/binding/CMakeLists.txt"):
        assert must in shipped, must


def test_project_root_falls_back_to_the_install_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "venv" / "lib" / "site-packages" / "harness"
    site.mkdir(parents=True)
    share = tmp_path / "venv" / "share" / "harness"
    (share / "engines").mkdir(parents=True)
    monkeypatch.delenv("HARNESS_ROOT", raising=False)
    monkeypatch.setattr(paths, "__file__", str(site / "core" / "paths.py"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.chdir(tmp_path)
    assert paths.project_root() == share
    assert not paths.is_checkout()
    assert paths.reports_dir() == tmp_path / "reports"


def test_checkout_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_ROOT", raising=False)
    assert paths.project_root() == ROOT
    assert paths.reports_dir() == ROOT / "reports"
