"""What a video config renders with, resolved once: config -> engine -> family, and what follows.

``harness video check`` and ``harness video generate`` load the config the way ``harness
validate`` and ``harness config show`` do (:func:`load_target`: an invalid config stops there,
with its located diagnostics), then resolve a :class:`VideoTarget`: the engine the backend
names, the family (:func:`harness.config.video_rules.family_for`, which ``config show`` and the
config rules ask too), the options with that family's defaults, the engine's limits and the
checkpoint paths. The plan (:func:`harness.video.pipeline.plan_request`) takes everything from
the target, so the plan ``check`` prints is the plan ``generate`` renders.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.model import option_specs
from harness.config.options import ResolvedOptions, config_options, parse_options
from harness.config.video_rules import family_for
from harness.core.errors import ConfigError, VideoError
from harness.families.limits import DEFAULT_LIMITS, VideoLimits
from harness.families.table import VideoFamily, render_refusal
from harness.video.media import Scope, confine
from harness.video.options import VideoOptions, video_options

if TYPE_CHECKING:
    from harness.config.effective import ConfigFile

#: A config's checkpoint paths: inside the models directory.
CHECKPOINTS = Scope(label="config key", root="models directory", paths="checkpoint",
                    hint="Pass --models-dir DIR (or set HARNESS_MODELS_DIR) to allow another directory.",
                    error=ConfigError)
#: The DiT, named like LocalAI names it.
MODEL_KEY = "parameters.model"


@dataclass(frozen=True, kw_only=True)
class VideoTarget:
    """One video config resolved: everything a plan is made from."""

    engine: str
    """The registered engine the config's backend names (LocalAI's names resolved)."""
    family: VideoFamily
    """Its video family: grids, defaults, audio, partitions."""
    options: VideoOptions
    """The config's video options; what it leaves unset has the family's defaults."""
    limits: VideoLimits
    """The engine's bounds on a request and its plan."""
    checkpoints: Mapping[str, str] = field(default_factory=dict)
    """Config key (``parameters.model``, ``video_vae``, ...) -> the path as written."""
    models_dir: Path | None = None
    """Where checkpoint paths resolve and must stay (None: the current directory)."""
    model: Any = None
    """The config as written, passed to the engine untouched."""


def engine_limits(engine: str, pm: Any = None) -> VideoLimits:
    """The limits for ``engine``: the defaults, overridden by the registered engine's ``video_limits``."""
    from harness.engine import registry

    impl = registry.engines(pm).get(engine)
    overrides = impl.video_limits if impl is not None else None
    if not overrides:
        return DEFAULT_LIMITS
    if isinstance(overrides, VideoLimits):
        return overrides
    if not isinstance(overrides, Mapping):
        msg = f"the {engine} engine's video_limits is a {type(overrides).__name__}, not a mapping"
        raise VideoError(msg)
    return DEFAULT_LIMITS.with_overrides(overrides, source=f"the {engine} plugin")


def checkpoint_refs(model: Mapping[str, Any] | None, options: ResolvedOptions) -> dict[str, str]:
    """The checkpoint paths a config names: ``parameters.model`` and every path-valued video option."""
    refs: dict[str, str] = {}
    params = model.get("parameters") if model is not None else None
    dit = params.get("model") if isinstance(params, Mapping) else None
    if isinstance(dit, str) and dit:
        refs[MODEL_KEY] = dit
    specs = option_specs()
    for key, s in options.values.items():
        spec = specs.get(key)
        if spec is not None and spec.video and spec.path and isinstance(s.value, str):
            refs[key] = s.value
    return refs


def resolve_target(engine: str, options: ResolvedOptions | Mapping[str, Any] | None = None, *,
                   model: Mapping[str, Any] | None = None, models_dir: Path | None = None,
                   pm: Any = None) -> VideoTarget:
    """Resolve a config for ``engine`` once: family, options with its defaults, limits, checkpoints.

    :param options: the config's resolved options, or option keys -> values (default: the
        options surfaces of ``model``).
    :param model: the config as written (its ``parameters.model`` is the DiT).
    :param models_dir: where checkpoint paths resolve and must stay.
    :param pm: the plugin manager to ask (default: the process-wide one).
    :raises ConfigError: the engine does not render the config's family, or a video option is wrong.
    """
    if isinstance(options, ResolvedOptions):
        resolved = options
    elif options is not None:
        resolved = parse_options(options)
    else:
        resolved = config_options(model or {})
    declared = resolved.get("video_family")
    family = family_for(declared if isinstance(declared, str) else None, engine, pm)
    refusal = render_refusal(engine, family, pm)
    if refusal is not None:
        raise ConfigError(refusal)
    return VideoTarget(engine=engine, family=family, options=video_options(resolved, family=family),
                       limits=engine_limits(engine, pm), checkpoints=checkpoint_refs(model, resolved),
                       models_dir=models_dir, model=model)


def resolve_checkpoints(target: VideoTarget) -> dict[str, Path]:
    """Every checkpoint path of ``target`` resolved inside its models directory, symlinks included.

    A path outside gets one message whether or not it exists (:func:`harness.video.media.confine`);
    inside, it must exist as a file (or, for a sharded text encoder, a directory).

    :raises ConfigError: naming the config key.
    """
    root = target.models_dir or Path.cwd()
    found: dict[str, Path] = {}
    for key, value in target.checkpoints.items():
        path = confine(value, key, root, target.limits, scope=CHECKPOINTS)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            msg = f"config key {key!r}: {value!r} not found in the models directory {root} (looked at {path})"
            raise ConfigError(msg) from None
        except (OSError, ValueError) as e:
            msg = f"config key {key!r}: cannot read {path}: {getattr(e, 'strerror', None) or e}"
            raise ConfigError(msg) from None
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            msg = f"config key {key!r}: {path} is not a regular file or a directory of shards"
            raise ConfigError(msg)
        found[key] = path
    return found


def load_target(path: Path, *, models_dir: Path | None = None,
                pm: Any = None) -> tuple[ConfigFile, VideoTarget | None]:
    """Load a video config the way ``harness validate`` and ``config show`` do, then resolve it.

    :param models_dir: the models directory the operator names (else ``$HARNESS_MODELS_DIR``,
        else the config's own directory).
    :return: the validated config file (its diagnostics) and the target; the target is None
        when the config has errors: nothing may be planned or rendered from it.
    :raises ConfigError: a valid config that names no engine, or whose family the engine
        does not render.
    """
    from harness.config.effective import load_config_file

    loaded = load_config_file(path, models_dir=models_dir)
    validated = loaded.validated
    if loaded.failed or validated is None:
        return loaded, None
    data = validated.document.data
    if not validated.engine:
        msg = (f"{path}: no 'backend:' naming the engine that renders video"
               if not data.get("backend") else f"{path}: backend {data['backend']!r} is no engine here")
        raise ConfigError(msg)
    target = resolve_target(validated.engine, validated.options, model=data,
                            models_dir=(loaded.models_dir or path.parent).resolve(), pm=pm)
    return loaded, target
