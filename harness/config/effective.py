"""``harness config show``: the engine parameters a config really gets, and why.

Every value carries its source, in increasing precedence: ``default`` (engine
default or derived from the host), ``model header`` (the GGUF's context
length), the config's own key (``context_size``, ``max_model_len``, ``threads``,
``gpu_layers``, ``mmap``, ``stopwords``, ... -- LocalAI's names, see
``localai.yaml``), ``parameters`` (sampling defaults), ``options`` and finally
``engine_args``. Tri-state booleans are shown as the engine receives them:
unset = 0, true = 1, explicit false = 2 (force off).

:func:`load_config_file` then :meth:`ConfigFile.resolve` is what ``config show`` runs;
``Runtime.load(config=...)`` runs the same, so an engine gets the values it prints.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import MODELS_DIR_ENV
from harness.config.facts import abilities_with_source, read_gguf_header
from harness.config.loader import Diagnostic
from harness.config.localai import remote_scheme
from harness.config.model import ModelConfig, Template, model_config, nested_specs, option_specs
from harness.config.options import ResolvedOptions, Setting, tristate, tristate_value
from harness.config.rules import path_problem, resolve_draft
from harness.config.validate import Validated, Validator
from harness.config.video_rules import family_for
from harness.core.errors import UsageError
from harness.core.inputs import read_bytes
from harness.families.table import VideoFamily

#: Where model paths resolve when no models directory is named (else: beside the config).

#: Sampling defaults when neither parameters nor options set them. LocalAI's own (ModelConfig.SetDefaults,
#: core/config/model_config.go at 8f5f7d6ca9f8523bc524bd6501993fcb7a69a601: top_p 0.95, top_k 40,
#: temperature 0.9, max_tokens 0, seed -1) are labelled so; the rest are the engine's (llama.cpp's
#: common_params_sampling: penalty_repeat 1.00, i.e. off, and penalty_last_n 64; LocalAI's llama.cpp
#: backend leaves that neutral default in place when a config names no repeat penalty,
#: backend/cpp/llama-cpp/grpc-server.cpp parse_options).
LOCALAI_SAMPLING_DEFAULTS: dict[str, Any] = {
    "temperature": 0.9, "top_p": 0.95, "top_k": 40, "max_tokens": 0, "seed": -1,
}
SAMPLING_DEFAULTS: dict[str, Any] = {
    **LOCALAI_SAMPLING_DEFAULTS, "min_p": 0.0, "repeat_penalty": 1.0, "repeat_last_n": 64,
    "presence_penalty": 0.0, "frequency_penalty": 0.0, "ignore_eos": False,
}
LOCALAI_DEFAULT = "LocalAI default"
#: How ``config show`` labels an option of the config's LocalAI backend (accepted, not used here).
LOCALAI_OPTION = "LocalAI backend option, not used by this harness"
ENGINE_DEFAULT = "engine default"
#: Top-level keys LocalAI's SetDefaults fills when unset (mmap true, mmlock and low_vram false).
LOCALAI_TOP_LEVEL_DEFAULTS = frozenset({"mmap", "mmlock", "low_vram"})
MAX_DEFAULT_PARALLEL = 8
#: Top-level LocalAI keys that set one engine parameter (loses to options and engine_args):
#: config field -> (parameter, default).
TOP_LEVEL: dict[str, tuple[str, Any]] = {
    "mmap": ("mmap", True), "mmlock": ("mlock", False), "f16": ("f16", None),
    "low_vram": ("low_vram", False), "no_kv_offloading": ("no_kv_offloading", False),
    "system_prompt": ("system_prompt", None),
}


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _flash(value: Any) -> bool | None:
    """flash_attention (on, off, auto, true, false) as the tri-state; a bad value (reported by
    validation) as unset."""
    try:
        return tristate_value(value)
    except ValueError:
        return None


@dataclass(frozen=True, kw_only=True)
class Effective:
    """Resolved engine parameters of one config."""

    name: str
    backend: str | None
    params: dict[str, Setting]
    ignored: dict[str, Setting] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        def one(s: Setting) -> dict[str, Any]:
            return {"value": s.value, "source": s.source}

        return {"name": self.name, "backend": self.backend,
                "params": {k: one(s) for k, s in self.params.items()},
                "ignored": {k: one(s) for k, s in self.ignored.items()}, "notes": list(self.notes)}


class _Resolve:
    def __init__(self, config: ModelConfig, opts: ResolvedOptions, models_dir: Path | None,
                 cpus: int, header: Callable[[Path], dict[str, Any] | None], engine: str | None) -> None:
        self.config, self.opts, self.models_dir = config, opts, models_dir
        self.cpus, self.header, self.engine = cpus, header, engine
        self.params: dict[str, Setting] = {}
        self.notes: list[str] = []

    def chain(self, key: str, *candidates: tuple[Any, str]) -> Setting:
        """The first candidate whose value is not None, after options/engine_args."""
        opt = self.opts.values.get(key)
        if opt is not None:
            return Setting(value=opt.value, source=opt.source)
        for value, source in candidates:
            if value is not None:
                return Setting(value=value, source=source)
        return Setting(value=None, source="default")

    def resolve_path(self, ref: str, source: str) -> Setting:
        """A models-dir path, resolved; a remote URI or a refused path stays as written."""
        scheme = remote_scheme(ref)
        if scheme is not None:
            return Setting(value=ref, source=f"{source} (remote: fetched by LocalAI)")
        if self.models_dir is None or not ref or path_problem(source, ref):
            return Setting(value=ref, source=source)
        return Setting(value=str(self.models_dir / ref), source=source)

    def run(self) -> dict[str, Setting]:
        c = self.config
        p = self.params
        p["model"] = self.resolve_path(c.parameters.model, "parameters")
        p["n_ctx"] = self.n_ctx()
        p["n_parallel"] = self.chain("n_parallel", (min(MAX_DEFAULT_PARALLEL, self.cpus), "default"))
        p["threads"] = self.chain("threads", (c.threads, "threads"), (self.cpus, "default"))
        p["threads_batch"] = self.chain("threads_batch", (p["threads"].value, p["threads"].source))
        p["n_gpu_layers"] = self.chain("n_gpu_layers", (c.gpu_layers, "gpu_layers"))
        done = set(p) | {"max_model_len"}
        for key, spec in option_specs().items():
            if key in done or spec.video:
                continue
            s = self.chain(key, *self.top_level(key), (spec.default, "default"))
            if key == "flash_attn" and s.source == "default" and self.top_level(key):
                s = Setting(value=None, source="flash_attention")  # auto: the config says so
            p[key] = Setting(value=tristate(s.value), source=s.source) if spec.tristate else s
        for field_name, (param, default) in TOP_LEVEL.items():
            value = getattr(c, field_name)
            who = LOCALAI_DEFAULT if field_name in LOCALAI_TOP_LEVEL_DEFAULTS else ENGINE_DEFAULT
            p[param] = Setting(value=value, source=field_name) if value is not None else Setting(
                value=default, source=f"default ({who})")
        self.sampling()
        self.template()
        found, source = abilities_with_source(c)
        p["abilities"] = Setting(value=found, source=source)
        if c.mmproj:
            p["mmproj"] = self.resolve_path(c.mmproj, "mmproj")
        if c.draft_model:
            p["draft_model"] = Setting(value=self.draft(c.draft_model), source="draft_model")
        if self.opts.video_engaged:
            self.video()
        return p

    def top_level(self, key: str) -> list[tuple[Any, str]]:
        """The config's own LocalAI key for an option (``flash_attention`` for flash_attn), if set."""
        c = self.config
        if key == "flash_attn" and c.flash_attention is not None and "flash_attn" not in self.opts.values:
            return [(_flash(c.flash_attention), "flash_attention")]
        if key in ("cache_type_k", "cache_type_v") and getattr(c, key) is not None:
            return [(getattr(c, key), key)]
        if key == "device" and c.main_gpu:  # LocalAI's default "" is no choice
            return [(c.main_gpu, "main_gpu")]
        if key == "spec_n_max" and c.n_draft is not None:
            return [(c.n_draft, "n_draft")]
        if key == "spec_type" and c.draft_model:
            return [("draft-simple", "default (draft_model is set)")]
        return []

    def n_ctx(self) -> Setting:
        opt = self.opts.values.get("max_model_len")
        if opt is not None:
            return Setting(value=opt.value, source=opt.source)
        if self.config.max_model_len is not None:
            return Setting(value=self.config.max_model_len, source="max_model_len")
        if self.config.context_size is not None:
            return Setting(value=self.config.context_size, source="context_size")
        model = self.config.parameters.model
        if (self.models_dir is not None and model.endswith(".gguf") and not remote_scheme(model)
                and not path_problem("model", model)):
            path = self.models_dir / model
            header = self.header(path) if os.path.isfile(path) else None
            if header is not None:
                arch = header.get("general.architecture")
                length = header.get(f"{arch}.context_length")
                if isinstance(length, int) and length > 0:
                    return Setting(value=length, source="model header")
            self.notes.append(f"n_ctx: no context length readable from {path}; the engine decides")
        return Setting(value=0, source="default")

    def sampling(self) -> None:
        given = self.opts.nested.get("sampling", {})
        for key in nested_specs("sampling"):
            s = given.get(key)
            from_params = getattr(self.config.parameters, key, None)
            if s is not None:
                self.params[f"sampling.{key}"] = Setting(value=s.value, source=s.source)
            elif from_params is not None:
                self.params[f"sampling.{key}"] = Setting(value=from_params, source="parameters")
            else:
                who = LOCALAI_DEFAULT if key in LOCALAI_SAMPLING_DEFAULTS else ENGINE_DEFAULT
                self.params[f"sampling.{key}"] = Setting(value=SAMPLING_DEFAULTS.get(key), source=f"default ({who})")
        stop, words = self.config.parameters.stop, self.config.stopwords
        merged = [*stop, *(w for w in words if w not in stop)]
        source = " + ".join(n for n, v in (("parameters", stop), ("stopwords", words)) if v) or "default"
        self.params["sampling.stop"] = Setting(value=merged, source=source)

    def template(self) -> None:
        t = self.config.template or Template()
        for key in Template.__dataclass_fields__:
            value = getattr(t, key)
            if value is not None:
                self.params[f"template.{key}"] = Setting(value=value, source="template")

    def draft(self, ref: str) -> str:
        if self.models_dir is None or remote_scheme(ref):
            return ref
        found, _ = resolve_draft(ref, self.models_dir)
        return str(found) if found is not None else ref

    def family(self) -> VideoFamily | None:
        declared = self.opts.get("video_family")
        try:
            return family_for(declared if isinstance(declared, str) else None,
                              self.engine or self.config.backend)
        except Exception:  # an unknown family was reported by validation
            return None

    def video(self) -> None:
        family = self.family()
        family_defaults = {} if family is None else {
            "video_width": family.width, "video_height": family.height, "video_num_frames": family.frames,
            "video_steps": family.steps, "video_fps": family.fps, "video_family": family.name}
        label = f"default ({family.name})" if family is not None else "default"
        specs = {k: s for k, s in option_specs().items() if s.video}
        for key, spec in specs.items():
            default = family_defaults.get(key, spec.default)
            s = self.chain(key, (default, label if key in family_defaults else "default"))
            if spec.path and isinstance(s.value, str):
                s = Setting(value=self.resolve_path(s.value, s.source).value, source=s.source)
            if spec.tristate:
                s = Setting(value=tristate(s.value), source=s.source)
            self.params[key] = s
        if family is None or family.vae_config:
            for weights, config in (("video_vae", "video_vae_config"), ("audio_vae", "audio_vae_config")):
                w = self.opts.values.get(weights)
                if config not in self.opts.values and w is not None and isinstance(w.value, str):
                    beside = posixpath.join(posixpath.dirname(w.value), "config.json")
                    self.params[config] = Setting(value=self.resolve_path(beside, config).value,
                                                  source=f"default (beside {weights})")
        if "video_partition" not in self.opts.values:
            self.params["video_partition"] = Setting(value="fl2va", source="default (assumed)")


def effective(
    data: dict[str, Any] | ModelConfig,
    opts: ResolvedOptions,
    *,
    models_dir: Path | None = None,
    cpus: int | None = None,
    header: Callable[[Path], dict[str, Any] | None] = read_gguf_header,
    engine: str | None = None,
) -> Effective:
    """Effective parameters of a config (a validated mapping, or the typed best-effort config).

    :param engine: the registered engine the config's backend resolves to (its video family).
    """
    config = data if isinstance(data, ModelConfig) else model_config(data)
    r = _Resolve(config, opts, models_dir, cpus or cpu_count(), header, engine)
    params = r.run()
    localai = set(opts.localai.values())
    ignored = {k: Setting(value=s.value, path=s.path, source=f"{s.source} (" + (
        LOCALAI_OPTION if s.path in localai else "ignored: unknown key") + ")") for k, s in opts.unknown.items()}
    return Effective(name=config.name, backend=config.backend, params=params, ignored=ignored,
                     notes=tuple(r.notes))


# ---------------------------------------------------------------------------
# one config file, as `config show` reads it
# ---------------------------------------------------------------------------


def named_models_dir(arg: Path | None) -> Path | None:
    """The models directory a user named: ``arg``, else ``$HARNESS_MODELS_DIR``; it must exist."""
    chosen = arg or (Path(os.environ[MODELS_DIR_ENV]) if os.environ.get(MODELS_DIR_ENV) else None)
    if chosen is not None and not os.path.isdir(chosen):
        msg = f"models directory {chosen} does not exist or is not a directory"
        raise UsageError(msg)
    return chosen


@dataclass(frozen=True, kw_only=True)
class ConfigFile:
    """One config of a file, validated, with every diagnostic of it and where its paths resolve."""

    path: Path
    validated: Validated | None
    diagnostics: tuple[Diagnostic, ...]
    models_dir: Path | None

    @property
    def refusals(self) -> tuple[Diagnostic, ...]:
        """Why this harness does not load the config: LocalAI's errors, and the findings this harness's
        engines refuse at load though LocalAI loads the config (warnings of ``harness validate``,
        :func:`harness.config.refs.refused_here`), each in the words ``validate`` prints."""
        from harness.config.refs import refused_here

        return tuple(d for d in self.diagnostics if d.severity == "error" or refused_here(d.code))

    @property
    def failed(self) -> bool:
        return bool(self.refusals)

    def resolve(self) -> Effective | None:
        """Its effective parameters (what ``config show`` prints); None when nothing resolves."""
        v = self.validated
        if v is None or v.config is None:
            return None
        return effective(v.config, v.options, models_dir=self.models_dir, cpus=cpu_count(), engine=v.engine)


def _config_label(c: Validated, index: int) -> str:
    name = c.document.data.get("name") if isinstance(c.document.data, dict) else None
    return repr(name) if isinstance(name, str) and name else f"#{index} (no name)"


def load_config_file(file: Path, *, name: str | None = None, models_dir: Path | None = None,
                     template: bool | None = None) -> ConfigFile:
    """The one config of ``file`` (the one called ``name``, when it holds several), validated.

    :param models_dir: where model paths resolve (default ``$HARNESS_MODELS_DIR``); existence of
        model files is enforced only for a directory named so, as in ``harness validate``; without
        one the config's own directory (LocalAI's layout) is where facts are looked up.
    :param template: gallery bodies: True all, False none, None recognised per config (as validate).
    :raises UsageError: no such file, a directory, or several configs and no ``name``.
    """
    explicit = named_models_dir(models_dir)
    resolved_dir = explicit or (file.parent if os.path.isdir(file.parent) else None)
    if os.path.isdir(file):
        msg = f"{file} is a directory: give one config file (harness validate takes directories)"
        raise UsageError(msg)
    # a regular file within the config limit: a FIFO, a device or a huge file is refused unread
    text = read_bytes(file, kind="config", error=UsageError)
    items = Validator(models_dir=explicit, template=template).validate_text(text, str(file))
    problems = [i for i in items if isinstance(i, Diagnostic)]
    configs = [i for i in items if isinstance(i, Validated)]
    if name:
        configs = [c for c in configs if isinstance(c.document.data, dict) and c.document.data.get("name") == name]
    if len(configs) > 1:
        names = [_config_label(c, i) for i, c in enumerate(configs, 1)]
        msg = f"{file} holds {len(configs)} configs ({', '.join(names)}); pick one with --name"
        raise UsageError(msg)
    diags = problems + [d for c in configs for d in c.diagnostics]
    if not configs and name:
        diags.append(Diagnostic(file=str(file), line=1, col=1, severity="error", code="HRN016",
                                message=f"no config named {name!r}"))
    return ConfigFile(path=file, validated=configs[0] if configs else None, diagnostics=tuple(diags),
                      models_dir=resolved_dir)
