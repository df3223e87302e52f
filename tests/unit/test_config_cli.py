"""`harness validate`, `harness config show`, `harness select`, and the example configs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pluggy
import pytest

import harness.cli
import harness.cli.config as config_cli
import harness.config
import harness.config.validate as validate
import harness.engine.plugin
from harness.core.types import GpuInfo, HostInfo, MatchResult
from harness.engine import hookspec
from harness.engine.registry import EngineImpl
from tests.unit.test_config_validate import tiny_gguf

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "models"
ENGINES = frozenset({"llamacpp", "sdcpp"})
HOST = HostInfo(os="linux", arch="x86_64", cpu_model="t", microarch="x", simd=(), cores=4,
                memory_bytes=1 << 30, cuda_version="12.8", gpus=(GpuInfo(api="cuda", name="t"),))
BASE = "name: m\nbackend: llamacpp\nparameters:\n  model: m.gguf\n"
hookimpl = pluggy.HookimplMarker("harness")


@pytest.fixture(autouse=True)
def _wired(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.cli, "COMMAND_MODULES", ("harness.cli.config",))
    monkeypatch.setattr(validate, "known_engines_from_plugins", lambda: ENGINES)
    monkeypatch.delenv(harness.config.MODELS_DIR_ENV, raising=False)


def cli(*argv: str | Path) -> int:
    return harness.cli.main([str(a) for a in argv])


def test_examples_have_the_schema_comment() -> None:
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert [f.name for f in files] == ["minilm-embed.yaml", "smollm2-chat.yaml", "wan-video.yaml"]
    for f in files:
        first = f.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../../harness/schemas/model-config.schema.json"
        assert (f.parent / first.split("=", 1)[1]).resolve().is_file()


def make_models(models: Path) -> None:
    """The files the examples reference (the models themselves are not in the repo)."""
    for f in ["wan/Wan2.1-T2V-1.3B-Q4_K_M.gguf", "wan/umt5-xxl-encoder-Q4_K_M.gguf",
              "wan/wan_2.1_vae.safetensors", "h3/minimax-h3-fl2va-dit.safetensors",
              "h3/text-encoder-Q4_K_M.gguf", "h3/tokenizer.json", "h3/video_vae.safetensors",
              "h3/video_vae_config.json", "h3/audio_vae.safetensors", "h3/audio_vae_config.json",
              "all-MiniLM-L6-v2/config.json"]:
        (models / f).parent.mkdir(parents=True, exist_ok=True)
        (models / f).write_bytes(b"{}")
    tiny_gguf(models / "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_examples_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_models(tmp_path)
    assert cli("validate", "--strict", "--models-dir", tmp_path, EXAMPLES) == 0
    assert capsys.readouterr().out == ""
    assert cli("validate", "--json", "--strict", EXAMPLES) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"ok": True, "files": 3, "configs": 3, "errors": 0, "warnings": 0, "notes": 0,
                      "diagnostics": []}


def test_examples_fail_without_model_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("validate", "--models-dir", tmp_path, EXAMPLES / "smollm2-chat.yaml") == 3
    assert "not found in the models directory" in capsys.readouterr().out


def test_validate_output_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(BASE + "options: [blok_size:3]\n")
    assert cli("validate", f) == 0
    out = capsys.readouterr()
    assert out.out == (f"{f}:5:11: LAI018 warning: unknown option key 'blok_size': ignored (it may belong "
                       "to another engine) (did you mean 'block_size'?)\n")
    assert "1 files, 1 configs: 0 errors, 1 warnings, 0 notes (ok)" in out.err
    assert cli("validate", "--strict", f) == 3
    capsys.readouterr()
    assert cli("validate", "--json", "--strict", f) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["diagnostics"][0]["line"] == 5


def test_validate_bad_models_dir_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("validate", "--models-dir", tmp_path / "nope", tmp_path) == 2
    assert "does not exist" in " ".join(capsys.readouterr().err.split())


def test_config_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(EXAMPLES / "smollm2-chat.yaml", tmp_path / "c.yaml")
    make_models(tmp_path)
    assert cli("config", "show", "--json", tmp_path / "c.yaml") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["params"]["n_ctx"] == {"value": 2048, "source": "context_size"}
    assert data["params"]["enable_prefix_caching"] == {"value": 1, "source": "options"}
    assert data["params"]["model"]["value"] == str(tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert cli("config", "show", tmp_path / "c.yaml") == 0
    out = capsys.readouterr().out
    assert "n_ctx" in out and "context_size" in out and "1 (on)" in out


def test_config_show_refuses_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("name: m\nparameters: {model: ../x.gguf}\n")
    assert cli("config", "show", f) == 3
    assert capsys.readouterr().out.startswith(f"{f}:2:21: LAI002 error: parameters.model '../x.gguf' escapes")
    assert cli("config", "show", tmp_path / "missing.yaml") == 2


def test_config_show_picks_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("- {name: a, parameters: {model: a.gguf}}\n- {name: b, parameters: {model: b.gguf}}\n")
    assert cli("config", "show", f) == 2
    assert "pick one with --name" in " ".join(capsys.readouterr().err.split())
    assert cli("config", "show", "--json", "--name", "b", f) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "b"


def _match(model: dict[str, Any], host: HostInfo) -> MatchResult:
    ok = model["format"] == "ggufv2"
    return MatchResult(engine="llamacpp", ok=ok, variant="cpu" if ok else None,
                       reason="" if ok else "llama.cpp engine only supports ggufv2 format")


class Engine:
    @hookimpl
    def harness_engine_register(self) -> list[EngineImpl]:
        return [EngineImpl(name="llamacpp", match=_match)]


def test_select(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pm = pluggy.PluginManager("harness")
    pm.add_hookspecs(hookspec)
    pm.register(Engine())
    monkeypatch.setattr(harness.engine.plugin, "get_manager", lambda: pm)
    monkeypatch.setattr(config_cli, "probe_host", lambda: HOST)
    f = tmp_path / "c.yaml"
    f.write_text(BASE)
    assert cli("select", f) == 0
    assert "selected llamacpp variant cpu (GPU wheel index: cu128)" in capsys.readouterr().out
    assert cli("select", "--json", f) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chosen"] == {"engine": "llamacpp", "ok": True, "variant": "cpu", "reason": ""}
    assert data["wheel_index"] == "cu128"
    f.write_text(BASE.replace("m.gguf", "dir"))
    assert cli("select", f) == 1
    out = capsys.readouterr().out
    assert "no engine selected: backend 'llamacpp' rejects this model: llama.cpp engine only" in out


def test_probe_host_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.core.host

    def boom() -> HostInfo:
        raise OSError("no /proc")

    monkeypatch.setattr(harness.core.host, "probe", boom)
    host = config_cli.probe_host()
    assert host.cores >= 1 and host.gpus == ()
