"""The inference runtime: variant discovery, CPU levels, request validation and the engine API.

``Runtime.load(model, ...)`` loads on the default text engine (the registered engine that
serves text, :mod:`harness.engine.registry`); ``engine=NAME`` picks another one.
``Runtime.load(config=PATH)`` (or a ``.yaml`` path as the model) loads what a model config
describes, with the values ``harness config show`` prints for it.

The public names load on first use (PEP 562): importing a submodule (``harness.runtime.requests``,
``harness.runtime.levels``) for one constant does not import the engine API and asyncio with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.runtime.aio import AsyncRuntime, AsyncStream
    from harness.runtime.api import (
        ChatDelta,
        ChatResult,
        ChatStream,
        Completion,
        Pending,
        Stream,
        Usage,
        parse_arguments,
    )
    from harness.runtime.loader import CONFIG_SUFFIXES, Runtime
    from harness.runtime.sampling import Sampling

#: public name -> the submodule that defines it
_PUBLIC = {
    "AsyncRuntime": "aio", "AsyncStream": "aio",
    "ChatDelta": "api", "ChatResult": "api", "ChatStream": "api", "Completion": "api", "Pending": "api",
    "Stream": "api", "Usage": "api", "parse_arguments": "api",
    "CONFIG_SUFFIXES": "loader", "Runtime": "loader",
    "Sampling": "sampling",
}

__all__ = ["CONFIG_SUFFIXES", "AsyncRuntime", "AsyncStream", "ChatDelta", "ChatResult", "ChatStream", "Completion",
           "Pending", "Runtime", "Sampling", "Stream", "Usage", "parse_arguments"]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
