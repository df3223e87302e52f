"""Placement settings reach the binding as it takes them (issue 60): n_gpu_layers auto becomes the
fit flag, a device is a string, margins and budgets are whole MiB; a config's keys (options,
LocalAI's main_gpu) arrive the same way; an engine that cannot estimate says so instead of guessing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.config.effective import load_config_file
from harness.core.errors import InvalidRequestError, UsageError
from harness_plugins.llamacpp.engine import config_args, core_params


def test_auto_is_the_fit_flag_and_a_number_stays_a_number() -> None:
    assert core_params({"n_gpu_layers": "auto"}) == {"gpu_layers_auto": True}
    assert core_params({"gpu_layers": 12}) == {"n_gpu_layers": 12}
    assert core_params({"n_gpu_layers": -1, "device": 0}) == {"n_gpu_layers": -1, "device": "0"}


@pytest.mark.parametrize("args", [
    {"n_gpu_layers": "all"}, {"device": ""}, {"device": True}, {"fit_target": -1}, {"device_budget_mib": 1.5},
    {"memory_check": "no"}, {"host_available_bytes": -5},
])
def test_bad_placement_values_are_refused_naming_the_argument(args: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError, match=next(iter(args))):
        core_params(args)


def test_a_configs_placement_keys_reach_the_binding(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: c\nbackend: llama-cpp\nmain_gpu: Vulkan0\nparameters:\n  model: m.gguf\n"
                   "options:\n  - gpu_layers:auto\n  - fit_target:512\n")
    eff = load_config_file(cfg, models_dir=tmp_path).resolve()
    assert eff is not None
    params = core_params(config_args(eff))
    assert params["gpu_layers_auto"] is True and params["device"] == "Vulkan0" and params["fit_margin_mib"] == 512
    assert "n_gpu_layers" not in params


def test_an_engine_without_an_estimate_says_not_known(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.engine import registry
    from harness.engine.interface import EngineImpl
    from harness.runtime import Runtime

    monkeypatch.setattr(registry, "get", lambda name, pm=None: EngineImpl(name=name))
    with pytest.raises(UsageError, match="not known"):
        Runtime.estimate_memory("x.gguf", engine="video-only")
    rows = Runtime.devices("video-only")
    assert rows == [{"engine": "video-only", "variant": None, "accepted": None, "devices": [],
                     "error": "not known: this engine does not list its devices"}]
