"""The stages wired together: fetch -> patch -> ABI check -> build.

Every command that builds goes through here: :func:`rows_for` says which matrix rows an engine
builds among those selected (``harness build``, qualify, the CI matrix, emulation), and
:func:`prepare_build` then :func:`build_row` build them from the checked, patched tree.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import unquote, urlparse

import pluggy

from harness.core import paths
from harness.core.errors import ConfigError, HarnessError, SourceError, UsageError
from harness.core.types import EngineSpec, HostInfo, PatchedTree, PatchOutcome, SourceTree, Variant
from harness.engine.descriptor import load_engine
from harness.engine.plugin import get_manager
from harness.source.cache import checking
from harness.source.patches import STAMP as PATCH_STAMP
from harness.source.patches import (
    apply_series,
    check_series,
    copy_dir,
    copy_state,
    load_series,
    series_hash,
)

if TYPE_CHECKING:
    from harness.abi.check import CheckResult
    from harness.build.cmake import BuildResult


def _pm(pm: pluggy.PluginManager | None) -> pluggy.PluginManager:
    return pm or get_manager()


def fetch(engine: EngineSpec | str, pm: pluggy.PluginManager | None = None, *,
          full: bool | None = None, repair: bool | None = None) -> SourceTree:
    """The pinned source, checked against its manifest (``full``: every file rehashed;
    ``repair``: a damaged tree is made again instead of refused)."""
    spec = load_engine(engine) if isinstance(engine, str) else engine
    pm = _pm(pm)
    check_source_path(spec)
    with checking(full=full, repair=repair):
        tree: SourceTree | None = pm.hook.harness_source_fetch(
            engine=spec.name, spec=spec.source, cache_dir=paths.sources_dir())
    if tree is None:
        kinds = sorted(k for ks in pm.hook.harness_source_kinds() for k in ks)
        msg = f"no plugin fetches source kind {spec.source.kind!r} (known kinds: {', '.join(kinds)})"
        raise SourceError(msg)
    from harness.source import provenance

    provenance.check(spec)  # upstream.build/commit as the source carries them, at every fetch
    return tree


def archive_dirs() -> list[Path]:
    """Where the harness's own recipes keep local archives (the folders their ``source.path`` name),
    whether or not a folder on ``$HARNESS_ENGINES_PATH`` shadows them."""
    from harness.engine.descriptor import DESCRIPTOR, engines_dir, parse_engine

    out = []
    for path in sorted(engines_dir().glob(f"*/{DESCRIPTOR}")):
        try:
            spec = parse_engine(path)
        except HarnessError:
            continue
        if spec.source.path:
            out.append(Path(spec.source.path).parent)
    return out


def check_source_path(spec: EngineSpec) -> None:
    """An untrusted recipe's ``source.path`` is read only inside its own project (the folder holding
    its ``engines/``), the downloads cache, ``$HARNESS_MIRRORS`` or a folder the harness's own recipes keep archives in:
    any other file (``/etc/shadow``) is refused before it is opened, hashed or named by its sha256. Its
    git ``source.url`` names a server, or a repository in those same places (``file://``, a path)."""
    from harness.engine.confine import git_url_is_local
    from harness.engine.locations import mirrors_dir
    from harness.engine.trust import is_trusted, untrusted_hint

    if is_trusted(spec):
        return
    # $HARNESS_MIRRORS: the folder this machine's user keeps mirrors and archives in for descriptors to name
    allowed = [spec.root.parent.parent, paths.downloads_dir(), *archive_dirs(), *filter(None, [mirrors_dir()])]
    places = ", ".join(str(a) for a in dict.fromkeys(allowed))

    def inside(path: str) -> bool:
        real = os.path.realpath(path)
        return any(real.startswith(os.path.realpath(a).rstrip(os.sep) + os.sep) for a in allowed)

    url = spec.source.url or ""
    if spec.source.kind == "git" and url and git_url_is_local(url):
        local = unquote(urlparse(url).path) if url.lower().startswith("file:") else url
        if not inside(local):
            msg = (f"{spec.root / 'engine.yaml'}:source.url: {url} is a repository on this host outside the places an "
                   f"untrusted recipe's sources are read from ({places}); it is not fetched. Name a server "
                   f"(https://, ssh://, git://), put the repository inside the recipe's project "
                   f"({spec.root.parent.parent}), or {untrusted_hint(spec.name)}")
            raise ConfigError(msg)
    if not spec.source.path or inside(spec.source.path):
        return
    msg = (f"{spec.root / 'engine.yaml'}:source.path: {spec.source.path} is outside the places an untrusted recipe's "
           f"archive is read from ({places}); it is not opened, hashed "
           f"or named. Put the archive inside the recipe's project ({spec.root.parent.parent}), or "
           f"{untrusted_hint(spec.name)}")
    raise ConfigError(msg)


def patched_tree(engine: EngineSpec | str, pm: pluggy.PluginManager | None = None, *,
                 full: bool | None = None, repair: bool | None = None) -> PatchedTree:
    spec = load_engine(engine) if isinstance(engine, str) else engine
    pm = _pm(pm)
    with checking(full=full, repair=repair):
        return _apply(spec, fetch(spec, pm))


def _apply(spec: EngineSpec, source: SourceTree) -> PatchedTree:
    return apply_series(source, load_series(spec.patches_dir), engine=spec.name)


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
        copy = _apply(spec, source) if exists else None
    return source, copy


def working_copy_state(engine: EngineSpec | str, pm: pluggy.PluginManager | None = None) -> tuple[Path, str | None]:
    """``(tree, problem)`` of the current series' working copy, unchanged: problem is None when
    it is intact, ``""`` when there is none, else what was edited."""
    spec = load_engine(engine) if isinstance(engine, str) else engine
    return copy_state(fetch(spec, pm), load_series(spec.patches_dir), engine=spec.name)


def check_patches(engine: EngineSpec | str, pm: pluggy.PluginManager | None = None) -> list[PatchOutcome]:
    spec = load_engine(engine) if isinstance(engine, str) else engine
    return check_series(fetch(spec, pm), load_series(spec.patches_dir))


class RowChoice(NamedTuple):
    """The selected matrix rows an engine builds, and the selected ones it does not, with why."""

    rows: tuple[Variant, ...]
    skipped: tuple[tuple[Variant, str], ...]


def rows_for(engine: EngineSpec, patterns: str | None = None, *, where: Callable[[Variant], bool] | None = None,
             matrix: Sequence[Variant] | None = None, strict: bool = False) -> RowChoice:
    """The matrix rows ``engine`` builds (its descriptor's ``variants:`` list and intent map, the
    row's ``engines:``) among the selected ones, and the others with the reason.

    Selected: the rows whose name matches one of ``patterns`` (fnmatch, comma-separated; a pattern
    that matches no row is an error naming the rows), else every row; ``where`` narrows further
    (``lambda v: v.default``). ``matrix``: the rows to choose from (default: ``matrix/*.yaml``).

    ``strict`` (``harness build``): a row named exactly (no wildcard) that the engine does not
    build is an error, and so is a selection the engine builds nothing of; rows a wildcard picked
    up are skipped with their reason.
    """
    from harness.build.matrix import engine_support, load_matrix, select

    table = list(matrix) if matrix is not None else load_matrix()
    chosen = select(table, patterns) if patterns else table
    rows: list[Variant] = []
    skipped: list[tuple[Variant, str]] = []
    for v in chosen:
        if where is not None and not where(v):
            continue
        reason = engine_support(engine, v)
        if reason is None:
            rows.append(v)
        else:
            skipped.append((v, reason))
    if strict:
        exact = {p for p in (patterns or "").split(",") if p and not any(c in p for c in "*?[")}
        for v, reason in skipped:
            if v.name in exact:
                msg = f"variant {v.name} is {reason}"
                raise UsageError(msg)
        if not rows:
            msg = (f"no variant matching {patterns!r} is built by {engine.name}: "
                   + "; ".join(f"{v.name}: {r}" for v, r in skipped))
            raise UsageError(msg)
    return RowChoice(tuple(rows), tuple(skipped))


@dataclass(frozen=True, kw_only=True)
class BuildInputs:
    """What every build of a pin starts from: the patched tree that passed the ABI check."""

    engine: EngineSpec
    tree: PatchedTree
    abi: CheckResult
    host: HostInfo
    pm: pluggy.PluginManager


def prepare_build(engine: EngineSpec, pm: pluggy.PluginManager | None = None,
                  host: HostInfo | None = None) -> BuildInputs:
    """fetch -> patch -> ABI check (each a no-op when stamped). The ABI check runs before any
    build: seconds, not a wasted half hour."""
    from harness.abi.check import check_engine
    from harness.core import host as hostmod

    pm = _pm(pm)
    tree = patched_tree(engine, pm)
    abi = check_engine(engine, tree.path)
    return BuildInputs(engine=engine, tree=tree, abi=abi, host=host or hostmod.probe(), pm=pm)


def build_row(inputs: BuildInputs, row: Variant, *, overrides: dict[str, str] | None = None,
              force: bool = False) -> BuildResult:
    """The one way a matrix row is built: from ``inputs``' checked tree, stamped with its ABI
    fingerprint (a no-op when the stamped artifact matches)."""
    from harness.build.cmake import build

    return build(inputs.pm, inputs.engine, row, inputs.tree, inputs.host, overrides=overrides,
                 abi_fingerprint=inputs.abi.fingerprint, force=force)


def build_variant(engine: EngineSpec, variant: str, pm: pluggy.PluginManager | None = None,
                  *, force: bool = False) -> BuildResult:
    """fetch -> patch -> ABI check -> build of one matrix row by name (each stage a no-op when stamped)."""
    from harness.build.matrix import get_variant

    row = get_variant(variant)
    return build_row(prepare_build(engine, pm), row, force=force)
