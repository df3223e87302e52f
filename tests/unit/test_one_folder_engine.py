"""An engine is one folder: ``engines/<name>/`` with its descriptor, patches, ABI surface, plugin
package, e2e specs and fixture models, and no other file touched.

The fixture engine ``tiny`` is the C library of :mod:`tests.unit.test_third_engine` (a header with
``TINY_ABI_VERSION``, ``tiny_apply(params, x) = x * scale``; its patch clamps a negative scale to 0).
Its whole folder is written below into a temporary directory on ``$HARNESS_ENGINES_PATH``:

- ``engine.yaml``, ``patches/0001-*.patch``;
- ``plugin/`` (imported as ``harness_plugins.tiny`` from the folder): a text runtime whose core is
  the *built* ``libtiny.so`` through ctypes (each prompt word ``x`` answers ``tiny_apply(x)``), and
  the random model it writes (a "model" file holding a scale);
- ``fixtures.yaml``: two models that plugin writes, one with a negative scale;
- ``e2e/test_tiny.py``: loads both through ``harness.runtime.loader.Runtime`` and checks the answers
  (the clamp proves the patched source was built).

Then, through the CLI as a release engineer runs it: ``engines`` lists it, ``fetch``, ``patch``,
``abi snapshot`` (written into the folder) and ``abi check``, ``build --variant cpu``, ``models
fetch`` (the plugin writes the fixtures, exported as HARNESS_MODEL_<NAME>), and ``e2e tiny`` (the
folder's specs, in their own pytest process). The checkout's ``git status`` is the same before and
after: nothing outside the folder moved.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from harness.cli import main
from harness.core import paths
from tests.unit.test_third_engine import DESCRIPTOR, PATCH, _repo

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("git", "cmake", "ninja", "cc")),
    reason="needs git, cmake, ninja and a C compiler (bash scripts/install-system-deps.sh)")

PLUGIN = '''
"""Engine plugin ``tiny``: a text runtime over the built libtiny.so (ctypes), and its random model."""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Any

from harness.engine.plugin import hookimpl
from harness.engine.registry import EngineImpl, RandomModel

from .core import TinyCore

NAME = "tiny"


class Request:
    """A binding's request as harness.runtime.api reads it: next(), done, finish_reason, text(), timings()."""

    def __init__(self, words: list[str]) -> None:
        self.words, self.out, self.done, self.finish_reason = words, [], False, ""
        self.t0 = time.monotonic()

    def next(self) -> tuple[str, str, str] | None:
        if self.done:
            return None
        if self.words:
            self.out.append(self.words.pop(0) + " ")
            return ("delta", self.out[-1], "")
        self.done, self.finish_reason = True, "stop"
        return ("done", "", "")

    def cancel(self) -> None:
        self.done, self.finish_reason = True, "cancelled"

    def text(self) -> str:
        return "".join(self.out)

    def timings(self) -> dict[str, Any]:
        return {"t_submit": self.t0, "t_first_token": self.t0, "t_done": time.monotonic(),
                "n_prompt": len(self.out), "n_cached": 0, "n_generated": len(self.out)}


class Runtime:
    def __init__(self, model: Path, core: TinyCore) -> None:
        self.core, self.scale = core, float(model.read_text().split("=")[1])

    def stream(self, prompt: str) -> Any:
        from harness.runtime.api import Stream

        words = [f"{self.core.apply(self.scale, float(w)):g}" for w in prompt.split()]
        return Stream(Request(words), time.monotonic())


def load(model: str | Path, *, variant: str | None = None, **engine_args: Any) -> Runtime:
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant
    from harness.engine.descriptor import load_engine

    artifact = artifact_dir(load_engine(NAME), get_variant(variant or "cpu"))
    return Runtime(Path(model), TinyCore(artifact / "lib" / "libtiny.so"))


def _write(dest: Path, seed: int) -> Path:
    dest.write_text(f"scale={-1.5 if seed % 2 else 2.5}\\n")
    return dest


@hookimpl
def harness_engine_register() -> list[EngineImpl]:
    return [EngineImpl(name=NAME, serves=("text",), load=load,
                       random_models={"scale": RandomModel(write=_write, version="1", doc="a scale in a file")})]
'''

CORE = '''
"""libtiny.so through ctypes: the compiled core of the tiny engine."""

from __future__ import annotations

import ctypes
from pathlib import Path


class Params(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int32), ("scale", ctypes.c_float)]


class TinyCore:
    def __init__(self, lib: Path) -> None:
        self.lib = ctypes.CDLL(str(lib))
        self.lib.tiny_default_params.restype = Params
        self.lib.tiny_apply.restype = ctypes.c_float
        self.lib.tiny_apply.argtypes = [ctypes.POINTER(Params), ctypes.c_float]
        self.lib.tiny_abi_version.restype = ctypes.c_int32

    def apply(self, scale: float, x: float) -> float:
        p = self.lib.tiny_default_params()
        p.scale = scale
        return float(self.lib.tiny_apply(ctypes.byref(p), x))
'''

FIXTURES = """\
# tiny's fixture models: scale files its plugin writes (seed even: 2.5, odd: -1.5)
fixtures:
  tiny-scale:
    kind: tiny
    engine: tiny
    shape: scale
    seed: 0
    dest: tiny-scale-s0.txt
  tiny-negative:
    kind: tiny
    engine: tiny
    shape: scale
    seed: 1
    dest: tiny-scale-s1.txt
"""

SPEC = '''
"""tiny end to end: the built library answers through the runtime, the patch's clamp included."""

from harness.qualify.specs import model_path, require_variant
from harness.runtime.loader import Runtime


def test_scales_each_word(variant: str) -> None:
    require_variant(variant)
    runtime = Runtime.load(model_path("HARNESS_MODEL_TINY_SCALE"), engine="tiny", variant=variant)
    assert "".join(runtime.stream("1 2 4")) == "2.5 5 10 "


def test_the_patch_clamps_a_negative_scale(variant: str) -> None:
    require_variant(variant)
    runtime = Runtime.load(model_path("HARNESS_MODEL_TINY_NEGATIVE"), engine="tiny", variant=variant)
    assert "".join(runtime.stream("1 2")) == "0 0 "
'''


def _folder(root: Path, url: str, commit: str) -> Path:
    """Write the whole engine: one folder."""
    folder = root / "tiny"
    (folder / "patches").mkdir(parents=True)
    (folder / "plugin").mkdir()
    (folder / "e2e").mkdir()
    (folder / "engine.yaml").write_text(DESCRIPTOR.format(url=url, commit=commit))
    (folder / "patches" / "0001-tiny-clamp-negative-scale.patch").write_text(PATCH)
    (folder / "plugin" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    (folder / "plugin" / "core.py").write_text(textwrap.dedent(CORE))
    (folder / "fixtures.yaml").write_text(FIXTURES)
    (folder / "e2e" / "__init__.py").write_text("")
    (folder / "e2e" / "test_tiny.py").write_text(textwrap.dedent(SPEC))
    return folder


def _status() -> str | None:
    """The checkout's ``git status`` (None outside a git checkout, e.g. an installed copy)."""
    root = paths.project_root()
    if not (root / ".git").exists() or not shutil.which("git"):
        return None
    return subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_an_engine_is_one_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    import harness.engine.plugin as plugin
    from harness.engine import registry

    before = _status()
    bare, one, _ = _repo(tmp_path / "elsewhere")
    engines = tmp_path / "elsewhere" / "engines"
    folder = _folder(engines, bare.as_uri(), one)
    monkeypatch.setenv("HARNESS_ENGINES_PATH", str(engines))
    # the folder's plugin and specs are code: imported and run for an engine the user trusts
    monkeypatch.setenv("HARNESS_TRUST", "tiny")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_NO_PROGRESS", "1")
    monkeypatch.delenv("HARNESS_DIST", raising=False)
    # the process-wide manager and registry are rebuilt with the folder on the path, and forgotten after
    plugin.get_manager.cache_clear()
    registry.reset()
    monkeypatch.delitem(__import__("sys").modules, "harness_plugins.tiny", raising=False)
    try:
        # the descriptor and the plugin, both from the folder
        code, out, _ = _run(capsys, "engines", "--json")
        assert code == 0 and "tiny" in [e["engine"] for e in json.loads(out)]
        assert registry.get("tiny").serves == ("text",)
        assert _run(capsys, "fetch", "tiny", "--json")[0] == 0
        code, out, _ = _run(capsys, "patch", "--check", "tiny", "--json")
        assert code == 0 and [p["status"] for p in json.loads(out)] == ["applies"]

        # the ABI surface is written into the folder, and checked there
        assert _run(capsys, "abi", "snapshot", "tiny", "--json")[0] == 0
        assert json.loads((folder / "abi" / "surface.json").read_text())["constants"] == {"TINY_ABI_VERSION": 1}
        code, out, _ = _run(capsys, "abi", "check", "tiny", "--json")
        assert code == 0 and json.loads(out)["declared_version"] == 1

        code, out, err = _run(capsys, "build", "tiny", "--variant", "cpu", "--json")
        assert code == 0, err
        assert (Path(json.loads(out)[0]["artifact"]) / "lib" / "libtiny.so").exists()

        # the folder's fixtures, written by the folder's plugin, exported under their derived names
        code, out, err = _run(capsys, "models", "fetch", "--only", "tiny-scale", "tiny-negative", "--json")
        assert code == 0, err
        env = json.loads(out)["env"]
        assert set(env) == {"HARNESS_MODEL_TINY_SCALE", "HARNESS_MODEL_TINY_NEGATIVE"}
        assert Path(env["HARNESS_MODEL_TINY_SCALE"]).read_text() == "scale=2.5\n"

        # the folder's specs, in a pytest process of their own: the plugin is found there the same way
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        code, out, err = _run(capsys, "e2e", "tiny", "--variant", "cpu", "--json")
        assert code == 0, out + err
        result = json.loads(out)
        assert (result["passed"], result["failed"]) == (2, []), result
    finally:
        plugin.get_manager.cache_clear()
        registry.reset()
    # nothing outside the folder was touched
    assert _status() == before
    assert sorted(p.name for p in folder.iterdir()) == ["abi", "e2e", "engine.yaml", "fixtures.yaml", "patches",
                                                      "plugin"]
