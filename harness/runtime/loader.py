"""``Runtime.load``: the entry point to the engines' runtimes, for a model file or a model config.

Re-exported as :class:`harness.runtime.Runtime`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.config.effective import Effective

#: A model path with one of these suffixes is a model config, not a model file.
CONFIG_SUFFIXES = (".yaml", ".yml")


class Runtime:
    """Entry point to the engines' runtimes: ``Runtime.load(model, ...)`` returns a loaded engine."""

    @staticmethod
    def load(model: str | Path | None = None, *, config: str | Path | None = None, name: str | None = None,
             models_dir: str | Path | None = None, engine: str | None = None, variant: str | None = None,
             **engine_args: Any) -> Any:
        """Load a model file or directory, or the model a config file describes.

        :param model: a model file or directory; a ``.yaml``/``.yml`` path is taken as ``config``.
        :param config: a model config (LocalAI's YAML), validated and resolved as ``harness config
            show`` does: its model, engine arguments and sampling defaults are the effective values
            that command prints, and its ``backend:`` picks the engine. ``engine_args`` given here win.
        :param name: which config, when the file holds several.
        :param models_dir: where the config's model paths resolve (default ``$HARNESS_MODELS_DIR``,
            else the config's directory).
        :raises ConfigError: the config has errors (each one listed, as ``harness validate`` says them).
        """
        from harness.core.errors import UsageError
        from harness.engine import registry

        if config is None and model is not None and Path(model).suffix.lower() in CONFIG_SUFFIXES:
            model, config = None, model
        extra: dict[str, Any] = {}
        if config is not None:
            if model is not None:
                msg = f"give a model or a config, not both (the config {config} names its model)"
                raise UsageError(msg)
            effective, config_engine = _resolve_config(Path(config), name, models_dir)
            engine = engine or config_engine
            model = str(effective.params["model"].value)
            extra["effective"] = effective
        if model is None:
            msg = "Runtime.load needs a model (a model file or directory) or config= (a model config)"
            raise UsageError(msg)
        # The engine opens the model itself, not through harness.core.inputs: a path into the
        # kernel's pseudo-file systems (/proc/self/mem, /proc/self/environ) is refused here.
        from harness.core.errors import ModelError
        from harness.core.inputs import refuse_pseudo

        refuse_pseudo(model, kind="model", error=ModelError)
        impl = registry.get(engine) if engine else registry.default("text")
        if impl.load is None:
            msg = f"engine {impl.name} has no text runtime to load {model} with"
            raise UsageError(msg)
        return impl.load(model, variant=variant, **extra, **engine_args)


def _resolve_config(path: Path, name: str | None, models_dir: str | Path | None) -> tuple[Effective, str | None]:
    """(effective parameters, engine) of a model config, as ``harness config show`` resolves it."""
    # Imported here: the config package (schema, validation) is not needed to load a model file.
    from harness.config.effective import load_config_file
    from harness.core.errors import ConfigError

    loaded = load_config_file(path, name=name, models_dir=Path(models_dir) if models_dir is not None else None)
    errors = [str(d) for d in loaded.refusals]
    effective = loaded.resolve()
    if errors or effective is None or loaded.validated is None:
        found = "\n".join(errors) if errors else "nothing in it resolves to a model config"
        msg = f"model config {path} is invalid (harness validate {path} says the same):\n{found}"
        raise ConfigError(msg)
    return effective, loaded.validated.engine
