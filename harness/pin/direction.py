"""Which way a pin move goes: backwards, sideways, forward, or unknown, by upstream build.

A move to an older upstream build is a rollback and is named as one, the way Renovate titles a
downgrade: ``BACKWARDS, build 11549 -> 11063 (a downgrade: 486 builds older)`` is the first line
``harness pin`` prints and the first line of a pin move's report. The same build is "sideways"
(another source, fork or patch series of one upstream tree); a build either side does not know
makes the direction "unknown", and the line says which side and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DIRECTIONS = ("backwards", "sideways", "forward", "unknown")


@dataclass(frozen=True, kw_only=True)
class Direction:
    """A move from upstream build ``old`` to ``new``; ``why`` says what made it unknown."""

    direction: str
    old: int | None
    new: int | None
    why: str = ""

    @property
    def text(self) -> str:
        """``BACKWARDS, build 11549 -> 11063 (a downgrade: 486 builds older)``, and the like."""
        builds = f"build {_show(self.old)} -> {_show(self.new)}"
        if self.direction == "unknown":
            return f"direction unknown, {builds} ({self.why})"
        assert self.old is not None and self.new is not None
        n = abs(self.new - self.old)
        plural = "s" if n != 1 else ""
        if self.direction == "backwards":
            return f"BACKWARDS, {builds} (a downgrade: {n} build{plural} older)"
        if self.direction == "forward":
            return f"forward, {builds} ({n} build{plural} newer)"
        return f"sideways, {builds} (the same upstream build{': ' + self.why if self.why else ''})"

    def as_json(self) -> dict[str, Any]:
        return {"direction": self.direction, "old_build": self.old, "new_build": self.new, "why": self.why,
                "line": self.text}


def _show(build: int | None) -> str:
    return "?" if build is None else str(build)


def _build(upstream: Mapping[str, Any]) -> int | None:
    value = upstream.get("build")
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def direction(old: Mapping[str, Any], new: Mapping[str, Any], *, new_why: str = "",
              sideways_why: str = "") -> Direction:
    """The direction from the ``upstream:`` mapping ``old`` to ``new``. ``new_why``: why the new build is
    unknown, when it is (what the source is); ``sideways_why``: what differs when the build does not."""
    a, b = _build(old), _build(new)
    if a is None or b is None:
        missing = []
        if a is None:
            missing.append("the current pin records no upstream build")
        if b is None:
            missing.append(f"the new source's upstream build is unknown{': ' + new_why if new_why else ''}")
        return Direction(direction="unknown", old=a, new=b, why="; ".join(missing))
    if b < a:
        return Direction(direction="backwards", old=a, new=b)
    if b > a:
        return Direction(direction="forward", old=a, new=b)
    return Direction(direction="sideways", old=a, new=b, why=sideways_why)
