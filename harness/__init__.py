"""harness: build, check and benchmark native inference engines."""

from __future__ import annotations

__version__ = "0.1.0"
