"""A video family's rules for a model config (``harness/families/families.yaml``).

A config's family is resolved here, in one place (:func:`family_for`: config -> engine ->
family), for the config rules, ``config show``, ``select`` and the video path alike. A video
engine calls :func:`check_video` from its ``config_check`` for the configs it serves: the
family (declared with ``video_family``, else the engine's) says which checkpoints are required,
whether there is audio, and the frame and pixel grids. The rules are data
(:mod:`harness.families`); this module only applies them.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from typing import Any

from harness.config.loader import Diagnostic, Path_
from harness.config.localai import vocabulary
from harness.config.rules import CheckContext
from harness.core.errors import ConfigError
from harness.families.canvas import parse_canvas
from harness.families.table import VideoFamily, get_family, render_refusal, rendered_families, table

AUDIO_KEYS = ("audio_vae", "audio_vae_config")


def backend_family(backend: str | None, pm: Any = None) -> str | None:
    """The family a ``backend:`` implies: the registered engine's, else the LocalAI backend's.

    :param pm: the plugin manager to ask (default: the process-wide one).
    """
    if not backend:
        return None
    from harness.engine import registry

    try:
        impl = registry.engines(pm).get(backend)
    except Exception:  # a broken plugin: the data still answers for LocalAI's names
        impl = None
    if impl is not None:
        if impl.video_family:
            return impl.video_family
        families = rendered_families(impl)
        if families:
            return families[0]
    entry = vocabulary().backends.get(backend)
    return entry.video_family if entry is not None else None


def family_for(declared: str | None, backend: str | None, pm: Any = None) -> VideoFamily:
    """The one family resolution (config -> engine -> family): the declared family, else the
    backend's (:func:`backend_family`), else the default one."""
    if declared:
        return get_family(declared)
    return get_family(backend_family(backend, pm) or table().default)


def family_refusal(engine: str, declared: str | None, pm: Any = None) -> str | None:
    """Why ``engine`` cannot render the family a config declares (None: it can, or the declared
    name is no family, which validation reports)."""
    try:
        family = family_for(declared, engine, pm)
    except ConfigError:
        return None
    return render_refusal(engine, family, pm)


def config_family(context: CheckContext) -> VideoFamily | None:
    """The family of the config: ``video_family`` if declared, else its engine's; None when the
    declared name is not a family (the option's own check reports that)."""
    declared = context.options.get("video_family")
    if declared is None and "video_family" in context.options.given:
        return None
    backend = context.data.get("backend")
    try:
        return family_for(declared if isinstance(declared, str) else None,
                          context.engine or (backend if isinstance(backend, str) else None))
    except ConfigError:
        return None


def check_video(context: CheckContext, family: VideoFamily | None = None) -> list[Diagnostic]:
    """The family's rules for a config whose options name a video checkpoint set."""
    family = family or config_family(context)
    if family is None:
        return []
    # the video engine refuses an error's value at load; a warning's it changes or does not use
    return [d if d.code not in ("", "HRN017") else
            dataclasses.replace(d, code="HRN013" if d.severity == "error" else "HRN014")
            for d in _VideoRules(context, family).run()]


class _VideoRules:
    def __init__(self, context: CheckContext, family: VideoFamily) -> None:
        self.ctx, self.f = context, family
        self.opts = context.options
        self.given: dict[str, Any] = {**dict.fromkeys(self.opts.given), **self.opts.values}
        self.at: Path_ = ("options",) if "options" in context.data else ()
        self.key_at = "options" in context.data
        self.out: list[Diagnostic] = []

    def missing(self, message: str) -> None:
        self.out.append(self.ctx.document.diag(self.at, "error", message, key=self.key_at))

    def run(self) -> list[Diagnostic]:
        f = self.f
        name = f"the {f.name} family"
        for key in f.requires:
            if key not in self.given:
                why = "both the video and the audio VAE are required" if f.audio else "it is required"
                self.missing(f"video options need {key} ({name}): {why}")
        if f.conditioning and not any(k in self.given for k in f.conditioning):
            self.missing(f"video options need {' or '.join(f.conditioning)} to condition on a prompt ({name})")
        encoder = self.opts.values.get("video_encoder")
        if f.tokenizer_with_encoder and encoder is not None and "video_tokenizer" not in self.given:
            self.out.append(self.ctx.error(encoder.path or self.at,
                                           "video_encoder needs video_tokenizer (the encoder's tokenizer.json)"))
        if not f.audio:
            for key in AUDIO_KEYS:
                s = self.opts.values.get(key)
                if s is not None:
                    self.out.append(self.ctx.warn(s.path or self.at, f"{key} is not used: {name} renders "
                                                                    "no audio (the MP4 is video-only)"))
        if f.vae_config:
            for weights, config in (("video_vae", "video_vae_config"), ("audio_vae", "audio_vae_config")):
                self._vae_config(weights, config)
        self._partition(name)
        self._canvas(name)
        self._frames()
        return self.out

    def _partition(self, name: str) -> None:
        p = self.opts.values.get("video_partition")
        if p is not None and isinstance(p.value, str) and p.value not in self.f.partitions:
            self.out.append(self.ctx.error(p.path or self.at, f"video_partition {p.value} is not one of "
                                           f"{name}'s: {', '.join(self.f.partitions)}"))
        if self.f.declare_partition and "video_partition" not in self.given:
            self.out.append(self.ctx.document.diag(
                self.at, "warning", "video_partition is not declared; assuming fl2va (the FL2VA and "
                "Ref2VA checkpoints cannot be told apart: declare video_partition:fl2va or ref2va)",
                key=self.key_at))

    def _vae_config(self, weights: str, config: str) -> None:
        w = self.opts.values.get(weights)
        models_dir = self.ctx.models_dir
        if config in self.opts.values or w is None or not isinstance(w.value, str) or models_dir is None:
            return
        beside = models_dir / posixpath.dirname(w.value) / "config.json"
        if not os.path.isfile(beside):  # a name too long to exist is absent, not an OSError
            self.out.append(self.ctx.error(w.path or ("options",), f"{config} is not set and there is no "
                                           f"config.json beside {weights} (looked at {beside})"))

    def _canvas(self, name: str) -> None:
        v = self.opts.values
        canvas = v.get("video_canvas")
        sizes: list[tuple[str, int, Path_]] = []
        if canvas is not None and isinstance(canvas.value, str) and canvas.path is not None:
            if "video_width" in v or "video_height" in v:
                self.out.append(self.ctx.error(canvas.path, "video_canvas and video_width/video_height "
                                                            "both set the canvas; keep one"))
            size = parse_canvas(canvas.value)
            if size is not None:
                sizes += [("video_canvas width", size[0], canvas.path),
                          ("video_canvas height", size[1], canvas.path)]
            else:
                self.out.append(self.ctx.error(canvas.path, f"video_canvas expects WIDTHxHEIGHT, found "
                                                            f"{canvas.value!r}"))
        for key in ("video_width", "video_height"):
            s = v.get(key)
            if s is not None and isinstance(s.value, int) and s.path is not None:
                sizes.append((key, s.value, s.path))
        grid = self.f.pixel_grid
        for label, n, path in sizes:
            if n % grid:
                self.out.append(self.ctx.warn(path, f"{label} {n} is not on {name}'s {grid}-pixel grid; "
                                                    f"the engine will use {self.f.align_side(n)}"))

    def _frames(self) -> None:
        frames = self.opts.values.get("video_num_frames")
        if frames is None or not isinstance(frames.value, int):
            return
        aligned = self.f.align_frames(frames.value)
        if aligned != frames.value:
            self.out.append(self.ctx.warn(frames.path or self.at, f"video_num_frames {frames.value} is not "
                                          f"on the {self.f.frame_grid_name} grid ({self.f.name}); "
                                          f"the engine will use {aligned}"))
