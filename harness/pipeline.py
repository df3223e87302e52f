"""The stages wired together: fetch -> patch -> ABI check -> build."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

from harness import paths
from harness.engines import load_engine
from harness.errors import SourceError
from harness.patches import STAMP as PATCH_STAMP
from harness.patches import (
    apply_series,
    check_series,
    copy_dir,
    copy_state,
    load_series,
    series_hash,
)
from harness.plugin import get_manager
from harness.source import checking
from harness.types import EngineSpec, PatchedTree, PatchOutcome, SourceTree

if TYPE_CHECKING:
    from harness.build import BuildResult


def _pm(pm: pluggy.PluginManager | None) -> pluggy.PluginManager:
    return pm or get_manager()


def fetch(engine: EngineSpec | str, pm: pluggy.PluginManager | None = None, *,
          full: bool | None = None, repair: bool | None = None) -> SourceTree:
    """The pinned source, checked against its manifest (``full``: every file rehashed;
    ``repair``: a damaged tree is made again instead of refused)."""
    spec = load_engine(engine) if isinstance(engine, str) else engine
    pm = _pm(pm)
    with checking(full=full, repair=repair):
        tree: SourceTree | None = pm.hook.harness_source_fetch(
            engine=spec.name, spec=spec.source, cache_dir=paths.sources_dir())
    if tree is None:
        kinds = sorted(k for ks in pm.hook.harness_source_kinds() for k in ks)
        msg = f"no plugin fetches source kind {spec.source.kind!r} (known kinds: {', '.join(kinds)})"
        raise SourceError(msg)
    return tree


def patched_tree(engine: EngineSpec | str, pm: pluggy.PluginManager | None = None, *,
                 full: bool | None = None, repair: bool | None = None) -> PatchedTree:
    spec = load_engine(engine) if isinstance(engine, str) else engine
    pm = _pm(pm)
    with checking(full=full, repair=repair):
        return _apply(spec, pm, fetch(spec, pm))


def _apply(spec: EngineSpec, pm: pluggy.PluginManager, source: SourceTree) -> PatchedTree:
    tree = apply_series(source, load_series(spec.patches_dir), engine=spec.name)
    if tree.applied:
        pm.hook.harness_patch_applied(tree=tree)
    return tree


def check_cache(engine: EngineSpec | str, pm: pluggy.PluginManager | None = None, *,
                repair: bool = False) -> tuple[SourceTree, PatchedTree | None]:
    """``harness fetch --verify`` / ``--repair``: rehash the archive, every file of the pristine
    tree and of the current series' working copy (when there is one); with ``repair``,
    make a damaged pristine tree again. An edited working copy is always re-created."""
    spec = load_engine(engine) if isinstance(engine, str) else engine
    pm = _pm(pm)
    with checking(full=True, repair=repair):
        source = fetch(spec, pm)
        series = load_series(spec.patches_dir)
        exists = (copy_dir(source, series_hash(series), engine=spec.name) / PATCH_STAMP).is_file()
        copy = _apply(spec, pm, source) if exists else None
    return source, copy


def working_copy_state(engine: EngineSpec | str, pm: pluggy.PluginManager | None = None) -> tuple[Path, str | None]:
    """``(tree, problem)`` of the current series' working copy, unchanged: problem is None when
    it is intact, ``""`` when there is none, else what was edited."""
    spec = load_engine(engine) if isinstance(engine, str) else engine
    return copy_state(fetch(spec, pm), load_series(spec.patches_dir), engine=spec.name)


def check_patches(engine: EngineSpec | str, pm: pluggy.PluginManager | None = None) -> list[PatchOutcome]:
    spec = load_engine(engine) if isinstance(engine, str) else engine
    return check_series(fetch(spec, pm), load_series(spec.patches_dir))


def build_variant(engine: EngineSpec, variant: str, pm: pluggy.PluginManager | None = None,
                  *, force: bool = False) -> BuildResult:
    """fetch -> patch -> ABI check -> build of one matrix row (each stage a no-op when stamped)."""
    from harness import host as hostmod
    from harness.abi.check import check_engine
    from harness.build import build
    from harness.matrix import get_variant

    pm = _pm(pm)
    row = get_variant(variant)
    tree = patched_tree(engine, pm)
    abi = check_engine(engine, tree.path)
    return build(pm, engine, row, tree, hostmod.probe(), abi_fingerprint=abi.fingerprint, force=force)
