"""Model and checkpoint paths never resolve into /proc, /sys or /dev (issue 48, part 4).

``/proc`` files look regular: a model path that was a link to ``/proc/self/environ`` was read and
the error echoed its first bytes; ``/proc/self/mem`` made the llama.cpp plugin's config check
raise ``OSError`` (EIO), reported as a warning with ``validate`` exiting 0. Every input opened
through :mod:`harness.core.inputs`, and every model :class:`harness.runtime.Runtime` hands an
engine, is now refused by where it resolves, naming the path, never its bytes; and a plugin check
that raises is an error naming the exception's type.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pluggy
import pytest

from harness.core import inputs
from harness.core.errors import ConfigError, ModelError
from harness.runtime import Runtime

pytestmark = pytest.mark.skipif(not os.path.isfile("/proc/self/environ"), reason="needs Linux's /proc")

PSEUDO = ["/proc/self/environ", "/proc/self/mem", "/proc/self/cmdline", "/sys/kernel/mm/transparent_hugepage/enabled",
          "/proc/self/cwd/../../proc/self/environ"]
#: The start of this process's environment: what a leak would show.
ENVIRON_HEAD = Path("/proc/self/environ").read_bytes()[:4]


def _existing(paths: list[str]) -> list[str]:
    return [p for p in paths if os.path.exists(p)]


@pytest.mark.parametrize("target", _existing(PSEUDO))
@pytest.mark.parametrize("via", ["direct", "symlink"])
@pytest.mark.parametrize("kind", ["gguf-header", "safetensors-header", "model", "config"])
def test_inputs_refuse_pseudo_files_by_name(tmp_path: Path, target: str, via: str, kind: str) -> None:
    path = Path(target)
    if via == "symlink":
        path = tmp_path / "model.gguf"
        path.symlink_to(target)
    with pytest.raises(ModelError) as e:
        inputs.read_bytes(path, kind=kind, error=ModelError)
    msg = str(e.value)
    assert str(path) in msg and "pseudo-file system" in msg
    assert repr(ENVIRON_HEAD) not in msg and ENVIRON_HEAD.decode(errors="replace") not in msg.split(str(path))[0]
    with pytest.raises(ModelError):
        inputs.regular_file(path, kind=kind, error=ModelError)


def test_a_file_in_dev_shm_is_refused_and_devices_say_what_they_are(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="a character device"):
        inputs.read_bytes("/dev/zero", kind="model", error=ModelError)
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        import tempfile

        with (tempfile.NamedTemporaryFile(dir="/dev/shm", suffix=".gguf") as f,
              pytest.raises(ModelError, match="in /dev: a pseudo-file system")):
            inputs.read_bytes(f.name, kind="model", error=ModelError)


@pytest.mark.parametrize("target", ["/proc/self/environ", "/proc/self/mem", "/proc/self", "/sys/kernel"])
def test_runtime_refuses_a_model_in_a_pseudo_file_system_before_any_engine(tmp_path: Path, target: str) -> None:
    link = tmp_path / "m.gguf"
    link.symlink_to(target)
    for model in (target, link):
        with pytest.raises(ModelError, match="pseudo-file system") as e:
            Runtime.load(model, engine="no-such-engine")  # refused before the engine is looked up
        assert str(model) in str(e.value)


def _validate(models: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARNESS_NO_PROGRESS": "1"}
    return subprocess.run([sys.executable, "-m", "harness", "validate", "--models-dir", str(models), str(config)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


@pytest.mark.parametrize("target", ["/proc/self/environ", "/proc/self/mem"])
def test_validate_refuses_a_model_linked_into_proc(tmp_path: Path, target: str) -> None:
    (tmp_path / "m.gguf").symlink_to(target)
    config = tmp_path / "m.yaml"
    config.write_text("name: m\nbackend: llama-cpp\nparameters:\n  model: m.gguf\n")
    r = _validate(tmp_path, config)
    out = r.stdout + r.stderr
    assert r.returncode == ConfigError.exit_code, out
    assert "error:" in out and f"{tmp_path / 'm.gguf'}" in out and "pseudo-file system" in out
    assert repr(ENVIRON_HEAD) not in out and "Errno 5" not in out and "warning: a plugin" not in out


def test_a_plugin_check_that_raises_oserror_is_a_warning_that_says_so(tmp_path: Path) -> None:
    from harness.config.validate import Validated, Validator
    from harness.engine import hookspec
    from harness.engine.interface import EngineImpl
    from harness.engine.plugin import hookimpl

    def eio(config: object, context: object) -> list[str]:
        raise OSError(5, "Input/output error")

    class Raises:
        @hookimpl
        def harness_engine_register(self) -> list[EngineImpl]:
            return [EngineImpl(name="llamacpp", config_check=eio)]

    pm = pluggy.PluginManager("harness")
    pm.add_hookspecs(hookspec)
    pm.register(Raises())
    [item] = Validator(engines={"llamacpp"}, pm=pm).validate_text(
        "name: m\nbackend: llamacpp\nparameters:\n  model: m.gguf\n", "m.yaml")
    assert isinstance(item, Validated)
    [diag] = item.diagnostics
    # LocalAI loads this config: a harness check that could not run is a warning (issue 55: errors stay
    # LocalAI's), and it says the check did not run
    assert diag.severity == "warning" and "OSError" in diag.message and "not checked" in diag.message
