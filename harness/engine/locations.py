"""Where a local git mirror or source archive is, as a descriptor writes it: the same text on every machine.

A git ``source.url`` naming a repository on this host and a local archive's ``source.path`` are written
relative to the project root (the folder holding ``engines/``) when they lie under it, or as
``$HARNESS_MIRRORS/<path>`` when they lie under the folder that variable names (each machine sets its own).
``harness pin`` never writes one machine's absolute path, and reports name the descriptor's text, not the
path it resolves to. The descriptor parser expands ``$HARNESS_MIRRORS`` (no other variable: a recipe reads
nothing else of the environment) and takes a relative path from the project root.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from harness.core.errors import ConfigError, HarnessError, UsageError
from harness.core.settings import setting

MIRRORS = "HARNESS_MIRRORS"
REFERENCE = f"${MIRRORS}"
_REFERENCE = re.compile(rf"^\$(?:{MIRRORS}|\{{{MIRRORS}\}})(?=/|$)")


def is_reference(value: str) -> bool:
    """Whether ``value`` starts with ``$HARNESS_MIRRORS`` (or ``${HARNESS_MIRRORS}``)."""
    return bool(_REFERENCE.match(value))


def mirrors_dir() -> Path | None:
    """The folder ``$HARNESS_MIRRORS`` names on this machine, absolute; None when unset."""
    value = setting(MIRRORS).get()
    return Path(value).expanduser().absolute() if value else None


def expand(value: str, *, where: str, error: type[HarnessError] = ConfigError) -> str:
    """``value`` with a leading ``$HARNESS_MIRRORS`` replaced by the folder it names (``value`` itself when it
    names none); refused when the variable is unset or the rest climbs out of the folder."""
    m = _REFERENCE.match(value)
    if not m:
        return value
    rest = value[m.end():].lstrip("/")
    if ".." in PurePosixPath(rest).parts:
        msg = f"{where}: {value[:200]!r} climbs out of ${MIRRORS} ('..'); name a path inside the folder"
        raise error(msg)
    root = mirrors_dir()
    if root is None:
        msg = (f"{where}: {value[:200]!r} is under ${MIRRORS}, which is not set on this machine: set {MIRRORS} to "
               "the folder holding your local git mirrors and source archives (README: Moving a pin)")
        raise error(msg)
    return str(root / rest) if rest else str(root)


def shown(value: str) -> str:
    """A descriptor's local location as a report names it: a ``$HARNESS_MIRRORS`` reference, a relative path or
    a server's URL as written; an absolute path (``/...``, ``~/...``, ``file://...``) by its last part only."""
    if value.startswith(("/", "~")) or value.lower().startswith("file:"):
        return f".../{value.rstrip('/').rsplit('/', 1)[-1]}"
    return value


def _under(path: Path, base: Path) -> str | None:
    """``path`` relative to ``base`` (``/``-separated) when it lies under it, comparing real paths too."""
    for p, b in ((Path(os.path.normpath(path)), Path(os.path.normpath(base))),
                 (Path(os.path.realpath(path)), Path(os.path.realpath(base)))):
        if p != b and p.is_relative_to(b):
            return p.relative_to(b).as_posix()
    return None


def portable(path: Path, project: Path, *, what: str) -> str:
    """How a descriptor of the project at ``project`` writes the absolute ``path``: relative to the project,
    else ``$HARNESS_MIRRORS/<path>``; a :class:`UsageError` saying what to do when it lies under neither."""
    rel = _under(path, project)
    if rel is not None:
        return rel
    mirrors = mirrors_dir()
    rel = _under(path, mirrors) if mirrors is not None else None
    if rel is not None:
        return f"{REFERENCE}/{rel}"
    now = f"names {mirrors}" if mirrors is not None else "is not set"
    msg = (f"{what} {path} lies outside the project ({project}), and ${MIRRORS} {now}: a descriptor never records "
           f"one machine's absolute path. Put it under the project, or set {MIRRORS} to a folder holding it (each "
           f"machine sets its own) and run again; the descriptor then names it as {REFERENCE}/<path>")
    raise UsageError(msg)
