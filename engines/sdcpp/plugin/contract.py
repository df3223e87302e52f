"""What this engine claims of :mod:`harness.runtime.contract`, checked by mypy --strict (nox lint /
tests): its module renders video."""

from __future__ import annotations

from harness.runtime.contract import VideoEngine
from harness_plugins import sdcpp

CLAIMS: tuple[VideoEngine] = (sdcpp,)
