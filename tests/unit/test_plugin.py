from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from harness.engine.plugin import (
    DISABLE_AUTOLOAD_ENV,
    builtin_plugins,
    describe,
    hookimpl,
    make_manager,
)


def test_builtins_registered_in_declared_order() -> None:
    pm = make_manager(autoload=False)
    names = [n for n, _ in pm.list_name_plugin()]
    assert names == [n for n, _ in builtin_plugins()]


def test_extra_plugin_registered_after_builtins_and_called_first() -> None:
    class Late:
        @hookimpl
        def harness_source_kinds(self) -> list[str]:
            return ["late"]

    pm = make_manager(autoload=False, extra=(Late(),))
    names = [n for n, _ in pm.list_name_plugin()]
    assert names[: len(builtin_plugins())] == [n for n, _ in builtin_plugins()]
    # pluggy calls the most recently registered implementation first
    assert pm.hook.harness_source_kinds()[0] == ["late"]


@pytest.fixture
def entry_point_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fake installed distribution with a ``harness`` entry point."""
    (tmp_path / "toyplug.py").write_text(textwrap.dedent("""
        from harness.engine.plugin import hookimpl

        @hookimpl
        def harness_source_kinds():
            return ["toy-kind"]
    """))
    dist = tmp_path / "toyplug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[harness]\ntoy = toyplug\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "toy"
    sys.modules.pop("toyplug", None)


def test_entry_point_plugin_is_picked_up(entry_point_plugin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLE_AUTOLOAD_ENV, raising=False)
    pm = make_manager()
    assert pm.has_plugin(entry_point_plugin)
    assert ["toy-kind"] in pm.hook.harness_source_kinds()
    row = next(r for r in describe(pm) if r["name"] == "toy")
    assert row["origin"] == "toyplug 1.0"
    assert row["hooks"] == ["harness_source_kinds"]


def test_autoload_can_be_disabled(entry_point_plugin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    pm = make_manager()
    assert not pm.has_plugin(entry_point_plugin)
