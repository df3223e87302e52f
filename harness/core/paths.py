"""Where things live: the project checkout and the cache outside it."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def project_root() -> Path:
    """Where ``engines/``, ``matrix/``, ``patches/`` and ``abi/`` are.

    ``HARNESS_ROOT`` overrides; then the checkout the ``harness`` package sits in; then
    the data an install put in ``<prefix>/share/harness`` (``pip install .``, not editable).
    """
    env = os.environ.get("HARNESS_ROOT")
    if env:
        return Path(env).resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "engines").is_dir():
        return checkout
    installed = Path(sys.prefix) / "share" / "harness"
    return installed if (installed / "engines").is_dir() else checkout


def is_checkout() -> bool:
    """True when running from a source checkout (reports go into it), not an installed copy."""
    return (project_root() / "pyproject.toml").is_file()


def reports_dir() -> Path:
    """``reports/`` of the checkout, or of the current directory for an installed harness."""
    return (project_root() if is_checkout() else Path.cwd()) / "reports"


def cache_root() -> Path:
    """``$HARNESS_CACHE`` or ``~/.cache/harness``; never inside the repository."""
    env = os.environ.get("HARNESS_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "harness"
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def redact(text: str) -> str:
    """``text`` as a report may carry it: the harness cache as ``$HARNESS_CACHE``, the checkout as ``.``
    and the home directory as ``~`` (reports name pins, revisions and files relative to those, never this
    host's paths; they are pasted into pull requests and compared across machines)."""
    home = str(Path.home())
    pairs = [(str(cache_root()), "$HARNESS_CACHE"), (str(project_root()), ".")]
    if home not in ("/", ""):
        pairs.append((home, "~"))
    for real, shown in sorted(pairs, key=lambda p: -len(p[0])):
        text = text.replace(real + os.sep, shown + "/").replace(real, shown)
    return text


def sources_dir() -> Path:
    return _sub("sources")


def downloads_dir() -> Path:
    return _sub("downloads")


def work_dir() -> Path:
    return _sub("work")


def artifacts_dir() -> Path:
    """Installed artifacts: ``$HARNESS_DIST`` or ``<cache>/dist``."""
    env = os.environ.get("HARNESS_DIST")
    p = Path(env) if env else cache_root() / "dist"
    p.mkdir(parents=True, exist_ok=True)
    return p


def models_dir() -> Path:
    return _sub("models")


def locks_dir() -> Path:
    return _sub("locks")


def provenance_dir() -> Path:
    """What a git source's commit is upstream (its build tag, or why it has none), kept per commit."""
    return _sub("provenance")


def _sub(name: str) -> Path:
    p = cache_root() / name
    p.mkdir(parents=True, exist_ok=True)
    return p


def compile_lock_path() -> str:
    """One heavy build at a time per machine: every compile stage takes this lock."""
    return str(locks_dir() / "compile.lock")
