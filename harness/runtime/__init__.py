"""The inference runtime: variant discovery and the engine API."""

from __future__ import annotations

from harness.runtime.engine import ChatResult, Completion, Engine, Stream
from harness.runtime.sampling import Sampling

__all__ = ["ChatResult", "Completion", "Engine", "Sampling", "Stream"]
