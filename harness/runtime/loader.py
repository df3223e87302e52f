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
        impl, model, extra = _target(model, config, name, models_dir, engine)
        if impl.load is None:
            from harness.core.errors import UsageError

            msg = f"engine {impl.name} has no text runtime to load {model} with"
            raise UsageError(msg)
        return impl.load(model, variant=variant, **extra, **engine_args)

    @staticmethod
    def estimate_memory(model: str | Path | None = None, *, config: str | Path | None = None, name: str | None = None,
                        models_dir: str | Path | None = None, engine: str | None = None, variant: str | None = None,
                        **engine_args: Any) -> dict[str, Any]:
        """The engine's own estimate of :meth:`load` with the same arguments, before a weight is read
        (seed 003's ``llmodel_required_mem``): per device the model uses and the host, its weights,
        KV cache and compute buffers against the memory there is; the layers a fit chose
        (``n_gpu_layers="auto"``); whether it fits and, if not, why with the numbers
        (:attr:`harness.engine.interface.EngineImpl.estimate_memory`). ``load`` refuses what does not
        fit with :class:`~harness.core.errors.InsufficientMemoryError`.

        :raises UsageError: the engine cannot estimate (it says "not known" rather than guess).
        """
        impl, model, extra = _target(model, config, name, models_dir, engine)
        if impl.estimate_memory is None:
            from harness.core.errors import UsageError

            msg = f"engine {impl.name} does not know the memory a model needs: not known (no estimate is guessed)"
            raise UsageError(msg)
        return dict(impl.estimate_memory(model, variant=variant, **extra, **engine_args))

    @staticmethod
    def devices(engine: str | None = None) -> list[dict[str, Any]]:
        """The devices each installed variant of ``engine`` (default: every engine that can say) can use:
        per variant ``variant``, ``accepted`` and ``devices`` (``name``, ``platform``, ``type``,
        ``free``, ``total``, ``gpu_index``: the index a config's ``device`` takes), or ``error``
        (seed 003's ``llmodel_available_gpu_devices``)."""
        from harness.engine import registry

        impls = [registry.get(engine)] if engine else list(registry.engines().values())
        out: list[dict[str, Any]] = []
        for impl in impls:
            if impl.devices is None:
                out.append({"engine": impl.name, "variant": None, "accepted": None, "devices": [],
                            "error": "not known: this engine does not list its devices"})
                continue
            out += [{"engine": impl.name, **row} for row in impl.devices()]
        return out


def _target(model: str | Path | None, config: str | Path | None, name: str | None, models_dir: str | Path | None,
            engine: str | None) -> tuple[Any, str | Path, dict[str, Any]]:
    """(the engine, the model, ``effective=`` for a config) that ``model`` or ``config`` names."""
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
    return impl, model, extra


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
