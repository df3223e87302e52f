"""Pins for ``abi diff``: which engine they fit, git revisions of git-sourced engines, and the tree
and ABI surface a pin names.

A pin is a directory (the engine tree), a version of a ``pypi-sdist`` engine's package, or,
for a ``git`` engine, a revision of its repository: a full commit, a branch or a tag. A git
revision is resolved to its full commit and fetched through the source plugin, so it lands in
the source cache (``sources/git-<commit>``) with its manifest like the engine's own pin.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy
from packaging.version import InvalidVersion, Version

from harness.core import paths
from harness.core.errors import SourceError, UsageError
from harness.core.types import EngineSpec

if TYPE_CHECKING:
    from harness.abi import surface as surf

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _tree_root(pin: Path, spec: EngineSpec) -> Path:
    sub = spec.source.subdir
    return pin / sub if sub and (pin / sub).is_dir() else pin


def pin_fits(pin: str, spec: EngineSpec) -> bool:
    """Whether ``pin`` can name a tree of ``spec``'s engine: a directory holding its ABI headers,
    a version of its sdist package, or (git sources) any revision name."""
    p = Path(pin).expanduser()
    if p.is_dir():
        headers = [str(h) for h in spec.abi.get("headers", [])]
        return bool(headers) and all((_tree_root(p, spec) / h).is_file() for h in headers)
    if pin.startswith("pypi:"):
        return spec.source.kind == "pypi-sdist"
    from harness.build import recipes

    try:
        if _recipe(spec, pin) is not None:  # a revision of this repository fits the engines it holds
            return True
    except recipes.RecipeError:
        return False
    if spec.source.kind == "git":
        return True
    if spec.source.kind == "pypi-sdist":
        try:
            Version(pin)
        except InvalidVersion:
            return False
        return True
    return False


def choose_engine(pins: list[str], specs: list[EngineSpec], default: Callable[[], str | None]) -> str:
    """The engine ``pins`` are for when ``--engine`` is not given.

    The only engine every pin fits; when several fit, the default engine (``default()``, asked
    only then) if it is one of them; otherwise :class:`UsageError` asking for ``--engine``.
    """
    fits = [s.name for s in specs if all(pin_fits(p, s) for p in pins)]
    if len(fits) == 1:
        return fits[0]
    chosen = default() if fits else None
    if chosen is not None and chosen in fits:
        return chosen
    shown = " ".join(pins)
    if not fits:
        msg = (f"no engine fits the pins {shown}: a pin is a directory holding the engine's ABI headers, "
               "a version of a pypi-sdist engine's package or a revision of a git engine; name it with --engine")
    else:
        msg = f"the pins {shown} fit several engines ({', '.join(fits)}): name one with --engine"
    raise UsageError(msg)


def _ls_remote(url: str, rev: str) -> list[tuple[str, str]]:
    from harness.engine.confine import check_git_url, git_env

    check_git_url(url, where="source.url")
    argv = ["git", "ls-remote", "--", url, rev, f"{rev}^{{}}"]  # the second pattern lists a peeled annotated tag
    try:
        r = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120, env=git_env(os.environ))
    except (OSError, subprocess.TimeoutExpired) as e:
        msg = f"git ls-remote {url} {rev} failed: {e}"
        raise SourceError(msg) from e
    if r.returncode:
        msg = f"git ls-remote {url} {rev} failed (exit {r.returncode}): {r.stderr.strip()}"
        raise SourceError(msg)
    return [(line.split()[0], line.split()[1]) for line in r.stdout.splitlines() if len(line.split()) == 2]


def resolve_revision(url: str, rev: str) -> str:
    """The full commit ``rev`` names in ``url``: a 40-hex commit as is, else a branch or tag
    (an annotated tag's commit, not the tag object)."""
    if _COMMIT.match(rev):
        return rev
    refs = _ls_remote(url, rev)
    peeled = [sha for sha, ref in refs if ref.endswith("^{}")]
    found = peeled or [sha for sha, _ in refs]
    if not found:
        msg = (f"{rev!r} is no branch or tag of {url}; name a git revision as a full 40-hex commit, "
               "a branch or a tag")
        raise UsageError(msg)
    if len(set(found)) > 1:
        msg = f"{rev!r} names several refs of {url} ({', '.join(ref for _, ref in refs)}): spell it out"
        raise UsageError(msg)
    return found[0]


def fetch_revision(spec: EngineSpec, rev: str, pm: pluggy.PluginManager) -> Path:
    """The source tree of a git engine at ``rev`` (pristine, from the source cache)."""
    source = dataclasses.replace(spec.source, commit=resolve_revision(spec.source.url, rev))
    tree = pm.hook.harness_source_fetch(engine=spec.name, spec=source, cache_dir=paths.sources_dir())
    if tree is None:
        msg = f"no plugin fetches source kind {source.kind!r}"
        raise SourceError(msg)
    return Path(tree.path)


@dataclasses.dataclass(frozen=True)
class PinTree:
    """The engine tree a pin names, and how reports name it (never a cache path or the home directory)."""

    path: Path
    label: str
    recipe: EngineSpec | None = None
    """The recipe of this repository the pin named, whose tree it is (from git history: untrusted); None for a
    directory, a package version or a revision of the engine's own repository (the engine's recipe vouches)."""


def dir_label(path: Path) -> str:
    """A directory pin as a report names it: a cached source tree by what it holds (its stamp), else its
    path with the home directory as ``~``."""
    resolved = path.resolve()
    cache = paths.cache_root().resolve()
    if resolved.is_relative_to(cache):
        import json

        for parent in (resolved, *resolved.parents):
            if not parent.is_relative_to(cache):
                break
            stamp = parent / ".harness-source.json"
            if stamp.is_file():
                try:
                    meta = dict(json.loads(stamp.read_text()))  # the source plugin's meta, at the top level
                except (ValueError, OSError, TypeError):
                    meta = {}
                if meta.get("package"):
                    return f"{meta['package']} {meta.get('version', '')}".strip()
                if meta.get("commit"):
                    return f"{meta.get('kind', 'source')} {str(meta['commit'])[:12]}"
                if meta.get("sha256") or meta.get("kind"):
                    return f"{meta.get('kind', 'source')} {parent.name[:12]}"
        return f"a cached tree ({resolved.name})"
    home = Path.home().resolve()
    return f"~/{resolved.relative_to(home)}" if resolved.is_relative_to(home) else str(path)


def _recipe(spec: EngineSpec, pin: str) -> EngineSpec | None:
    """The engine's recipe ``pin`` names in this repository: a revision (HEAD, main, a commit) holding the
    engine, or a version some commit pinned (whatever its package). None when it names neither."""
    from harness.build import recipes

    try:
        commit = recipes.resolve_rev(pin)
    except recipes.RecipeError:
        pass
    else:
        if recipes.holds_engine(commit, spec.name):
            return recipes.recipe_at(spec.name, pin)
        return None  # a revision of this repository without the engine: maybe one of the engine's own (git)
    try:
        return recipes.recipe_for_pin(spec.name, pin)
    except (recipes.RecipeError, UsageError):  # no commit pinned it, or an engine this checkout does not have
        return None


def locate(pin: str, spec: EngineSpec) -> PinTree:
    """The engine tree a pin names, tried in this order:

    - a directory (used as is, or its ``source.subdir`` when present);
    - ``pypi:PACKAGE==VERSION[#SUBDIR]``: any package's sdist that vendors the engine;
    - a revision of this repository (``HEAD``, ``main``, a commit) or a version a commit pinned: that
      recipe's own source (its package, version and subdir), so an old pin is found after a package change;
    - for a git engine, a revision of its repository;
    - a version of the current descriptor's package on the index.
    """
    p = Path(pin).expanduser()
    if p.is_dir():
        return PinTree(_tree_root(p, spec), dir_label(p))
    if pin.startswith("pypi:"):
        from harness.abi.pins import fetch_sdist_version
        from harness.pin.sources import _PYPI, find_subdir

        m = _PYPI.match(pin)
        if not m:
            msg = f"pin {pin!r}: expected pypi:PACKAGE==VERSION[#SUBDIR]"
            raise UsageError(msg)
        markers = [*(str(h) for h in spec.abi.get("headers", [])), "CMakeLists.txt"]
        sub = m.group("subdir") or find_subdir(m.group("package"), m.group("version"), markers) or ""
        top = fetch_sdist_version(m.group("package"), m.group("version"))
        return PinTree(top / sub if sub else top, f"{m.group('package')} {m.group('version')}")
    recipe = _recipe(spec, pin)
    if recipe is not None:
        from harness.build import pipeline
        from harness.pin import describe

        tree = pipeline.fetch(recipe).path
        where = f"recipe {recipe.recipe_commit[:12]}" if recipe.recipe_commit else "working tree"
        named = f"{pin}: " if pin != recipe.pin else ""
        return PinTree(tree, f"{named}{describe(recipe.raw['source'])} ({where})", recipe)
    if spec.source.kind == "git":
        from harness.engine.locations import shown
        from harness.engine.plugin import get_manager

        # the URL as the descriptor writes it (a local mirror relative to the project), not as this host resolves it
        return PinTree(fetch_revision(spec, pin, get_manager()), f"{shown(str(spec.raw['source'].get('url')))} @ {pin}")
    from harness.abi.pins import resolve_pin

    return PinTree(resolve_pin(pin, package=spec.source.package or spec.name, subdir=spec.source.subdir),
                   f"{spec.source.package or spec.name} {pin}")


def pin_tree(pin: str, spec: EngineSpec) -> Path:
    """The engine tree a pin names (:func:`locate`)."""
    return locate(pin, spec).path


def snapshot_pin(pin: str, spec: EngineSpec, targets: list[str] | None, *,
                 recipe: EngineSpec | None = None) -> surf.Surface:
    """The full surface of one pin (a version, a git revision or a directory) with the engine's header config.

    ``recipe``: whose tree the pin is, when the caller knows (a directory holding an old recipe's source); else the
    recipe of this repository the pin names, else ``spec``. An untrusted one's headers are parsed in the sandbox."""
    from harness.abi.check import snapshot_config

    found = locate(pin, spec)
    root = found.path
    abi = dict(spec.abi)
    # Constants-only headers are internal and come and go between pins; a report skips missing ones.
    abi["constant_headers"] = [h for h in abi.get("constant_headers", []) if (root / h).is_file()]
    return snapshot_config(root, abi, targets=targets, meta={"engine": spec.name, "pin": found.label},
                           recipe=recipe or found.recipe or spec)


def default_engine() -> str | None:
    """The engine commands use when they name none, if an engine plugin declares one."""
    try:
        from harness.engine import registry

        return registry.default("text").name
    except Exception:  # none declared (UsageError), or a broken engine plugin: a diff needs no plugin
        return None
