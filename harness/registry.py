"""Engines as the core sees them: objects registered by plugins, looked up by name.

An engine plugin returns one :class:`EngineImpl` from ``harness_engine_register()`` (as tox
registers its environment types). The core never compares engine names and never imports an
engine package: it asks the registry for the engine by name (or for the default engine that
serves a kind of request) and calls what the engine provides. What an engine does not
provide is ``None``, and the stage that needs it says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UnknownNameError, UsageError


@dataclass(frozen=True, kw_only=True)
class RandomModel:
    """A random-weight model an engine's plugin writes (fixture kind ``tiny``, chosen by its ``shape``)."""

    write: Callable[[Path, int], Path]
    """``write(dest, seed)``: same seed, same bytes."""
    version: str
    """Changes whenever the bytes written would change; a file written by another version is rewritten."""
    doc: str = ""


@dataclass(frozen=True, kw_only=True)
class EngineImpl:
    """What one engine plugin provides to the core."""

    name: str
    serves: tuple[str, ...] = ()
    """request kinds: "text", "embeddings", "video"."""
    default: bool = False
    """The engine used when a command names none (one per kind of request)."""
    load: Callable[..., Any] | None = None
    """``load(model, *, variant=None, **engine_args)`` -> a loaded engine (text engines). Loading a
    model config adds ``effective=`` (:class:`harness.config.effective.Effective`, the values
    ``harness config show`` prints) for the engine to map onto its own parameters."""
    probe_model: Callable[[], Path] | None = None
    """A tiny model for the CPU-level smoke probe (written on demand)."""
    random_models: Mapping[str, RandomModel] = field(default_factory=dict)
    """Shape name (``tiny``, ...) -> the random-weight model the engine writes (fixture kind ``tiny``)."""
    convert: Callable[..., tuple[Path, bool]] | None = None
    """``convert(src_dir, *, engine_tree, outtype)`` -> (gguf, converted now) (fixture kind ``converted``)."""
    cross_variant: Callable[..., dict[str, Any]] | None = None
    """``cross_variant(model, *, threads)``: the same greedy prompt on every installed variant and CPU
    level (qualify's cross-variant stage)."""
    emulated_levels: Callable[..., dict[str, Any]] | None = None
    """``emulated_levels(artifact, *, tree, models, expect, bench_model, threads, only, n_tokens)``: every
    CPU level of a cross-built artifact run under an emulated CPU that has its features (the level table)."""
    fixture_env: Callable[[], Mapping[str, str]] | None = None
    """Extra model fixtures the engine's e2e specs need (name -> path), written on demand."""
    old_pin_bench_arm: str | None = None
    """Bench arm kind that runs an artifact's own benchmark tool (old pin vs new pin)."""
    extra: dict[str, Any] = field(default_factory=dict)


_cache: dict[str, EngineImpl] | None = None


def _collect(pm: Any) -> dict[str, EngineImpl]:
    found: dict[str, EngineImpl] = {}
    for impls in pm.hook.harness_engine_register():
        for impl in impls or []:
            found[impl.name] = impl
    return found


def engines(pm: Any | None = None) -> dict[str, EngineImpl]:
    """Every registered engine by name (the built-in plugin manager is asked once per process)."""
    global _cache
    if pm is not None:
        return _collect(pm)
    if _cache is None:
        from harness.plugin import get_manager

        _cache = _collect(get_manager())
    return dict(_cache)


def get(name: str) -> EngineImpl:
    """The engine registered as ``name``; unknown names get a did-you-mean."""
    found = engines()
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
