"""nox sessions for CI and release engineers.

Default sessions: lint, tests. Others are opt-in (``default=False``):

- ``qualify``: the main job, the whole pipeline on this host with a report.
- ``build-<variant>``: build one matrix row (``build-cuda`` is compile-only and slow).
- ``generate_schema``: regenerate committed JSON Schemas.
- ``update_pins``: move an engine pin (compares before writing).
- ``bench``: pytest-benchmark micro-benchmarks of the harness's own hot paths.

Posargs pass through to the underlying tool.
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = None  # the interpreter nox runs under; the harness needs >= 3.11


def _install(session: nox.Session, extras: str = "test") -> None:
    session.install("-e", f".[{extras}]")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff on everything, mypy --strict on harness/."""
    _install(session, "test,lint")
    session.run("ruff", "check", "harness", "plugins", "tests", "noxfile.py", *session.posargs)
    session.run("mypy", "harness")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit tests, then fetch/patch/build cpu and the tests that need the artifact."""
    _install(session)
    env = {"HARNESS_NO_PROGRESS": "1"}
    session.run("harness", "fetch", "llamacpp", env=env)
    session.run("harness", "patch", "llamacpp", env=env)
    session.run("harness", "patch", "--check", "llamacpp", env=env)
    session.run("harness", "build", "llamacpp", "--variant", "cpu", env=env)
    session.run("harness", "artifacts", env=env)
    env["HARNESS_ARTIFACT"] = session.run(
        "python", "-c", "from harness import paths; print(paths.artifacts_dir() / 'llamacpp-' + "
        "__import__('harness.engines', fromlist=['x']).load_engine('llamacpp').pin + '-cpu')",
        silent=True, env=env).strip()
    session.run("pytest", "-p", "no:cacheprovider", *session.posargs, env=env)


@nox.session(python=PYTHON, default=False)
@nox.parametrize("variant", ["cpu", "cpu-native", "vulkan", "cuda", "metal", "mlx"])
def build(session: nox.Session, variant: str) -> None:
    """Build one variant of llama.cpp (cuda: compile-only here, well over 10 minutes)."""
    _install(session, "test")
    if variant == "cuda":
        session.install("nvidia-cublas>=13,<14")
    session.run("harness", "build", "llamacpp", "--variant", variant, *session.posargs)


@nox.session(python=PYTHON, default=False)
def qualify(session: nox.Session) -> None:
    """The main job: fetch, patch, ABI check, build, e2e, bench, report for the default pin."""
    _install(session)
    session.run("harness", "qualify", "llamacpp", *session.posargs, env={"HARNESS_NO_PROGRESS": "1"})


@nox.session(python=PYTHON, default=False)
def generate_schema(session: nox.Session) -> None:
    """Regenerate the committed model-config JSON Schema from the dataclasses."""
    _install(session)
    session.run("python", "-m", "harness.config.schema", "--write")


@nox.session(python=PYTHON, default=False)
def update_pins(session: nox.Session) -> None:
    """Move an engine pin: nox -s update_pins -- llamacpp 0.3.37 (compares before writing)."""
    _install(session)
    session.run("python", "scripts/update_pins.py", *session.posargs)


@nox.session(python=PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """Micro-benchmarks of the harness's own hot paths (pytest-benchmark)."""
    _install(session)
    session.run("pytest", "-p", "no:cacheprovider", "tests/bench", "--benchmark-only", *session.posargs,
                env={"HARNESS_NO_PROGRESS": "1", **{k: v for k, v in os.environ.items() if k.startswith("HARNESS_")}})
