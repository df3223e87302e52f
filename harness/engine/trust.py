"""Which recipes are trusted (README "Trust model").

A recipe is the descriptor, patches, fixtures list, plugin package and binding sources of one
engine. Trusted: the engines of the harness's own data root (the installed distribution's
``share/harness/engines/``, or the checkout's ``engines/``). Not trusted: an engine folder found
through ``$HARNESS_ENGINES_PATH``, and a recipe taken from git history or another branch
(``--pin``/``--rev``), unless the user names the engine: ``--trust NAME`` on the command line
or ``HARNESS_TRUST=NAME[,NAME...]``.

What follows from it: an untrusted recipe's values are confined like every recipe's
(:mod:`harness.engine.confine`), its plugin is never imported, its e2e specs never run, its
builds run in the sandbox (refused where there is none, unless ``--no-sandbox``), and its
compilations never write the shared ccache (local or remote).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from pathlib import Path

from harness.core.types import EngineSpec

#: Engine names the user trusts beyond the built-in ones (comma- or space-separated).
TRUST_ENV = "HARNESS_TRUST"


def trusted_names() -> frozenset[str]:
    """The engine names ``HARNESS_TRUST`` lists (``--trust NAME`` adds to it for this process and its
    children). A name is only ever compared with an engine's name, never imported or made a path of:
    a word that cannot name an engine is left out, and it and a name no engine folder has are warned
    about (once a process)."""
    return _checked(os.environ.get(TRUST_ENV, ""))


@functools.cache
def _checked(value: str) -> frozenset[str]:
    from harness.core import progress
    from harness.core.errors import UsageError, did_you_mean
    from harness.engine.descriptor import check_name, engine_names

    names = set()
    for word in dict.fromkeys(w for w in re.split(r"[\s,]+", value) if w):
        try:
            names.add(check_name(word))
        except UsageError:
            progress.info(f"warning: {TRUST_ENV} names {word[:80]!r}, which cannot be an engine's name (a lowercase "
                          "identifier, the engine's folder name): ignored; `harness engines` lists the engines")
            continue
        known = engine_names()
        if word not in known:
            progress.info(f"warning: {TRUST_ENV} names {word!r}, which no engine folder here has"
                          f"{did_you_mean(word, known)}: it trusts no recipe (engines: {', '.join(known)})")
    return frozenset(names)


def grant(names: Iterable[str]) -> None:
    """Trust ``names`` in this process and the processes it starts (``--trust NAME``)."""
    names = [n for n in names if n]
    if names:
        os.environ[TRUST_ENV] = ",".join(sorted(trusted_names() | set(names)))


def _builtin_engines_dir() -> Path:
    from harness.engine.descriptor import engines_dir

    return engines_dir()


def is_builtin_folder(folder: Path) -> bool:
    """Whether ``folder`` (an ``engines/<name>/`` directory) is one of the harness's own engines."""
    try:
        return folder.parent.resolve() == _builtin_engines_dir().resolve()
    except OSError:
        return False


def folder_trusted(name: str, folder: Path) -> bool:
    """Whether the engine folder ``folder`` (``<dir>/<name>/``, from the working tree) is trusted."""
    return name in trusted_names() or is_builtin_folder(folder)


def untrusted_specs(name: str, folder: Path) -> str | None:
    """Why the e2e specs of the engine folder ``folder`` (``<dir>/<name>/``) may not run, or None when they
    may: the one check ``harness e2e`` and qualify's e2e stage make (a spec is code)."""
    if folder_trusted(name, folder):
        return None
    return (f"the engine folder {folder} (from $HARNESS_ENGINES_PATH) is not trusted: its e2e specs and plugin "
            f"are code, run only for a recipe you trust; {untrusted_hint(name)}")


def is_trusted(spec: EngineSpec) -> bool:
    """Whether the recipe ``spec`` was loaded from is trusted."""
    if spec.name in trusted_names():
        return True
    return not spec.recipe_commit and is_builtin_folder(spec.root)


def origin(spec: EngineSpec) -> str:
    """Where a recipe comes from, as messages name it."""
    if spec.recipe_commit:
        return f"the recipe of {spec.name} at commit {spec.recipe_commit[:12]} (git history)"
    if is_builtin_folder(spec.root):
        return f"the harness's own recipe of {spec.name} ({spec.root})"
    return f"the engine folder {spec.root} (from $HARNESS_ENGINES_PATH)"


def untrusted_hint(name: str) -> str:
    """How a user says they trust a recipe, for messages."""
    return (f"review the recipe (descriptor, patches, fixtures, plugin/, binding/, e2e/), then trust it: "
            f"--trust {name} or {TRUST_ENV}={name}")
