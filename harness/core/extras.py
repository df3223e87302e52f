"""Which optional dependency group (extra) a command needs, and a typed error when it is missing.

The groups are pyproject.toml's ``[project.optional-dependencies]``, read from the installed
distribution's metadata (``Requires-Dist: scipy>=1.11; extra == "bench"``), so this module holds
no second list of them. Checking is ``importlib.util.find_spec`` per distribution: nothing is
imported, so a command that has its extra pays nothing for the check.
"""

from __future__ import annotations

import functools
import importlib.util
import re

from harness.core.errors import MissingExtraError

#: Distributions whose import name is not their normalised project name.
IMPORT_NAMES: dict[str, str] = {
    "libclang": "clang",
    "python-debian": "debian",
    "pyelftools": "elftools",
    "scikit-build-core": "scikit_build_core",
    "prometheus-client": "prometheus_client",
}

_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def import_name(distribution: str) -> str:
    """The top-level module a distribution installs (``iced-x86`` -> ``iced_x86``)."""
    key = re.sub(r"[-_.]+", "-", distribution).lower()
    return IMPORT_NAMES.get(key, key.replace("-", "_"))


@functools.cache
def extras() -> dict[str, tuple[str, ...]]:
    """extra -> the distributions it adds, from the installed metadata ({} when not installed)."""
    import importlib.metadata

    try:
        requires = importlib.metadata.requires("harness") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    out: dict[str, list[str]] = {}
    for req in requires:
        spec, _, marker = req.partition(";")
        m = _EXTRA_MARKER.search(marker)
        name = re.split(r"[\s<>=!~\[;(]", spec.strip(), maxsplit=1)[0]
        if m and name != "harness":
            out.setdefault(m.group(1), []).append(name)
    return {k: tuple(v) for k, v in out.items()}


@functools.cache
def in_all() -> frozenset[str]:
    """The extras ``harness[all]`` pulls in: its own ``harness[...]; extra == "all"`` requirement."""
    import importlib.metadata

    try:
        requires = importlib.metadata.requires("harness") or []
    except importlib.metadata.PackageNotFoundError:
        return frozenset()
    for req in requires:
        spec, _, marker = req.partition(";")
        m = _EXTRA_MARKER.search(marker)
        own = re.fullmatch(r"\s*harness\s*\[([^\]]*)\]\s*", spec)
        if m and m.group(1) == "all" and own:
            return frozenset(e.strip() for e in own.group(1).split(",") if e.strip())
    return frozenset()


def missing_error(command: str, extra: str, lacking: list[str]) -> MissingExtraError:
    """The error for ``command`` lacking ``extra``: its install hint names ``all,EXTRA`` where ``all`` lacks it."""
    return MissingExtraError(command, extra, lacking, in_all=extra in in_all() or extra == "all")


def missing(extra: str) -> list[str]:
    """The distributions of ``extra`` that cannot be imported here."""
    return [d for d in extras().get(extra, ()) if importlib.util.find_spec(import_name(d)) is None]


def require(command: str, *names: str) -> None:
    """Raise :class:`MissingExtraError` naming the first of ``names`` this install lacks."""
    for extra in names:
        lacking = missing(extra)
        if lacking:
            raise missing_error(command, extra, lacking)


def extra_for_module(module: str) -> str | None:
    """The extra that provides top-level ``module`` (for a ModuleNotFoundError), if any.

    The narrowest group wins (``scipy`` -> ``bench``, not ``all``)."""
    top = module.split(".")[0]
    found = [(len(dists), extra) for extra, dists in extras().items()
             if any(import_name(d) == top for d in dists)]
    return min(found)[1] if found else None
