"""``abi check``: the pinned, patched headers against the committed surface, before any build.

The committed surface (``engines/<engine>/abi/surface.json``) is what the binding
was written against. The check snapshots the pinned headers for the committed
targets, restricts them to the committed used set, and fails on any difference.
A move of the engine's declared ABI version macro (``abi.version_macro``) is the
first difference listed, said as such.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.abi import surface as surf
from harness.abi.diff import diff_surfaces
from harness.core import paths
from harness.core.errors import AbiError, ConfigError

if TYPE_CHECKING:
    from harness.core.types import EngineSpec


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """A passed check: what was compared and how long it took."""

    engine: str
    fingerprint: str
    targets: tuple[str, ...]
    functions: int
    structs: int
    seconds: float
    declared_version: int | str | None = None
    """The value of the engine's declared ABI version macro, when the descriptor names one."""


def surface_path(engine: str) -> Path:
    """The checkout's ``engines/<engine>/abi/surface.json``; an engine's own is ``EngineSpec.surface_path``."""
    return paths.project_root() / "engines" / engine / "abi" / "surface.json"


def version_macro(abi: Mapping[str, Any]) -> str | None:
    """The engine's declared ABI version macro (``abi.version_macro``), if it names one."""
    macro = abi.get("version_macro")
    return str(macro) if macro else None


def snapshot_config(
    root: Path, abi: Mapping[str, Any], *, targets: Sequence[str] | None = None,
    meta: Mapping[str, Any] | None = None, recipe: EngineSpec | None = None,
) -> surf.Surface:
    """Snapshot the headers an engine descriptor's ``abi:`` section names.

    ``recipe``: the recipe ``root`` is the tree of. An untrusted one's headers are parsed in the sandbox
    (:mod:`harness.abi.sandboxed`: they may ``#include`` any file of the host); None is a tree the caller
    vouches for, parsed in this process.
    """
    if not abi.get("headers"):
        msg = "the engine descriptor has no abi.headers; list the public headers (e.g. include/engine.h)"
        raise ConfigError(msg)
    from harness.abi import sandboxed
    from harness.abi.snapshot import CONSTANT_PATTERN, snapshot_request  # libclang: the build extra

    macro = version_macro(abi)
    if macro:
        meta = {**(meta or {}), "version_macro": macro}
    args = {
        "root": str(root.resolve()),
        "headers": [str(h) for h in abi["headers"]],
        "include_dirs": [str(d) for d in abi.get("include_dirs", [])],
        "targets": list(targets or abi.get("targets") or surf.DEFAULT_TARGETS),
        "defines": [str(d) for d in abi.get("defines", [])],
        "constant_headers": [str(h) for h in abi.get("constant_headers", [])],
        "constant_pattern": str(abi.get("constant_pattern", CONSTANT_PATTERN)),
        "keep_constants": [macro] if macro else [],
        "meta": dict(meta) if meta else None,
    }
    surface: surf.Surface = sandboxed.parse(recipe, snapshot_request, args, tree=root)
    return surface


def load_committed(engine: str, path: Path | None = None) -> surf.Surface:
    path = path or surface_path(engine)
    if not path.is_file():
        msg = (f"no committed ABI surface at {path}. Create it with `harness abi snapshot {engine} "
               "--used-from <binding or its sources>`, review it and commit it")
        raise AbiError(msg)
    try:
        return surf.load(path)
    except ValueError as e:
        msg = f"{path} is not a valid ABI surface ({e}); regenerate it with `harness abi snapshot {engine}`"
        raise AbiError(msg) from e


def pinned_view(root: Path, abi: Mapping[str, Any], committed: Mapping[str, Any], *,
                recipe: EngineSpec | None = None) -> surf.Surface:
    """The pinned headers seen the way the committed surface was cut: same targets, same used set.
    ``recipe``: whose tree ``root`` is (:func:`snapshot_config`)."""
    return _cut(_pinned(root, abi, committed, recipe=recipe), committed)


def _pinned(root: Path, abi: Mapping[str, Any], committed: Mapping[str, Any], *,
            recipe: EngineSpec | None) -> surf.Surface:
    return snapshot_config(root, abi, targets=list(committed.get("targets") or []) or None, recipe=recipe)


def _cut(full: surf.Surface, committed: Mapping[str, Any]) -> surf.Surface:
    used = committed.get("used")
    return surf.filter_surface(full, set(used)) if used is not None else full


def uncovered_uses(abi: Mapping[str, Any], committed: Mapping[str, Any], full: Mapping[str, Any],
                   *, sources_root: Path | None = None) -> list[str]:
    """The engine names the binding's sources (``abi.used_from``) call today that the committed used set
    lacks: a change of one of them upstream would pass the check unseen. One line per name.

    A relative ``abi.used_from`` is read below ``sources_root``: the root of the recipe the descriptor
    comes from (an old pin's recipe carries its own binding source, the one its binding is built from),
    else the checkout.
    """
    configured, used = abi.get("used_from"), committed.get("used")
    if not configured or used is None:
        return []
    path = Path(str(configured))
    root = sources_root or paths.project_root()
    if not (path if path.is_absolute() else root / path).exists():  # an installed harness without the engine sources
        return []
    from harness.abi.used import recipe_identifiers, used_from

    # a descriptor's used_from is relative (harness.engine.confine): the recipe's own files, read confined
    found = (used_from(path, abi.get("used_pattern")) if path.is_absolute()
             else recipe_identifiers(root, str(configured), abi.get("used_pattern")))
    names = found & surf.known_names(full)
    return [f"the binding now uses {name}, which the committed surface does not cover (it was cut before "
            "the binding called it)" for name in sorted(names - set(used))]


def differences(root: Path, abi: Mapping[str, Any], committed: Mapping[str, Any],
                *, sources_root: Path | None = None, recipe: EngineSpec | None = None) -> list[str]:
    """One line per difference between the committed surface and the pinned headers, and per engine
    name the binding uses that the committed surface does not cover. ``recipe``: whose tree ``root`` is."""
    full = _pinned(root, abi, committed, recipe=recipe)
    current = _cut(full, committed)
    lines = diff_surfaces(committed, current, version_macro=version_macro(abi))
    lines += uncovered_uses(abi, committed, full, sources_root=sources_root)
    stored = str(committed.get("fingerprint", ""))
    if not lines and stored != current["fingerprint"]:
        # Nothing itemized yet the content hashes differ: a hand-edited file. Still a failure.
        lines = [f"fingerprint {stored[:16]} -> {current['fingerprint'][:16]} "
                 "(no itemized difference; the committed file may have been edited by hand)"]
    return lines


def check_tree(engine: str, root: Path, abi: Mapping[str, Any], *, pin: str = "",
               committed_path: Path | None = None, sources_root: Path | None = None,
               recipe: EngineSpec | None = None) -> CheckResult:
    """Raise :class:`AbiError` listing each difference; return what was checked otherwise.

    ``sources_root``: where a relative ``abi.used_from`` lives (the recipe's root; default the checkout);
    ``recipe``: whose tree ``root`` is (an untrusted recipe's headers are parsed in the sandbox).
    """
    t0 = time.perf_counter()
    path = committed_path or surface_path(engine)
    committed = load_committed(engine, path)
    lines = differences(root, abi, committed, sources_root=sources_root, recipe=recipe)
    if lines:
        where = f" ({pin})" if pin else ""
        rel = path.relative_to(paths.project_root()) if path.is_relative_to(paths.project_root()) else path
        msg = "\n".join([
            f"the pinned headers of {engine}{where} disagree with the committed ABI surface {rel} "
            f"({len(lines)} difference{'s' if len(lines) != 1 else ''}):",
            *lines,
            f"Update the binding (engines/{engine}/binding/) for these changes, then accept them with "
            f"`harness abi snapshot {engine}` and review the diff of {rel} before committing it.",
        ])
        raise AbiError(msg)
    macro = version_macro(abi)
    declared = committed.get("constants", {}).get(macro) if macro else None
    return CheckResult(
        engine=engine,
        fingerprint=str(committed.get("fingerprint", "")),
        targets=tuple(committed.get("targets") or ()),
        functions=len(committed.get("functions", {})),
        structs=len(committed.get("structs", {})),
        seconds=time.perf_counter() - t0,
        declared_version=declared if isinstance(declared, (int, str)) else None,
    )


def check_engine(spec: EngineSpec, tree: Path) -> CheckResult:
    """The pipeline's ABI stage: the patched tree of ``spec`` against ``engines/<engine>/abi/`` of its recipe, with
    the binding source of the same recipe (for an old pin from git history: that commit's, not the
    working tree's; :mod:`harness.build.recipes`)."""
    return check_tree(spec.name, tree, spec.abi, pin=spec.pin, committed_path=spec.surface_path,
                      sources_root=spec.root.parent.parent, recipe=spec)
