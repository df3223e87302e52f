"""Engines as the core sees them: objects registered by plugins, looked up by name.

An engine plugin returns one :class:`EngineImpl` from ``harness_engine_register()`` (as tox
registers its environment types); the plugin itself is declared once, in the ``harness``
entry-point group. Everything an engine provides is a field of that object: the core never
compares engine names and never imports an engine package: it asks the registry for the engine
by name (or for the default engine that serves a kind of request) and calls what the engine
provides. What an engine does not provide is ``None``, and the stage that needs it says so.
Engine names come from this registration alone.
"""

from __future__ import annotations

from typing import Any

from harness.core.errors import UnknownNameError, UsageError
from harness.engine.interface import EngineImpl, RandomModel

__all__ = ["EngineImpl", "RandomModel", "default", "engines", "get", "names", "reset"]


_cache: tuple[Any, dict[str, EngineImpl]] | None = None


def _collect(pm: Any) -> dict[str, EngineImpl]:
    found: dict[str, EngineImpl] = {}
    # pluggy calls the last-registered plugin first: reversed, engines keep registration order
    # and a later registration of a name replaces an earlier one.
    for impls in reversed(pm.hook.harness_engine_register()):
        for impl in impls or []:
            found.pop(impl.name, None)
            found[impl.name] = impl
    return found


def engines(pm: Any | None = None) -> dict[str, EngineImpl]:
    """Every registered engine by name, in registration order.

    Without ``pm``: the process-wide plugin manager's, asked once (again when that manager
    is another object, as in tests that swap it).
    """
    global _cache
    if pm is not None:
        return _collect(pm)
    from harness.engine.plugin import get_manager

    pm = get_manager()
    if _cache is None or _cache[0] is not pm:
        _cache = (pm, _collect(pm))
    return dict(_cache[1])


def names(pm: Any | None = None) -> tuple[str, ...]:
    """Registered engine names, in registration order."""
    return tuple(engines(pm))


def get(name: str, pm: Any | None = None) -> EngineImpl:
    """The engine registered as ``name``; unknown names get a did-you-mean."""
    found = engines(pm)
    if name not in found:
        raise UnknownNameError("engine", name, sorted(found))
    return found[name]


def default(kind: str = "text") -> EngineImpl:
    """The default engine for a kind of request ("text", "video")."""
    cands = [e for e in engines().values() if kind in e.serves]
    for e in cands:
        if e.default:
            return e
    if cands:
        return cands[0]
    msg = f"no registered engine serves {kind} requests; install or register an engine plugin"
    raise UsageError(msg)


def reset() -> None:
    """Forget the registry (tests that register engines of their own)."""
    global _cache
    _cache = None
