"""An untrusted engine folder's plugin is never imported (issue 54, case 5).

Every command imported the ``plugin/`` of every engine folder on ``$HARNESS_ENGINES_PATH``, even
with ``HARNESS_DISABLE_PLUGIN_AUTOLOAD=1``. Here the tiny engine's folder carries a plugin whose
import writes a marker file; the installed ``harness`` runs the commands the issue names: none
imports it, and the data-only recipe still goes through fetch, patch, ABI check, build and matrix.
``--trust tiny`` (or ``HARNESS_TRUST``) imports it; ``HARNESS_DISABLE_PLUGIN_AUTOLOAD=1`` imports no
folder's plugin, trusted or not; ``harness e2e tiny`` refuses an untrusted folder's specs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.engine.descriptor import engines_dir

from . import hostile_engine
from .test_recipe_confine import pytestmark as _tools

pytestmark = _tools

PLUGIN = '''
from pathlib import Path

Path({marker!r}).write_text("imported")

from harness.engine.plugin import hookimpl
from harness.engine.registry import EngineImpl


@hookimpl
def harness_engine_register():
    return [EngineImpl(name="tiny", serves=("text",))]
'''
SPEC = '''
from pathlib import Path


def test_runs():
    Path({marker!r}).with_name("spec-ran").write_text("ran")
'''


@pytest.fixture
def recipe(tmp_path: Path) -> hostile_engine.Recipe:
    recipe = hostile_engine.make(tmp_path)
    (recipe.folder / "plugin").mkdir()
    (recipe.folder / "plugin" / "__init__.py").write_text(PLUGIN.format(marker=str(recipe.outside / "imported")))
    (recipe.folder / "e2e").mkdir()
    (recipe.folder / "e2e" / "test_tiny.py").write_text(SPEC.format(marker=str(recipe.outside / "imported")))
    return recipe


def _registered(recipe: hostile_engine.Recipe, *argv: str, **env: str) -> dict[str, object]:
    run = recipe.harness(*argv, "engines", "--json", **env)
    assert run.returncode == 0, run.output
    return next(e for e in json.loads(run.output) if e["engine"] == "tiny")


def test_no_command_imports_an_untrusted_folders_plugin(recipe: hostile_engine.Recipe) -> None:
    config = engines_dir().parent / "examples" / "models" / "smollm2-chat.yaml"
    tiny = _registered(recipe)
    assert (tiny["registered"], tiny["trusted"]) == (False, False)
    runs = [recipe.harness("fetch", "tiny"), recipe.harness("patch", "--check", "tiny"),
            recipe.harness("patch", "tiny"), recipe.harness("abi", "check", "tiny"),
            recipe.harness("build", "tiny", "--variant", "cpu"), recipe.harness("matrix"),
            recipe.harness("plugins")]
    if config.is_file():
        runs += [recipe.harness("validate", str(config)), recipe.harness("config", "show", str(config))]
    for run in runs:
        assert run.returncode == 0, run.output  # a data-only recipe works
    assert not (recipe.outside / "imported").exists(), "an untrusted folder's plugin was imported"


def test_trust_imports_it_and_autoload_off_imports_no_folder(recipe: hostile_engine.Recipe) -> None:
    tiny = _registered(recipe, "--trust", "tiny", HARNESS_DISABLE_PLUGIN_AUTOLOAD="1")
    assert not tiny["registered"] and not (recipe.outside / "imported").exists()
    tiny = _registered(recipe, HARNESS_TRUST="other,tiny")
    assert tiny["registered"] and tiny["trusted"] and (recipe.outside / "imported").exists()
    (recipe.outside / "imported").unlink()
    tiny = _registered(recipe, "--trust", "tiny")
    assert tiny["registered"] and (recipe.outside / "imported").exists()


def test_e2e_refuses_an_untrusted_folders_specs(recipe: hostile_engine.Recipe) -> None:
    run = recipe.harness("e2e", "tiny")
    assert run.returncode == 2, run.output
    assert "is not trusted" in run.output and "--trust tiny" in run.output and "Traceback" not in run.output
    assert not (recipe.outside / "spec-ran").exists() and not (recipe.outside / "imported").exists()
