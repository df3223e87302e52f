"""Video model families (``families.yaml``): frame grid, pixel grid, checkpoints, audio, defaults.

One table, read once. A config's family is resolved in one place,
:func:`harness.config.video_rules.family_for` (config -> engine -> family): the ``video_family``
option, else the registered engine's ``video_family``, else the LocalAI backend's
(``harness/config/localai.yaml``), else the table's default. Everything that follows from it
(frame and pixel grids, render defaults, audio, partitions) is a field or method of
:class:`VideoFamily`, and the config rules, ``config show``, ``select`` and the request pipeline
(:mod:`harness.video.target`) all ask it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from harness.core.datafile import load_yaml
from harness.core.errors import ConfigError, VideoError, did_you_mean

if TYPE_CHECKING:
    from harness.engine.interface import EngineImpl

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

    def fit_side(self, n: int, *, what: str = "canvas side") -> int:
        """:meth:`align_side` for a plan: a side below a truncating grid is refused, not enlarged.

        :param what: the field the value is for, named in the error.
        """
        if self.pixel_rounding != "up" and n < self.pixel_grid:
            msg = (f"{what}: canvas side {n} is below the {self.pixel_grid}-pixel grid of the "
                   f"{self.name} family; use at least {self.pixel_grid}")
            raise VideoError(msg)
        return self.align_side(n)

    @property
    def keyframe_short_side(self) -> int:
        """Short side of a canvas derived from a keyframe's aspect: the default canvas's."""
        return min(self.width, self.height)

    def option_defaults(self) -> dict[str, int | float]:
        """The render defaults a config of this family gets for the options it leaves unset.

        The canvas is not here: unset, a keyframe's aspect may choose it (then :attr:`width`
        and :attr:`height`).
        """
        return {"video_num_frames": self.frames, "video_steps": self.steps, "video_fps": self.fps}


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
    raw = load_yaml(resources.files("harness.families").joinpath(DATA_FILE).read_text(encoding="utf-8"), where=f"harness/families/{DATA_FILE}")
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


def rendered_families(impl: EngineImpl) -> tuple[str, ...]:
    """The families a registered engine renders: its ``video_families``, else its ``video_family``."""
    if impl.video_families:
        return tuple(impl.video_families)
    return (impl.video_family,) if impl.video_family else ()


def render_refusal(engine: str, family: VideoFamily, pm: Any = None) -> str | None:
    """Why ``engine`` cannot render ``family`` (None: it can, or no plugin registers ``engine``,
    which the render itself then reports)."""
    from harness.engine import registry

    try:
        impl = registry.engines(pm).get(engine)
    except Exception:  # a broken plugin: nothing it says can be trusted, the render reports it
        return None
    if impl is None:
        return None
    families = rendered_families(impl)
    if family.name in families:
        return None
    if not families:
        return f"the {engine} engine renders no video family (its plugin states none)"
    which = ("the " + families[0] + " family" if len(families) == 1
             else "the families " + ", ".join(families))
    return (f"the {engine} engine renders {which}, not {family.name} "
            f"({family.frame_grid_name} frames{', with audio' if family.audio else ''}); "
            f"declare video_family:{families[0]} for a {families[0]} checkpoint set, or serve this "
            "one with an engine that renders its family")
