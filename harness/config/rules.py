"""Semantic rules of a model config beyond its schema (SPEC.md sections 4 and 6).

Each rule reads the document's plain data (it may be schema-invalid, so every
access is type-guarded) plus the resolved options, and returns diagnostics.
File existence is checked only when a models directory is known.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.loader import Diagnostic, Document, Path_
from harness.config.model import option_specs
from harness.config.options import ResolvedOptions
from harness.errors import did_you_mean

#: Weight-file suffixes that are plainly not the .gguf file or model directory the engine loads.
NOT_LOADABLE = frozenset({".bin", ".safetensors", ".pt", ".pth", ".onnx", ".ggml", ".ckpt", ".h5"})
CANVAS_GRID = 32
DRAFT_CONFIG_KEYS = ("model", "draft_model")


@dataclass(frozen=True, kw_only=True)
class Context:
    """What rules may consult besides the document."""

    engines: frozenset[str]
    models_dir: Path | None = None


@dataclass(frozen=True, kw_only=True)
class CheckContext:
    """The ``context`` of ``harness_config_check``: locate findings with ``document.diag(path, ...)``."""

    document: Document
    options: ResolvedOptions
    engines: frozenset[str]
    models_dir: Path | None = None


def path_problem(label: str, value: str) -> str | None:
    """Why a models-dir-relative path is refused (absolute, or escaping with ``..``), else None."""
    if not value.strip():
        return f"{label} is empty"
    if value.startswith(("/", "\\")) or (len(value) > 1 and value[1] == ":"):
        return (f"{label} must be relative to the models directory, found absolute path {value!r}; "
                "move the file under the models directory")
    norm = posixpath.normpath(value.replace("\\", "/"))
    if norm == ".." or norm.startswith("../"):
        return f"{label} {value!r} escapes the models directory with '..'"
    return None


def frame_grid(n: int) -> int:
    """The smallest frame count on the 17n+5 grid that is >= ``n``."""
    if n <= 5:
        return 5
    return 5 + -(-(n - 5) // 17) * 17


def canvas_grid(n: int) -> int:
    """The canvas size the engine uses: truncated to the 32-pixel grid (at least 32)."""
    return max(CANVAS_GRID, n // CANVAS_GRID * CANVAS_GRID)


def resolve_draft(ref: str, models_dir: Path) -> tuple[Path | None, list[Path]]:
    """Find a draft model: as given, models dir + last segment, models dir + full reference."""
    given = Path(ref).expanduser()
    candidates = [given, models_dir / Path(ref.rstrip("/")).name, models_dir / ref]
    looked: list[Path] = []
    for c in candidates:
        if c in looked:
            continue
        looked.append(c)
        if c.exists():
            return c, looked
    return None, looked


def _str_at(data: dict[str, Any], *keys: str) -> str | None:
    cur: Any = data
    for k in keys:
        cur = cur.get(k) if isinstance(cur, dict) else None
    return cur if isinstance(cur, str) else None


class Rules:
    def __init__(self, doc: Document, opts: ResolvedOptions, ctx: Context) -> None:
        self.doc, self.opts, self.ctx = doc, opts, ctx
        self.data: dict[str, Any] = doc.data if isinstance(doc.data, dict) else {}
        self.out: list[Diagnostic] = []

    def error(self, path: Path_, msg: str) -> None:
        self.out.append(self.doc.diag(path, "error", msg))

    def warn(self, path: Path_, msg: str) -> None:
        self.out.append(self.doc.diag(path, "warning", msg))

    def run(self) -> list[Diagnostic]:
        self.backend()
        self.model_path()
        self.mmproj()
        self.option_paths()
        self.draft()
        self.usecases()
        if self.opts.video_engaged:
            self.video()
        return self.out

    # -- rules ---------------------------------------------------------------

    def backend(self) -> None:
        backend = _str_at(self.data, "backend")
        if backend is None or backend in self.ctx.engines:
            return
        known = sorted(self.ctx.engines)
        self.error(("backend",), f"backend {backend!r} is not a registered engine plugin"
                                 f"{did_you_mean(backend, known)}; known: {', '.join(known) or 'none'}")

    def _check_path(self, path: Path_, label: str, value: str, *, kind: str) -> Path | None:
        """Shape and existence of a models-dir path; ``kind`` is model, gguf or any."""
        problem = path_problem(label, value)
        if problem:
            self.error(path, problem)
            return None
        suffix = Path(value).suffix.lower()
        if kind == "model" and suffix in NOT_LOADABLE:
            self.error(path, f"{label} {value!r} must be a .gguf file or a directory with "
                             f"config.json, not a {suffix} file")
            return None
        if self.ctx.models_dir is None:
            return None
        full = self.ctx.models_dir / value
        if not full.exists():
            self.error(path, f"{label} {value!r} not found in the models directory {self.ctx.models_dir}")
            return None
        if kind == "model":
            if full.is_dir() and not (full / "config.json").is_file():
                self.error(path, f"{label} {value!r} is a directory without config.json; "
                                 "the engine loads a .gguf file or a model directory with config.json")
            elif full.is_file() and suffix != ".gguf":
                self.error(path, f"{label} {value!r} must be a .gguf file or a directory with config.json")
        elif kind == "gguf" and (not full.is_file() or suffix != ".gguf"):
            self.error(path, f"{label} {value!r} must be a .gguf file")
        return full

    def model_path(self) -> None:
        model = _str_at(self.data, "parameters", "model")
        if model is not None:
            self._check_path(("parameters", "model"), "parameters.model", model, kind="model")

    def mmproj(self) -> None:
        mmproj = _str_at(self.data, "mmproj")
        if mmproj is not None:
            self._check_path(("mmproj",), "mmproj", mmproj, kind="gguf")

    def option_paths(self) -> None:
        specs = option_specs()
        for key, s in self.opts.values.items():
            if specs[key].path and isinstance(s.value, str) and s.path is not None:
                self._check_path(s.path, key, s.value, kind="any")

    def draft(self) -> None:
        refs: list[tuple[Path_, str]] = []
        top = _str_at(self.data, "draft_model")
        if top is not None:
            refs.append((("draft_model",), top))
        spec = self.opts.values.get("speculative_config")
        if spec is not None and isinstance(spec.value, dict) and spec.path is not None:
            for key in DRAFT_CONFIG_KEYS:
                if isinstance(spec.value.get(key), str):
                    refs.append((spec.path, spec.value[key]))
        models_dir = self.ctx.models_dir
        for path, ref in refs:
            if not ref.strip():
                self.error(path, "draft model reference is empty")
            elif models_dir is not None and resolve_draft(ref, models_dir)[0] is None:
                looked = resolve_draft(ref, models_dir)[1]
                self.error(path, f"draft model {ref!r} not found; looked in: "
                                 f"{', '.join(str(p) for p in looked)}")

    def usecases(self) -> None:
        cases = self.data.get("known_usecases")
        if isinstance(cases, list) and "video" in cases and not self.opts.video_engaged:
            self.warn(("known_usecases",), "known_usecases includes video but no video_* option "
                                           "names the checkpoint set (video_vae, audio_vae, ...)")

    def video(self) -> None:
        v: dict[str, Any] = {**dict.fromkeys(self.opts.given), **self.opts.values}
        at: Path_ = ("options",) if "options" in self.data else ()
        key_at = "options" in self.data
        for key in ("video_vae", "audio_vae"):
            if key not in v:
                self.out.append(self.doc.diag(at, "error", f"video options need {key}: both the "
                                              "video and the audio VAE are required", key=key_at))
        if "video_encoder" not in v and "video_prompt_embeds" not in v:
            self.out.append(self.doc.diag(at, "error", "video options need video_encoder or "
                                          "video_prompt_embeds to condition on a prompt", key=key_at))
        encoder = self.opts.values.get("video_encoder")
        if encoder is not None and "video_tokenizer" not in v:
            self.error(encoder.path or at, "video_encoder needs video_tokenizer "
                                                      "(the encoder's tokenizer.json)")
        for weights, config in (("video_vae", "video_vae_config"), ("audio_vae", "audio_vae_config")):
            self._vae_config(weights, config)
        if "video_partition" not in v:
            self.out.append(self.doc.diag(at, "warning", "video_partition is not declared; assuming "
                                          "fl2va (the FL2VA and Ref2VA checkpoints cannot be told "
                                          "apart: declare video_partition:fl2va or ref2va)", key=key_at))
        self._canvas()
        frames = self.opts.values.get("video_num_frames")
        if frames is not None and isinstance(frames.value, int) and frame_grid(frames.value) != frames.value:
            self.warn(frames.path or at, f"video_num_frames {frames.value} is not on the 17n+5 grid; "
                                         f"the engine will use {frame_grid(frames.value)}")

    def _vae_config(self, weights: str, config: str) -> None:
        v = self.opts.values
        w = v.get(weights)
        if config in v or w is None or not isinstance(w.value, str) or self.ctx.models_dir is None:
            return
        beside = self.ctx.models_dir / posixpath.dirname(w.value) / "config.json"
        if not beside.is_file():
            self.error(w.path or ("options",), f"{config} is not set and there is no config.json "
                                               f"beside {weights} (looked at {beside})")

    def _canvas(self) -> None:
        v = self.opts.values
        canvas = v.get("video_canvas")
        sizes: list[tuple[str, int, Path_]] = []
        if canvas is not None and isinstance(canvas.value, str) and canvas.path is not None:
            if "video_width" in v or "video_height" in v:
                self.error(canvas.path, "video_canvas and video_width/video_height both set the "
                                        "canvas; keep one")
            w, _, h = canvas.value.lower().partition("x")
            if w.strip().isdigit() and h.strip().isdigit():
                sizes += [("video_canvas width", int(w), canvas.path),
                          ("video_canvas height", int(h), canvas.path)]
            else:
                self.error(canvas.path, f"video_canvas expects WIDTHxHEIGHT, found {canvas.value!r}")
        for key in ("video_width", "video_height"):
            s = v.get(key)
            if s is not None and isinstance(s.value, int) and s.path is not None:
                sizes.append((key, s.value, s.path))
        for label, n, path in sizes:
            if n % CANVAS_GRID:
                self.warn(path, f"{label} {n} is not on the {CANVAS_GRID}-pixel grid; "
                                f"the engine will use {canvas_grid(n)}")


def check(doc: Document, opts: ResolvedOptions, ctx: Context) -> list[Diagnostic]:
    """All semantic rules for one config document."""
    return Rules(doc, opts, ctx).run()


def known_engines_from_plugins() -> frozenset[str]:
    """Engine names the registered plugins implement."""
    from harness.plugin import get_manager

    names: Collection[list[str]] = get_manager().hook.harness_engine_names()
    return frozenset(n for group in names if group for n in group)
