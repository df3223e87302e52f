"""nox sessions for CI and release engineers.

Default sessions: lint, tests. Others are opt-in (``default=False``):

- ``qualify``: the main job, the whole pipeline on this host with a report.
- ``build-<variant>``: build one matrix row (``build-cuda`` is compile-only and slow).
- ``generate_schema``: regenerate committed JSON Schemas.
- ``generate_settings``: regenerate the README's table of ``HARNESS_*`` variables from ``harness/core/settings.py``.
- ``update_pins``: move an engine pin: ``harness pin ENGINE SOURCE`` (derives provenance, checks before any build).
- ``bench``: pytest-benchmark micro-benchmarks of the harness's own hot paths.
- ``cross-aarch64``: build the cpu-aarch64 row with the cross toolchain and run every ARM CPU level
  under its QEMU CPU model (tiny model, SmolLM2 "Paris", a short llama-bench); the level table.
- ``vulkan``: build the vulkan row and its binding, run its e2e specs on it (tiny model, SmolLM2
  short shape; lavapipe here); spec files in posargs are added (``-- engines/llamacpp/e2e/test_text.py``).
- ``serve-load``: ``harness serve`` under load and abuse at full size with a 10-minute soak (``-- --hour``: an
  hour): requests/s, TTFT and inter-token p50/p99, RSS slope; a leak or an unbounded client fails it.
- ``bench_speculative``: ABBA runs of speculative decoding on SmolLM2 (copy-heavy and free
  generation, speculation off vs on, and n-gram speculation vs the artifact's llama-bench).
- ``localai_corpus``: validate a held-out corpus of real LocalAI model configs (errors fail).
- ``refresh_localai_index``: rewrite harness/config/localai_index.yaml from a LocalAI checkout
  (``-- PATH``) and print the diff.

Posargs pass through to the underlying tool.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = None  # the interpreter nox runs under; the harness needs >= 3.11


def _install(session: nox.Session, extras: str = "test") -> None:
    session.install("-e", f".[{extras}]")


def _mypy(session: nox.Session) -> None:
    """mypy --strict on harness/ and on the plugins as the package they install as (``harness_plugins``:
    plugins/ plus each engines/<name>/plugin/ as harness_plugins.<name>, which the editable finder maps
    and mypy cannot follow): each engine's claims of harness.runtime.contract are checked there."""
    session.run("mypy", "harness")
    tmp = Path(session.create_tmp()) / "mypy-path"
    session.run("mypy", "--strict", "-p", "harness_plugins", env={"MYPYPATH": str(plugins_tree(tmp))})


def plugins_tree(tmp: Path) -> Path:
    """``tmp/harness_plugins/``: links to plugins/'s modules and to each engine's plugin/ package,
    laid out as the installed package (returns ``tmp``, the MYPYPATH entry)."""
    root = Path(__file__).resolve().parent
    pkg = tmp / "harness_plugins"
    if pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    for module in (root / "plugins").glob("*.py"):
        (pkg / module.name).symlink_to(module)
    for plugin in sorted((root / "engines").glob("*/plugin/__init__.py")):
        (pkg / plugin.parent.parent.name).symlink_to(plugin.parent)
    return tmp


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff on everything, mypy --strict on harness/ and the plugins."""
    _install(session, "all,test,lint")
    session.run("ruff", "check", "harness", "plugins", "engines", "tests", "scripts", "noxfile.py", *session.posargs)
    _mypy(session)


def _engines(session: nox.Session, env: dict[str, str], *, default_only: bool = True) -> list[str]:
    """The engines a plugin registers, asked of the harness installed in the session (the registry
    is the one list of engines; descriptor-only engines have no runtime to test). ``default_only``:
    without those whose descriptor leaves them out of the default test command (``tests: default:
    false``, with why: a cold build too slow for it), which ``nox -s engine -- NAME`` runs."""
    out = session.run("harness", "engines", "--json", silent=True, env=env)
    return [e["engine"] for e in json.loads(str(out))
            if e.get("registered") and (e.get("default_tests", True) or not default_only)]


def _prepare_cpu(session: nox.Session, env: dict[str, str], engines: list[str]) -> dict[str, str]:
    """Per engine: fetch -> patch -> ABI check -> build cpu -> binding; then the models.

    Returns the e2e environment. Every stage is stamped: cached runs take seconds.
    """
    for engine in engines:
        session.run("harness", "fetch", engine, env=env)
        session.run("harness", "patch", engine, env=env)
        session.run("harness", "patch", "--check", engine, env=env)
        session.run("harness", "abi", "check", engine, env=env)
        session.run("harness", "build", engine, "--variant", "cpu", env=env)
        session.run("harness", "build-binding", engine, "--variant", "cpu", env=env)
    session.run("harness", "artifacts", env=env)
    session.run("harness", "engine", "info", env=env)
    # the fixtures every run uses, plus those kept for these engines (none for the default test command's)
    session.run("harness", "models", "fetch", *(f"--engine={e}" for e in engines), env=env)
    out = session.run("harness", "models", "env", "--json", silent=True, env=env)
    e2e = dict(env)
    e2e.update(json.loads(str(out)))  # fixtures + what each engine's specs need (the tiny Wan set)
    art = session.run("harness", "artifacts", "--json", silent=True, env=env)
    for a in json.loads(str(art)):
        if a["engine"] == "llamacpp" and a["variant"] == "cpu":
            e2e["HARNESS_ARTIFACT"] = a["path"]
    return e2e


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Lint, unit tests, then the pipeline for cpu (cached after the first run) and the e2e specs on it."""
    _install(session, "all,test,convert,lint")
    session.run("ruff", "check", "harness", "plugins", "engines", "tests", "scripts", "noxfile.py")
    _mypy(session)
    env = {"HARNESS_NO_PROGRESS": "1"}
    session.run("pytest", "-p", "no:cacheprovider", "tests/unit", *session.posargs, env=env)
    # The package as users get it: sdist + wheel built once, the wheel per extra in fresh venvs run
    # from outside the checkout, the pre-commit hook via try-repo, the shipped workflow's jobs.
    session.run("pytest", "-p", "no:cacheprovider", "tests/install", *session.posargs, env=env)
    engines = _engines(session, env)
    e2e = _prepare_cpu(session, env, engines)
    # Every CPU level of every engine's cpu artifacts, audited statically (seconds).
    for engine in engines:
        session.run("harness", "audit", "isa", engine, "--variant", "cpu", env=env)
    # One process per spec file: a crash (SIGILL on some CPU level) names its spec and
    # level, and the other files' results are kept.
    session.run("harness", "e2e", *engines, "--variant", "cpu", "--", *session.posargs, env=e2e)
    if _cross_toolchain_present():
        # The cpu-aarch64 row, every ARM level on the tiny model under qemu-user (the cold cross build
        # is the cost: minutes once; with the stamp and ccache warm, the runs only).
        session.run("harness", "emulate", "llamacpp", "--variant", "cpu-aarch64", "--model", "tiny",
                    "--markdown", env=env)
    else:
        session.log("cpu-aarch64: no cross toolchain (bash scripts/install-system-deps.sh --cross-aarch64): skipped")


@nox.session(python=PYTHON, default=False)
def engine(session: nox.Session) -> None:
    """One engine the test command leaves out (nox -s engine -- vllmcpp): fetch, build cpu, bind, its e2e specs."""
    _install(session, "all,test,convert")
    env = {"HARNESS_NO_PROGRESS": "1"}
    known = _engines(session, env, default_only=False)
    names = [a for a in session.posargs if a in known] or known
    e2e = _prepare_cpu(session, env, names)
    # an engine's specs are its folder's e2e/ (harness e2e takes the engine's name)
    session.run("harness", "e2e", *names, "--variant", "cpu", env=e2e)


def _cross_toolchain_present() -> bool:

    return all(shutil.which(t) for t in ("aarch64-linux-gnu-g++", "clang++-19", "qemu-aarch64-static"))


@nox.session(name="cross-aarch64", python=PYTHON, default=False)
def cross_aarch64(session: nox.Session) -> None:
    """The cpu-aarch64 row: cross build, ABI exports, every ARM level under QEMU (tiny, SmolLM2, llama-bench)."""
    _install(session, "all,test,convert")
    session.run("bash", "scripts/install-system-deps.sh", "--cross-aarch64", external=True)
    env = {"HARNESS_NO_PROGRESS": "1"}
    session.run("harness", "models", "fetch", env=env)
    session.run("harness", "emulate", "llamacpp", "--variant", "cpu-aarch64", "--model", "tiny", "--model", "smollm2",
                "--bench", "smollm2", "--markdown", *session.posargs, env=env)


@nox.session(python=PYTHON, default=False)
def vulkan(session: nox.Session) -> None:
    """The vulkan row on this host's Vulkan device (lavapipe: a CPU one): build, binding, its e2e specs."""
    _install(session, "all,test,convert")
    session.run("bash", "scripts/install-system-deps.sh", "--vulkan", external=True)
    env = {"HARNESS_NO_PROGRESS": "1"}
    session.run("harness", "build", "llamacpp", "--variant", "vulkan", env=env)
    session.run("harness", "build-binding", "llamacpp", "--variant", "vulkan", env=env)
    session.run("harness", "models", "fetch", env=env)
    e2e = dict(env)
    e2e.update(json.loads(str(session.run("harness", "models", "env", "--json", silent=True, env=env))))
    # Forced, the variant runs on a CPU-type device too (the engine lists it for ggml-vulkan). The
    # whole text suite passes on lavapipe as well but takes ~17 min here: name it in posargs to add it,
    # e.g. nox -s vulkan -- engines/llamacpp/e2e/test_text.py
    specs = [a for a in session.posargs if a.endswith(".py")] or []
    rest = [a for a in session.posargs if not a.endswith(".py")]
    session.run("harness", "e2e", "engines/llamacpp/e2e/test_vulkan.py", "engines/llamacpp/e2e/test_placement.py", *specs,
                "--variant", "vulkan", "--", *rest,
                env=e2e)


@nox.session(python=PYTHON, default=False)
@nox.parametrize("variant", ["cpu", "cpu-native", "vulkan", "cuda", "metal", "mlx"])
def build(session: nox.Session, variant: str) -> None:
    """Build one variant of llama.cpp (cuda: compile-only here, well over 10 minutes)."""
    _install(session, "build,test")
    if variant == "cuda":
        session.install("nvidia-cublas>=13,<14")
    if variant == "vulkan":
        # glslc, libvulkan-dev, spirv-headers, lavapipe (Debian); newer headers come from the matrix row.
        session.run("bash", "scripts/install-system-deps.sh", "--vulkan", external=True)
    session.run("harness", "build", "llamacpp", "--variant", variant, *session.posargs)


@nox.session(python=PYTHON, default=False)
def bench_speculative(session: nox.Session) -> None:
    """Speculative decoding benchmarks (SmolLM2, reports/): off vs on for copy and free, and vs llama-bench."""
    _install(session, "all,test")
    env = {"HARNESS_NO_PROGRESS": "1"}
    e2e = _prepare_cpu(session, env, _engines(session, env))
    model, artifact = e2e["HARNESS_MODEL"], e2e["HARNESS_ARTIFACT"]
    spec = "spec_type=ngram-simple,n_draft=8,ngram_n=3"
    common = ["--concurrency", "1,4", "--pn", "512", "--gn", "128", *session.posargs]
    for task in ("copy", "free"):
        session.run("harness", "bench", "--name", f"speculative-{task}",
                    "--a", f"in-process:model={model},task={task},name=off",
                    "--b", f"in-process:model={model},task={task},{spec},name=ngram", *common, env=env)
    session.run("harness", "bench", "--name", "speculative-copy-vs-llama-bench",
                "--a", f"llama-bench:artifact={artifact},model={model},name=llama-bench",
                "--b", f"in-process:model={model},task=copy,{spec},name=ngram",
                "--concurrency", "1", "--pn", "512", "--gn", "128", *session.posargs, env=env)


@nox.session(name="bench-error-rates", python=PYTHON, default=False)
def bench_error_rates(session: nox.Session) -> None:
    """The benchmark of the benchmark: false alarms (A/A) and detections (a real, calibrated 3% slowdown) of
    --fail-on-slower 2 on the bandwidth model, 20 + 20 comparisons (about 45 minutes on 2 cores: run it on a
    quiet host). Arguments after -- go to scripts/bench_error_rates.py (--runs, --blocks, --pn, --gn, ...)."""
    _install(session, "all,test")
    env = {"HARNESS_NO_PROGRESS": "1"}
    e2e = _prepare_cpu(session, env, ["llamacpp"])
    session.run("python", "scripts/bench_error_rates.py", "--model", e2e["HARNESS_BANDWIDTH_MODEL"],
                *session.posargs, env=env)


@nox.session(name="serve-load", python=PYTHON, default=False)
def serve_load(session: nox.Session) -> None:
    """`harness serve` under load and abuse at full size: 256 streaming clients on a 4-slot tiny model, 1,000
    random disconnects, slowloris, slow readers and bodies, malformed input, a 10-minute soak (-- --hour: an
    hour); requests/s, TTFT and inter-token p50/p99, the RSS slope (a leak fails). More after --: --soak-minutes,
    --out (scripts/serve_load.py)."""
    _install(session, "all,test")
    env = {"HARNESS_NO_PROGRESS": "1"}
    e2e = _prepare_cpu(session, env, ["llamacpp"])
    session.run("python", "scripts/serve_load.py", "--model", e2e["HARNESS_TINY_MODEL"],
                *session.posargs, env=env)


@nox.session(python=PYTHON, default=False)
def qualify(session: nox.Session) -> None:
    """The main job: fetch, patch, ABI check, build, e2e, bench, report (posargs: [ENGINE] [--variant PAT] ...)."""
    _install(session, "all,test,convert")
    # posargs reach harness qualify whole: a CI matrix entry's "ENGINE --variant ROW --out DIR";
    # without an engine it qualifies the default text engine (llama.cpp)
    session.run("harness", "qualify", *session.posargs, env={"HARNESS_NO_PROGRESS": "1"})


@nox.session(python=PYTHON, default=False)
def generate_schema(session: nox.Session) -> None:
    """Regenerate the committed model-config JSON Schema from the dataclasses."""
    _install(session)
    session.run("python", "-m", "harness.config.schema", "--write")


@nox.session(python=PYTHON, default=False)
def generate_settings(session: nox.Session) -> None:
    """Regenerate the README's table of HARNESS_* environment variables from harness/core/settings.py."""
    _install(session)
    session.run("python", "scripts/generate_settings_table.py", *session.posargs)


@nox.session(python=PYTHON, default=False)
def update_pins(session: nox.Session) -> None:
    """Move an engine pin: nox -s update_pins -- llamacpp pypi:xllamacpp==2026.10.11549 (harness pin)."""
    _install(session, "build")
    session.run("harness", "pin", *session.posargs)


@nox.session(python=PYTHON, default=False)
def localai_corpus(session: nox.Session) -> None:
    """Validate real LocalAI configs: nox -s localai_corpus -- DIR (or $HARNESS_LOCALAI_CORPUS)."""
    _install(session)
    corpus = session.posargs or [os.environ.get("HARNESS_LOCALAI_CORPUS", "")]
    if not corpus[0]:
        session.error("give the corpus directory: nox -s localai_corpus -- DIR")
    session.run("harness", "validate", *corpus, env={"HARNESS_NO_PROGRESS": "1"})
    session.run("harness", "validate", "tests/data/localai", env={"HARNESS_NO_PROGRESS": "1"})


@nox.session(python=PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """Micro-benchmarks of the harness's own hot paths (pytest-benchmark)."""
    _install(session, "all,test")
    session.run("pytest", "-p", "no:cacheprovider", "tests/bench", "--benchmark-only", *session.posargs,
                env={"HARNESS_NO_PROGRESS": "1", **{k: v for k, v in os.environ.items() if k.startswith("HARNESS_")}})


@nox.session(python=PYTHON, default=False)
def refresh_localai_index(session: nox.Session) -> None:
    """Refresh harness/config/localai_index.yaml from a LocalAI checkout (posargs: its path) and print the diff."""
    session.install("pyyaml")
    session.run("python", "scripts/refresh_localai_index.py", *session.posargs)
