"""The smallest engine there can be: one package, registered in one place, no core file touched.

``toyengine`` below is what a new runtime engine adds under ``plugins/``: a runtime (here over a
fake core standing in for the compiled binding, speaking the request protocol of
:mod:`harness.runtime.api`), model matching, one config rule and its e2e spec files, all on the
:class:`~harness.engine.registry.EngineImpl` it registers. Its one registration is a ``harness`` entry
point of its distribution (for a built-in engine: a line in pyproject.toml's
``[project.entry-points.harness]``). The core then loads it, selects it, checks its configs and
finds its e2e specs through the registry.
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import harness.engine.plugin
from harness.core.types import HostInfo
from harness.engine import registry
from harness.engine.plugin import DISABLE_AUTOLOAD_ENV, make_manager

TOY = '''
"""Engine plugin ``toy``: echoes the prompt back, one word per token."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.engine.plugin import hookimpl
from harness.engine.registry import EngineImpl
from harness.core.types import HostInfo, MatchResult

NAME = "toy"


class FakeRequest:
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


class FakeCore:
    """Stands in for the compiled binding."""

    def submit(self, prompt: str) -> FakeRequest:
        return FakeRequest(prompt.split())


class ToyRuntime:
    def __init__(self, model: str, **engine_args: Any) -> None:
        self.model, self.engine_args, self.core = model, engine_args, FakeCore()

    def stream(self, prompt: str) -> Any:
        from harness.runtime.api import Stream

        return Stream(self.core.submit(prompt), time.monotonic())


def load(model: str | Path, *, variant: str | None = None, **engine_args: Any) -> ToyRuntime:
    return ToyRuntime(str(model), variant=variant, **engine_args)


def match(model: dict[str, Any], host: HostInfo) -> MatchResult:
    ok = model.get("format") == "ggufv2"
    return MatchResult(engine=NAME, ok=ok, variant="cpu" if ok else None,
                       reason="" if ok else f"toy loads GGUF only; model is {model.get('format')}")


def config_rules() -> tuple[Any, ...]:
    from harness.config.refs import Rule

    # an engine's rule is an error only with the line of its pinned source that makes it true
    return (Rule(code="TOY001", severity="error", source="example/toy@0000000 src/toy.c:1",
                 summary="context_size above the 2048 toy takes: it refuses it at load"),)


def config_check(config: Any, context: Any) -> list[Any]:
    from harness.config.refs import register

    register(*config_rules())
    if (config.context_size or 0) > 2048:
        return [context.error(("context_size",), f"context_size {config.context_size} is above the 2048 toy takes",
                              code="TOY001")]
    return []


def e2e_specs() -> list[Path]:
    return sorted((Path(__file__).parent / "e2e").glob("test_*.py"))


@hookimpl
def harness_engine_register() -> list[EngineImpl]:
    return [EngineImpl(name=NAME, serves=("text",), load=load, match=match, config_check=config_check,
                       e2e_specs=e2e_specs)]
'''

HOST = HostInfo(os="linux", arch="x86_64", cpu_model="test", microarch="x86_64_v3", simd=("avx2",),
                cores=8, memory_bytes=16 << 30)


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``toyengine`` installed as a distribution whose one ``harness`` entry point registers it."""
    package = tmp_path / "toyengine"
    (package / "e2e").mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(TOY))
    (package / "e2e" / "test_echo.py").write_text("def test_echo() -> None:\n    pass\n")
    dist = tmp_path / "toyengine-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyengine\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[harness]\nengine-toy = toyengine\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(DISABLE_AUTOLOAD_ENV, raising=False)
    pm = make_manager()
    monkeypatch.setattr(harness.engine.plugin, "get_manager", lambda: pm)
    yield package
    sys.modules.pop("toyengine", None)


def test_registered_through_its_entry_point(toy: Path) -> None:
    assert "toy" in registry.names()
    assert registry.get("toy").serves == ("text",)


def test_runtime_on_a_fake_core(toy: Path, tmp_path: Path) -> None:
    from harness.runtime.loader import Runtime

    model = tmp_path / "m.gguf"
    model.write_bytes(b"")
    runtime: Any = Runtime.load(model, engine="toy", n_ctx=512)
    assert runtime.engine_args == {"variant": None, "n_ctx": 512}
    stream = runtime.stream("hello from a fake core")
    assert "".join(stream) == "hello from a fake core "
    assert stream.result is not None and stream.result.finish_reason == "stop"


def test_selected_and_its_config_rule_applied(toy: Path) -> None:
    from harness.config.model import model_config
    from harness.config.select import select_engine
    from harness.config.validate import Validated, Validator

    text = "name: m\nbackend: toy\ncontext_size: 4096\nparameters:\n  model: m.gguf\n"
    [item] = Validator().validate_text(text, "m.yaml")
    assert isinstance(item, Validated) and item.engine == "toy"
    assert [str(d) for d in item.diagnostics] == [
        "m.yaml:3:15: error: context_size 4096 is above the 2048 toy takes"]
    sel = select_engine(model_config({"name": "m", "backend": "toy", "parameters": {"model": "m.gguf"}}), HOST)
    assert sel.chosen is not None and (sel.chosen.engine, sel.chosen.variant) == ("toy", "cpu")


def test_e2e_specs_found_by_the_qualify_stage(toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.qualify.e2e
    from harness.engine.descriptor import load_engine
    from harness.qualify.bench_plan import BenchPlan
    from harness.qualify.context import Built, Models, QualifyContext
    from harness.qualify.stages.e2e import e2e

    ran: list[list[Path]] = []

    class Passed:
        ok, passed, skipped, deselected, failed, crashes = True, 1, 0, 0, [], []

        def as_dict(self) -> dict[str, Any]:
            return {"files": {}}

    def run_specs(specs: list[Path], **kw: Any) -> Passed:
        ran.append(list(specs))
        return Passed()

    monkeypatch.setattr(harness.qualify.e2e, "run_specs", run_specs)
    # the descriptor's data does not matter to the stage: the engine is looked up by name
    spec = dataclasses.replace(load_engine("llamacpp"), name="toy")
    ctx = QualifyContext(engine=spec, pm=harness.engine.plugin.get_manager(), host=HOST, plan=BenchPlan(),
                         report=toy, products={"models": Models(env={}), "build": Built(variants=("cpu",))})
    result = e2e(ctx)
    assert ran == [[toy / "e2e" / "test_echo.py"]]
    assert "cpu: 1 passed" in str(result)
