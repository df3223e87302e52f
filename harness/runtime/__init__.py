"""The inference runtime: variant discovery, CPU levels, request validation and the engine API.

``Engine.load(model, ...)`` loads on the default text engine (the registered engine that
serves text, :mod:`harness.registry`); ``engine=NAME`` picks another one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.runtime.api import ChatResult, Completion, Stream
from harness.runtime.sampling import Sampling


class Engine:
    """Entry point to the engines' runtimes: ``Engine.load(model, ...)`` returns a loaded engine."""

    @staticmethod
    def load(model: str | Path, *, engine: str | None = None, variant: str | None = None,
             **engine_args: Any) -> Any:
        from harness import registry
        from harness.errors import UsageError

        impl = registry.get(engine) if engine else registry.default("text")
        if impl.load is None:
            msg = f"engine {impl.name} has no text runtime to load {model} with"
            raise UsageError(msg)
        return impl.load(model, variant=variant, **engine_args)


__all__ = ["ChatResult", "Completion", "Engine", "Sampling", "Stream"]
