"""Video model families (``families.yaml``): frame grid, pixel grid, checkpoints, audio, defaults.

One table, read once: the config rules check a config against its family, the request
pipeline's built-in defaults and grids are the default family's. A family is chosen by
the ``video_family`` option, else by the config's backend (:func:`family_for`): a registered
engine's ``video_family``, or a LocalAI backend's (``harness/config/localai.yaml``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

from harness.core.datafile import load_yaml
from harness.core.errors import ConfigError, did_you_mean

DATA_FILE = "families.yaml"


@dataclass(frozen=True, kw_only=True)
class VideoFamily:
    """One family's rules and render defaults (see ``families.yaml`` for each field)."""

    name: str
    description: str
    frame_step: int
    frame_offset: int
    pixel_grid: int
    pixel_rounding: str
    audio: bool
    requires: tuple[str, ...]
    conditioning: tuple[str, ...]
    tokenizer_with_encoder: bool
    vae_config: bool
    partitions: tuple[str, ...]
    declare_partition: bool
    width: int
    height: int
    frames: int
    steps: int
    fps: float

    @property
    def frame_grid_name(self) -> str:
        """``17n+5``, ``4n+1``."""
        return f"{self.frame_step}n+{self.frame_offset}"

    def align_frames(self, n: int) -> int:
        """The smallest frame count on the grid that is >= ``n`` (at least the offset)."""
        if n <= self.frame_offset:
            return self.frame_offset
        return self.frame_offset + -(-(n - self.frame_offset) // self.frame_step) * self.frame_step

    def align_side(self, n: int) -> int:
        """The canvas side the engine uses for ``n`` (per the family's rounding, at least one cell)."""
        g = self.pixel_grid
        if self.pixel_rounding == "up":
            return max(g, -(-n // g) * g)
        return max(g, n // g * g)


def _family(name: str, raw: dict[str, Any]) -> VideoFamily:
    frames, grid, defaults = raw["frames"], raw["pixel_grid"], raw["defaults"]
    return VideoFamily(
        name=name, description=str(raw.get("description", "")),
        frame_step=int(frames["step"]), frame_offset=int(frames["offset"]),
        pixel_grid=int(grid["size"]), pixel_rounding=str(grid.get("rounding", "down")),
        audio=bool(raw["audio"]), requires=tuple(raw.get("requires") or ()),
        conditioning=tuple(raw.get("conditioning") or ()),
        tokenizer_with_encoder=bool(raw.get("tokenizer_with_encoder")),
        vae_config=bool(raw.get("vae_config")), partitions=tuple(raw["partitions"]),
        declare_partition=bool(raw.get("declare_partition")),
        width=int(defaults["width"]), height=int(defaults["height"]), frames=int(defaults["frames"]),
        steps=int(defaults["steps"]), fps=float(defaults["fps"]),
    )


@dataclass(frozen=True, kw_only=True)
class FamilyTable:
    families: dict[str, VideoFamily]
    default: str


@functools.cache
def table() -> FamilyTable:
    """The family table shipped with the harness."""
    raw = load_yaml(resources.files("harness.video").joinpath(DATA_FILE).read_text(encoding="utf-8"))
    families = {name: _family(name, f) for name, f in raw["families"].items()}
    return FamilyTable(families=families, default=str(raw["default"]))


def family_names() -> tuple[str, ...]:
    return tuple(table().families)


def get_family(name: str) -> VideoFamily:
    """The family called ``name``; an unknown name is a :class:`ConfigError` with a did-you-mean."""
    t = table()
    if name not in t.families:
        msg = (f"unknown video family {name!r}{did_you_mean(name, t.families)}; "
               f"known: {', '.join(t.families)}")
        raise ConfigError(msg)
    return t.families[name]


def default_family() -> VideoFamily:
    """The family whose grids and defaults the request pipeline uses when nothing says otherwise."""
    return get_family(table().default)


def backend_family(backend: str | None) -> str | None:
    """The family a ``backend:`` implies: the registered engine's, else the LocalAI backend's."""
    if not backend:
        return None
    from harness.config.localai import vocabulary
    from harness.engine import registry

    try:
        impl = registry.engines().get(backend)
    except Exception:  # a broken plugin: the data still answers for LocalAI's names
        impl = None
    if impl is not None and impl.video_family:
        return impl.video_family
    entry = vocabulary().backends.get(backend)
    return entry.video_family if entry is not None else None


def family_for(declared: str | None, backend: str | None) -> VideoFamily:
    """The declared family, else the backend's, else the default one."""
    if declared:
        return get_family(declared)
    return get_family(backend_family(backend) or table().default)
