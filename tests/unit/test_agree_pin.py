"""The pin move's numerical agreement: qualification's old-pin-agreement stage and its table in
qualify.md, and how an in-process arm runs another recipe's binding (unpacked beside the installed
one, found first in its worker through that recipe's descriptor and ABI surface)."""

from __future__ import annotations

import dataclasses
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

from harness.agree import corpus as corpora
from harness.agree import run as agree_run
from harness.agree.thresholds import Threshold
from harness.qualify import Qualification
from harness.qualify.context import Built, Models, QualifyContext, QualifyOptions
from harness.qualify.report import render_markdown
from harness.qualify.stages import agreement

FAKE = "tests.fakes.agree_arm"
TEXT = "".join(chr(33 + (i * 7) % 90) for i in range(200))
HOST = {"os": "linux", "arch": "x86_64", "cpu_model": "EPYC", "microarch": "zen4", "cores": 2,
        "memory_bytes": 24 << 30}


def _corpus() -> corpora.Corpus:
    pin = corpora.CorpusPin(name="docutils-prose", doc="", package="docutils", version="0.21.2",
                            filename="docutils-0.21.2.tar.gz", sha256="0", members={})
    return corpora.Corpus(name="docutils-prose", text=TEXT, archive=Path("x"), pin=pin)


def _context(tmp_path: Path, **options: Any) -> QualifyContext:
    from harness.core.types import HostInfo
    from harness.engine.descriptor import load_engine
    from harness.engine.plugin import make_manager
    from harness.qualify.bench_plan import BenchPlan

    host = HostInfo(os="linux", arch="x86_64", cpu_model="EPYC", microarch="zen4", simd=(), cores=2,
                    memory_bytes=24 << 30)
    ctx = QualifyContext(engine=load_engine("llamacpp"), pm=make_manager(autoload=False), host=host,
                         plan=BenchPlan(threads=2), report=tmp_path, options=QualifyOptions(**options))
    return ctx.with_product("build", Built(variants=("cpu",))).with_product(
        "models", Models(env={"HARNESS_CHAT_MODEL": "/m/SmolLM2-135M-Instruct.Q4_1.gguf"}))


@pytest.fixture
def toy_agree(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The stage's agree() on toy arms (B perturbed), recording what the stage asked for."""
    real = agree_run.agree
    calls: list[dict[str, Any]] = []

    def fake(a: str, b: str, **kw: Any) -> agree_run.AgreeResult:
        calls.append({"a": a, "b": b, **kw})
        return real("agree-fake", "agree-fake:perturb=0.2", model="toy", corpus=kw["corpus"], window=16,
                    isolate=False, extra_plugins=[FAKE], resamples=100, kind=kw["kind"], threshold=kw["threshold"])

    monkeypatch.setattr(agree_run, "agree", fake)
    monkeypatch.setattr(corpora, "load_corpus", lambda *a, **k: _corpus())
    return calls


def test_the_pin_move_adds_the_agreement_table(tmp_path: Path, toy_agree: list[dict[str, Any]]) -> None:
    r = agreement.old_pin(_context(tmp_path, old_pin="0.3.35"))
    [call] = toy_agree
    # the old pin is the reference (A): its recipe's build and binding, this pin's at the same level (B)
    assert call["a"] == "in-process:variant=cpu,engine=llamacpp,pin=0.3.35,name=llamacpp 0.3.35"
    from harness.engine.descriptor import load_engine

    assert call["b"] == f"in-process:variant=cpu,engine=llamacpp,name=llamacpp {load_engine('llamacpp').pin}"
    assert (call["kind"], call["window"], call["max_tokens"], call["threads"]) == ("pin", 512, 2048, 2)
    assert call["model"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and call["threshold"].gate is False
    # the toy B is far outside the pin limits: reported for the PR, not gated (the descriptor says so)
    assert "outside the pin thresholds (reported, not gated): mean KLD" in r.summary
    assert r.data["old"] == "0.3.35" and r.data["violations"] and r.data["passed"] is True
    out = tmp_path / "agree-old-pin"
    assert {p.name for p in out.iterdir()} == {"agree.md", "agree.json", "kld.png"}
    assert len(json.loads((out / "agree.json").read_text())["kld"]) == r.data["summary"]["n_windows"]

    q = Qualification(engine="llamacpp")
    q.run("old-pin-agreement", lambda: r)
    md = render_markdown({"engine": "llamacpp", "pin": "0.3.36", "upstream": {"build": 11312}, "host": HOST,
                          "started_at": "x", "passed": True,
                          "stages": [{"name": s.name, "status": s.status, "seconds": s.seconds,
                                      "summary": s.summary, "data": s.data} for s in q.stages]})
    assert "\n## Numerical agreement: this pin (B) against the old pin 0.3.35 (A)\n" in md
    assert "[agree-old-pin/agree.md](agree-old-pin/agree.md)" in md
    assert "\n#### Agreement: `agree-fake:perturb=0.2` against `agree-fake` (reference)\n" in md
    assert "| mean KLD (nats) |" in md and "| top-1 agreement |" in md and "| perplexity ratio B/A |" in md
    assert "Thresholds for `pin` (reported only:" in md
    assert "![KLD per position and its histogram](agree-old-pin/kld.png)" in md


def test_a_gated_pin_threshold_fails_the_stage_with_its_table(tmp_path: Path, toy_agree: list[dict[str, Any]],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.agree import thresholds

    gated = Threshold(kind="pin", why="this engine gates pin moves", kld_mean=1e-4)
    monkeypatch.setattr(thresholds, "for_engine", lambda engine: {"pin": gated})
    q = Qualification(engine="llamacpp")
    st = q.run("old-pin-agreement", lambda: agreement.old_pin(_context(tmp_path, old_rev="main")))
    assert st.status == "failed" and not q.passed
    assert toy_agree[0]["a"] == "in-process:variant=cpu,engine=llamacpp,rev=main,name=llamacpp main"
    assert "; FAILED: mean KLD" in st.summary and st.data["markdown"].startswith("### Agreement")


def test_without_an_old_pin_or_configuration_the_stage_is_skipped(tmp_path: Path,
                                                                  toy_agree: list[dict[str, Any]]) -> None:
    from harness.qualify import SkippedStage

    with pytest.raises(SkippedStage, match="no old pin given"):
        agreement.old_pin(_context(tmp_path))
    ctx = _context(tmp_path, old_pin="0.3.35")
    with pytest.raises(SkippedStage, match=r"qualify\.agreement in its engine\.yaml"):
        agreement.old_pin(dataclasses.replace(ctx, engine=dataclasses.replace(ctx.engine, raw={})))
    with pytest.raises(SkippedStage, match="cpu variant was not built"):
        agreement.old_pin(ctx.with_product("build", Built(variants=("vulkan",))))
    assert toy_agree == []


def test_qualification_runs_the_stage_after_the_old_pin_bench(tmp_path: Path) -> None:
    from harness.qualify.stages import stages_for

    ctx = _context(tmp_path)
    names = [s.name for s in stages_for(ctx)]
    # one old-pin bench per bench model: the first simulated where it has run lengths, the others wall-clock
    benches = ["old-pin-bench"] + [f"old-pin-bench-{m}" for m in ctx.plan.models[1:]]
    assert names[-(len(benches) + 2):] == ["old-pin-abi", *benches, "old-pin-agreement"]
    stage = next(s for s in stages_for(_context(tmp_path)) if s.name == "old-pin-agreement")
    assert set(stage.needs) == {"binding", "models"}


# ---------------------------------------------------------------- another recipe's binding


def _wheel(path: Path, package: str, identity: dict[str, Any]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{package}/__init__.py", "")
        zf.writestr(f"{package}/identity.json", json.dumps(identity))
        zf.writestr(f"{package}/lib/libggml-base.so", b"\x7fELF")
        zf.writestr(f"{package}-0.3.35.dist-info/RECORD", "")
    return path


def test_another_recipes_binding_is_unpacked_and_found_first(tmp_path: Path, cache: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A recipe root on $HARNESS_ENGINES_PATH brings its pin and ABI surface; the unpacked binding on
    $HARNESS_BINDING_PATH is the accepted candidate, the installed one (this pin) is not."""
    import shutil

    from harness.binding import wheel as wheels
    from harness.core import paths
    from harness.engine.descriptor import parse_engine
    from harness.runtime import discovery

    root = tmp_path / "recipe"
    shutil.copytree(paths.project_root() / "engines/llamacpp", root / "engines/llamacpp",
                    ignore=shutil.ignore_patterns("__pycache__"))
    desc = root / "engines/llamacpp/engine.yaml"
    desc.write_text(re.sub(r'version: "[^"]+"', 'version: "0.3.35"', desc.read_text(), count=1))
    surface = root / "engines/llamacpp/abi/surface.json"
    data = json.loads(surface.read_text())
    data["fingerprint"] = "f" * 64
    surface.write_text(json.dumps(data))
    spec = dataclasses.replace(parse_engine(desc), recipe_commit="c" * 40)
    identity = {"engine": "llamacpp", "pin": "0.3.35", "variant": "cpu", "platform": "cpu", "abi_fingerprint": "f" * 64}
    built = wheels.binding_root(spec, "cpu") / "wheels" / "harness_binding_llamacpp_cpu-0.3.35-py3-none-any.whl"
    assert built.parent.parent.name == f"llamacpp-0.3.35-cpu@{'c' * 12}"
    built.parent.mkdir(parents=True)
    _wheel(built, "harness_llamacpp_cpu", identity)
    calls: list[tuple[Path, bool]] = []

    def fake_build(engine: Any, artifact: Path, *, install: bool = True, force: bool = False) -> wheels.BindingBuild:
        calls.append((artifact, install))
        return wheels.BindingBuild(wheel=built, package="harness_llamacpp_cpu", built=False, installed=False,
                                   seconds=0.0, key="k1")

    monkeypatch.setattr(wheels, "build_binding", fake_build)
    site = wheels.unpacked_binding(spec, tmp_path / "artifact")
    assert calls == [(tmp_path / "artifact", False)]
    pkg = site / "harness_llamacpp_cpu"
    assert (pkg / "identity.json").is_file() and (pkg / "lib/libggml-base.so").stat().st_mode & 0o111
    assert not (site / "harness_binding_llamacpp_cpu-0.3.35.dist-info").exists()
    (pkg / "marker").write_text("kept")
    assert wheels.unpacked_binding(spec, tmp_path / "artifact") == site and (pkg / "marker").is_file()

    # the worker of that arm: the recipe's descriptor and surface, the unpacked binding first
    from harness_plugins.llamacpp import bench

    monkeypatch.setenv("HARNESS_ENGINES_PATH", "")  # _use_recipe sets them; undone after the test
    monkeypatch.setenv("HARNESS_BINDING_PATH", "")
    bench._use_recipe({"_engines_path": str(root / "engines"), "_binding_path": str(site), "pin": "0.3.35"})
    from harness.engine.descriptor import load_engine

    assert load_engine("llamacpp").pin == "0.3.35"
    assert discovery.committed_fingerprint("llamacpp") == "f" * 64
    chosen = discovery.choose("llamacpp", "0.3.35", "f" * 64, "cpu")
    assert chosen.location == pkg and chosen.accepted


def test_an_in_process_arm_naming_another_pin_builds_its_recipe(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    from harness.binding import wheel as wheels
    from harness.build import pipeline, recipes
    from harness.build.cmake import BuildResult
    from harness.engine.descriptor import load_engine
    from harness_plugins.llamacpp import bench

    current = load_engine("llamacpp")
    old = dataclasses.replace(current, recipe_commit="a" * 40)
    monkeypatch.setattr(recipes, "resolve", lambda engine, pin=None, rev=None: current if pin == current.pin else old)
    built: list[tuple[str, str]] = []

    def fake_build(spec: Any, variant: str, pm: Any = None, *, force: bool = False) -> BuildResult:
        built.append((spec.recipe_commit, variant))
        return BuildResult(artifact=tmp_path / "art", build_dir=tmp_path, built=True, seconds=1.0, manifest={})

    monkeypatch.setattr(pipeline, "build_variant", fake_build)
    monkeypatch.setattr(wheels, "unpacked_binding", lambda spec, artifact: tmp_path / "site" / spec.recipe_commit[:4])
    assert bench.prepare_in_process({"variant": "cpu", "model": "m"}) is None
    assert bench.prepare_in_process({"pin": current.pin, "model": "m"}) == {"pin": current.pin, "model": "m"}
    opts = bench.prepare_in_process({"rev": "main", "variant": "cpu", "model": "m"})
    assert opts is not None and built == [("a" * 40, "cpu")]
    assert opts["_binding_path"] == str(tmp_path / "site" / "aaaa")
    assert opts["_engines_path"] == str(current.root.parent)
    # the hook prepares an in-process arm the same way (harness agree, harness bench)
    from harness.bench.arms import ArmSpec, prepare_arm

    spec = prepare_arm(ArmSpec.parse("in-process:variant=cpu,rev=main,model=m"))
    assert spec.options["_binding_path"] == str(tmp_path / "site" / "aaaa")
    assert "_binding_path" not in spec.spec


def test_the_table_of_a_recorded_pin_comparison() -> None:
    """Recorded on this project's host: ``harness agree in-process:rev=main in-process: --kind pin``
    (main's recipe of the same pin, its own artifact and unpacked binding, against the installed
    one): the arm really ran another binding, and the same source computes the same function."""
    from harness.agree.report import markdown

    data = json.loads((Path(__file__).parent / "data" / "agree-pin-rev-main.json").read_text())
    a, b = data["arms"]["A"]["describe"], data["arms"]["B"]["describe"]
    assert "/backend/llamacpp-0.3.36-cpu@" in a["binding"] and a["binding"].endswith("/site/harness_llamacpp_cpu")
    assert "site-packages" in b["binding"] and a["cpu_variant"] == b["cpu_variant"]
    data.update(markdown=markdown(data), old="main", report="agree-old-pin")
    assert agreement.summary(data) == (
        "llamacpp 0.3.36 against llamacpp main: mean KLD 0 [0, 0], p99 0, top-1 100.00%, perplexity ratio "
        "1.0000 over 4096 positions; within the pin thresholds")
    md = "\n".join(_old_pin_section(data))
    assert "## Numerical agreement: this pin (B) against the old pin main (A)" in md
    assert "#### Agreement: `llamacpp 0.3.36` against `llamacpp main` (reference)" in md
    assert "4096 positions in 8 windows of 512 tokens of docutils-prose (docutils 0.21.2)" in md
    for row in ("| mean KLD (nats) | 0 | [0, 0] |", "| top-1 agreement | 100.00% | [100.00%, 100.00%] |",
                "| perplexity A | 19.6191 | [16.1315, 24.2889] |",
                "| perplexity ratio B/A | 1.000000 | [1.000000, 1.000000] |"):
        assert row in md
    assert "Thresholds for `pin` (reported only: kld_mean 0.01, top1_min 0.93, ppl_ratio_max 1.01): " \
           "**within the thresholds**" in md


def _old_pin_section(data: dict[str, Any]) -> list[str]:
    from harness.qualify.report import SECTIONS

    return [ln for section in SECTIONS for ln in section("old-pin-agreement", data)]
