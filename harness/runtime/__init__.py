"""The inference runtime: variant discovery, CPU levels, request validation and the engine API.

``Engine.load(model, ...)`` loads on the default text engine (the registered engine that
serves text, :mod:`harness.registry`); ``engine=NAME`` picks another one.
``Engine.load(config=PATH)`` (or a ``.yaml`` path as the model) loads what a model config
describes, with the values ``harness config show`` prints for it.
"""

from __future__ import annotations

from harness.runtime.aio import AsyncEngine, AsyncStream
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
from harness.runtime.loader import CONFIG_SUFFIXES, Engine
from harness.runtime.sampling import Sampling

__all__ = ["CONFIG_SUFFIXES", "AsyncEngine", "AsyncStream", "ChatDelta", "ChatResult", "ChatStream", "Completion", "Engine", "Pending", "Sampling",
           "Stream", "Usage", "parse_arguments"]
