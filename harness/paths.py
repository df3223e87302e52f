"""Where things live: the project checkout and the cache outside it."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The checkout holding ``engines/``, ``matrix/``, ``patches/`` and ``abi/``.

    ``HARNESS_ROOT`` overrides; otherwise the parent of the ``harness`` package.
    """
    env = os.environ.get("HARNESS_ROOT")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    """``$HARNESS_CACHE`` or ``~/.cache/harness``; never inside the repository."""
    env = os.environ.get("HARNESS_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "harness"
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


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


def _sub(name: str) -> Path:
    p = cache_root() / name
    p.mkdir(parents=True, exist_ok=True)
    return p


def compile_lock_path() -> str:
    """One heavy build at a time per machine: every compile stage takes this lock."""
    return str(locks_dir() / "compile.lock")
