"""An engine's build recipe at another pin, from this repository's git history.

A pin is never just a version: its recipe is the descriptor (``engines/<e>/engine.yaml``:
sdist hash, upstream build number, CMake options, targets), the patch series written for it
(``engines/<e>/patches/``) and the ABI surface the binding was checked against (``engines/<e>/abi/``), all
committed together when the pin moved. The release engineer's "old pin" is therefore the
recipe at an older commit (usually main), and the harness builds it from there instead of
guessing options, patches and build numbers for a version nobody reviewed.

``recipe_at(engine, rev)`` materializes ``engines/<e>``, ``engines/<e>/patches`` and ``engines/<e>/abi`` of
``rev`` (and ``engines/_shared``, the headers every engine's binding source includes, so
the recipe's own binding can be built) into ``<cache>/recipes/<e>-<commit12>/`` (once, stamped)
and loads the descriptor from there; :attr:`EngineSpec.patches_dir` and the ABI check follow
that root.
``recipe_for_pin(engine, pin)`` picks the working tree's recipe when it pins ``pin``, else
the newest commit (of any branch or tag) whose descriptor pins it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from filelock import FileLock

from harness.core import paths
from harness.core.datafile import load_yaml
from harness.core.errors import ConfigError
from harness.core.tarfiles import tarfile
from harness.core.types import EngineSpec
from harness.engine.descriptor import DESCRIPTOR, load_engine, parse_engine

STAMP = ".harness-recipe.json"
RECIPE_DIRS = ("engines", "patches", "abi")
#: Folders a recipe carries beside its engine's own (when the commit has them).
SHARED_DIRS = ("engines/_shared",)
#: Bumped when a recipe carries more: an older materialization is made again.
LAYOUT = 2


class RecipeError(ConfigError):
    """No recipe for a requested pin or revision."""


def _git_bytes(*args: str) -> bytes:
    """Run git in the checkout; a failure (or no git) is a :class:`RecipeError` with git's words."""
    root = paths.project_root()
    try:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False, timeout=120)
    except FileNotFoundError as e:
        msg = "git is not installed: building another pin's recipe needs the checkout's history"
        raise RecipeError(msg) from e
    if r.returncode:
        msg = f"git {' '.join(args)} failed in {root}: {r.stderr.decode(errors='replace').strip()}"
        raise RecipeError(msg)
    return r.stdout


def _git(*args: str) -> str:
    return _git_bytes(*args).decode(errors="replace")


def resolve_rev(rev: str) -> str:
    """A revision (branch, tag, ``HEAD~3``, sha) -> full commit id, with a clear error."""
    try:
        commit = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except RecipeError:
        commit = ""
    if not commit:
        msg = (f"{rev!r} is not a commit of the checkout at {paths.project_root()} "
               "(expected a branch, tag or commit; `git log --oneline` lists them)")
        raise RecipeError(msg)
    return commit


def pins_on_record(engine: str) -> list[tuple[str, str]]:
    """``(commit, pin)`` for every commit (branches, remote-tracking branches, tags; newest first) that
    changed the descriptor."""
    rel = f"engines/{engine}/{DESCRIPTOR}"
    out = []
    for commit in _git("log", "--branches", "--remotes", "--tags", "--date-order", "--format=%H", "--", rel).split():
        try:
            data = load_yaml(_git("show", f"{commit}:{rel}"), where=f"{commit[:12]}:{rel}")
            out.append((commit, str(data["source"]["version"])))
        except (ConfigError, KeyError, TypeError):
            continue  # a commit where the file was deleted or broken: not a recipe
    return out


def holds_engine(commit: str, engine: str) -> bool:
    """Whether the checkout's ``commit`` has a recipe for ``engine`` (its folder, or an older layout's)."""
    return any(_git("ls-tree", "-d", "--name-only", commit, f"{d}/{engine}").strip() for d in RECIPE_DIRS)


def recipe_root(engine: str, commit: str) -> Path:
    return paths.cache_root() / "recipes" / f"{engine}-{commit[:12]}"


def recipe_at(engine: str, rev: str) -> EngineSpec:
    """The engine's recipe at ``rev``, materialized once into the cache."""
    commit = resolve_rev(rev)
    root = recipe_root(engine, commit)
    stamp = root / STAMP
    with FileLock(str(paths.locks_dir() / f"recipe-{root.name}.lock")):
        if _stamp_layout(stamp) != LAYOUT:
            present = [path for path in (*(f"{d}/{engine}" for d in RECIPE_DIRS), *SHARED_DIRS)
                       if _git("ls-tree", "-d", "--name-only", commit, path).strip()]
            if f"engines/{engine}" not in present:
                msg = f"commit {commit[:12]} ({rev}) has no engines/{engine}/: no recipe for {engine} there"
                raise RecipeError(msg)
            blob = _git_bytes("archive", "--format=tar", commit, *present)
            shutil.rmtree(root, ignore_errors=True)
            root.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".recipe-", dir=root.parent))
            try:
                with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
                    tf.extractall(tmp, filter="data")
                tmp.rename(root)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            stamp.write_text(json.dumps({"engine": engine, "rev": rev, "commit": commit, "dirs": present,
                                         "layout": LAYOUT, "materialized_at": time.time()}, indent=2))
    # a relative source.path was written against the checkout, not this copy of the recipe
    spec = parse_engine(root / "engines" / engine / DESCRIPTOR, project=paths.project_root())
    return dataclasses.replace(spec, recipe_commit=commit)


def _stamp_layout(stamp: Path) -> int | None:
    """The layout a materialized recipe was made with (1 before ``layout`` was recorded); None: none."""
    if not stamp.is_file():
        return None
    try:
        return int(json.loads(stamp.read_text()).get("layout", 1))
    except (ValueError, TypeError, AttributeError):
        return None


def recipe_for_pin(engine: str, pin: str) -> EngineSpec:
    """The working tree's recipe when it pins ``pin``; else the newest commit that pinned it."""
    current = load_engine(engine)
    if current.pin == pin:
        return current
    record = pins_on_record(engine)
    for commit, version in record:
        if version == pin:
            return recipe_at(engine, commit)
    known = sorted({v for _, v in record} | {current.pin})
    msg = (f"no recipe pins {engine} {pin} in this checkout's history (pins on record: {', '.join(known)}). "
           f"A pin needs its reviewed recipe: on a branch, `harness pin {engine} SOURCE` (fetch, patch --check and "
           f"abi check run there; snapshot and review if needed), "
           "commit; then pass pin=" + pin + " again, or rev=BRANCH")
    raise RecipeError(msg)


def resolve(engine: str, *, pin: str | None = None, rev: str | None = None) -> EngineSpec:
    """The recipe a command asked for: ``rev`` wins, then ``pin``, else the working tree's."""
    if rev and pin:
        spec = recipe_at(engine, rev)
        if spec.pin != pin:
            msg = f"{rev} pins {engine} {spec.pin}, not {pin}: pass one of pin= or rev="
            raise RecipeError(msg)
        return spec
    if rev:
        return recipe_at(engine, rev)
    if pin:
        return recipe_for_pin(engine, pin)
    return load_engine(engine)
