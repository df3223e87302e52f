"""The video options of a model config, as the video path takes them.

The type is the config schema's :class:`~harness.config.model.VideoOptions` (each
``video_*`` key declared once, with its doc, bounds and default), and the values come
through the config's one ``options:`` parser (:mod:`harness.config.options`). What the
video path adds is strictness: a render is hours long, so a misspelled or invalid
``video_*`` key is an error here, where ``harness validate`` may only warn about it.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.config.model import (
    OPTION_ALIASES,
    Partition,
    VideoOptions,
    from_mapping,
    option_specs,
)
from harness.config.options import ResolvedOptions, parse_options
from harness.core.errors import ConfigError, did_you_mean
from harness.families.canvas import parse_canvas

if TYPE_CHECKING:
    from harness.families.table import VideoFamily

#: Partitions a video DiT can be declared as. ``t2va`` names the FL2VA checkpoint
#: used text-only: the same file serves t2va and fl2va, so it gets the FL2VA rules.
PARTITIONS: tuple[str, ...] = typing.get_args(Partition)

__all__ = [
    "PARTITIONS",
    "VideoOptions",
    "configured_canvas",
    "video_options",
]


def configured_canvas(options: VideoOptions) -> tuple[int | None, int | None]:
    """The configured canvas (width, height): ``video_canvas``, else ``video_width`` and ``video_height``."""
    size = parse_canvas(options.video_canvas) if options.video_canvas is not None else None
    return size or (options.video_width, options.video_height)


def video_options(source: Mapping[str, Any] | ResolvedOptions,
                  family: VideoFamily | None = None) -> VideoOptions:
    """The video options of option keys -> values (as :func:`~harness.config.options.parse_options`
    takes them) or of a config's resolved options; other engines' keys are ignored.

    :param family: whose render defaults (frames, steps, fps) fill what the options leave unset
        (default: the schema's, which are the default family's).

    :raises ConfigError: a ``video_*`` key that is not one, a value that does not fit its key,
        or a canvas set twice or not as WIDTHxHEIGHT.
    """
    resolved = source if isinstance(source, ResolvedOptions) else parse_options(source)
    specs = {k: s for k, s in option_specs().items() if s.video}
    known = [*specs, *(alias for alias, key in OPTION_ALIASES.items() if key in specs)]
    for key in resolved.unknown:
        # A misspelled video_* key would silently fall back to a default and render
        # the wrong thing for hours; non-video keys belong to the text engine.
        if key.startswith("video_"):
            msg = f"unknown video option {key!r}{did_you_mean(key, known)}"
            raise ConfigError(msg)
    problems = [problem for key, problem in resolved.invalid.items() if key in specs]
    if problems:
        raise ConfigError("; ".join(problems))
    values = {key: s.value for key, s in resolved.values.items() if key in specs}
    if family is not None:
        values = {**family.option_defaults(), **values}
    canvas = values.get("video_canvas")
    if canvas is not None:
        if "video_width" in values or "video_height" in values:
            msg = "video options video_canvas and video_width/video_height both set the canvas; keep one"
            raise ConfigError(msg)
        if parse_canvas(canvas) is None:
            msg = f"video option video_canvas: expected WIDTHxHEIGHT (e.g. 1344x768), found {canvas!r}"
            raise ConfigError(msg)
    options: VideoOptions = from_mapping(VideoOptions, values)
    return options
