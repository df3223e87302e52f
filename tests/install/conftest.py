"""The package as users install it: the sdist and wheel built once, fresh venvs per extra.

Run apart from the unit tests: ``pytest -p no:cacheprovider tests/install``. Fixtures:

- ``dist_dir``: the sdist and wheel of the working tree (built from a copy without VCS,
  nox or build state), checked with ``twine check --strict`` and against pyproject.toml and
  setup.py's ``data_files()``.
- ``install_venv(extras)``: a fresh venv with ``pip install "<wheel>[extras]"`` (not editable),
  made once per extras string; ``""`` is the core install.
- ``user_env(venv)``: the environment a user of that venv has: no ``HARNESS_*`` variable but an
  isolated ``HARNESS_CACHE``, no ``PYTHONPATH``, nothing on ``PATH`` inside the checkout.

Times (build, each install) are printed and summed up at the end of the run.
"""

from __future__ import annotations

import configparser
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
VERSION: str = PYPROJECT["project"]["version"]
#: The top-level entries a correct wheel holds and nothing else (no tests/, no stray modules).
WHEEL_TOPS = frozenset({"harness", "harness_plugins", f"harness-{VERSION}.dist-info",
                        f"harness-{VERSION}.data"})
#: Generated or local state that must not reach a build: VCS, nox venvs, earlier build outputs.
_ROOT_STATE = frozenset({".git", ".nox", "build", "dist", ".pytest_cache", ".mypy_cache",
                         ".ruff_cache", ".benchmarks"})

TIMINGS = pytest.StashKey[dict[str, float]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[TIMINGS] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    timings = config.stash.get(TIMINGS, {})
    if timings:
        terminalreporter.section("tests/install timings")
        for what, seconds in timings.items():
            terminalreporter.write_line(f"{seconds:8.1f} s  {what}")


def record_time(config: pytest.Config, what: str, seconds: float) -> None:
    """Keep a timing for the summary at the end of the run (and print it for ``-s``)."""
    config.stash[TIMINGS][what] = seconds
    print(f"{what}: {seconds:.1f} s")


def run(argv: Sequence[str | Path], *, cwd: Path | str, env: dict[str, str] | None = None,
        timeout: float = 600, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and capture its output; never raises on a non-zero exit."""
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, input=stdin, capture_output=True,
                          text=True, timeout=timeout, check=False)


def check_ok(proc: subprocess.CompletedProcess[str]) -> str:
    """``proc``'s stdout, or a test failure showing the command, its exit code and output tail."""
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        pytest.fail(f"{' '.join(map(str, proc.args))} exited {proc.returncode}:\n{tail}", pytrace=False)
    return proc.stdout


def _without_checkout(path_var: str) -> str:
    return os.pathsep.join(p for p in path_var.split(os.pathsep)
                           if p and not Path(p).resolve().is_relative_to(REPO_ROOT))


def clean_env(**extra: str) -> dict[str, str]:
    """``os.environ`` without anything that points a process at the checkout."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("HARNESS_")}
    env["PATH"] = _without_checkout(env.get("PATH", ""))
    env.update(extra)
    return env


def _ignore_state(directory: str, names: list[str]) -> set[str]:
    top = Path(directory).resolve() == REPO_ROOT
    return {n for n in names if (top and n in _ROOT_STATE) or n == "__pycache__"
            or n.endswith((".pyc", ".egg-info"))}


def _setup_module(src: Path) -> Any:
    spec = importlib.util.spec_from_file_location("harness_setup_under_test", src / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_data_files(src: Path) -> list[tuple[str, list[str]]]:
    module = _setup_module(src)
    with contextlib.chdir(src):  # data_files() walks paths relative to the project
        listed: list[tuple[str, list[str]]] = module.data_files()
    return listed


def _setup_packages(src: Path) -> tuple[list[str], dict[str, str]]:
    """(packages, package_dir) as setup.py finds them in ``src``."""
    module = _setup_module(src)
    with contextlib.chdir(src):
        found: tuple[list[str], dict[str, str]] = module.packages()
    return found


def _package_sources(src: Path) -> dict[str, Path]:
    """Every package setuptools is told to ship -> its directory in ``src`` (the longest package_dir
    prefix maps it: ``harness_plugins.llamacpp`` -> ``engines/llamacpp/plugin``)."""
    packages, package_dir = _setup_packages(src)
    out = {}
    for package in packages:
        parts = package.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in package_dir:
                out[package] = src / package_dir[".".join(parts[:n])] / Path(*parts[n:])
                break
        else:
            out[package] = src / Path(*parts)
    return out


def _unlisted_packages(src: Path, listed: Iterable[Path]) -> list[str]:
    """Directories with an ``__init__.py`` under a shipped root that setup.py's ``packages()`` leaves out."""
    listed = set(listed)
    roots = {src / d for d in _setup_packages(src)[1].values()}
    return sorted(str(init.parent.relative_to(src)) for root in roots for init in root.rglob("__init__.py")
                  if init.parent not in listed)


def check_wheel(wheel: Path, src: Path) -> None:
    """The wheel holds the packages, their data, the data trees and the entry point; nothing else."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = zf.read(f"harness-{VERSION}.dist-info/entry_points.txt").decode()
    tops = {n.split("/")[0] for n in names}
    assert tops == WHEEL_TOPS, f"wheel top-level entries {sorted(tops)}, expected {sorted(WHEEL_TOPS)}"
    stray = sorted(n for n in names if n.startswith("tests/") or "/tests/" in n or ".nox" in n.split("/")
                   or "__pycache__" in n.split("/") or n.endswith((".pyc", ".pyo")))
    assert not stray, f"the wheel ships build or test state: {stray}"

    packages = _package_sources(src)
    missing = [f"{p.replace('.', '/')}/{py.name}" for p, d in packages.items() for py in d.glob("*.py")
               if f"{p.replace('.', '/')}/{py.name}" not in names]
    missing += [f"{p.replace('.', '/')}/__init__.py" for p in packages
                if f"{p.replace('.', '/')}/__init__.py" not in names]
    assert not missing, f"modules missing from the wheel: {missing}"
    unlisted = _unlisted_packages(src, packages.values())
    assert not unlisted, f"packages not listed in [tool.setuptools] packages (not shipped): {unlisted}"

    for key, patterns in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        # "*": every package's own matching files (none may be left out of the wheel)
        for package in packages if key == "*" else [key]:
            found = sorted(f for pattern in patterns for f in packages[package].glob(pattern))
            assert found or key == "*", f"package-data {package}: {patterns!r} matches no file"
            for f in found:
                member = f"{package.replace('.', '/')}/{f.relative_to(packages[package]).as_posix()}"
                assert member in names, f"package data missing from the wheel: {member}"
    assert any(n.startswith("harness/schemas/") and n.endswith(".json") for n in names)

    data_prefix = f"harness-{VERSION}.data/data/"
    expected = {f"{data_prefix}{dest}/{Path(f).name}" for dest, files in _load_data_files(src) for f in files}
    shipped = {n for n in names if n.startswith(data_prefix) and not n.endswith("/")}
    assert shipped == expected, (f"data files: missing {sorted(expected - shipped)}, "
                                 f"unexpected {sorted(shipped - expected)}")
    for tree in ("engines", "matrix", "engines/llamacpp/patches", "engines/llamacpp/abi", "engines/llamacpp/e2e"):
        assert any(n.startswith(f"{data_prefix}share/harness/{tree}/") for n in shipped), tree

    scripts = configparser.ConfigParser()
    scripts.read_string(entry_points)
    assert scripts.get("console_scripts", "harness", fallback=None) == "harness.cli:main", entry_points


def check_sdist(sdist: Path, src: Path) -> None:
    """The sdist can rebuild the wheel: build files, every data file, no VCS or build state."""
    with tarfile.open(sdist) as tf:
        names = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    for need in ("pyproject.toml", "setup.py", "README.md"):
        assert need in names, need
    data = {f.replace(os.sep, "/") for _, files in _load_data_files(src) for f in files}
    assert not data - names, f"data files missing from the sdist: {sorted(data - names)}"
    stray = sorted(n for n in names if n.split("/")[0] in _ROOT_STATE or "__pycache__" in n.split("/"))
    assert not stray, f"the sdist ships VCS or build state: {stray}"


@pytest.fixture(scope="session")
def dist_dir(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Path:
    """The working tree's sdist and wheel, built once per session and checked."""
    src = tmp_path_factory.mktemp("src") / "harness"
    shutil.copytree(REPO_ROOT, src, ignore=_ignore_state, symlinks=True)
    out = tmp_path_factory.mktemp("dist")
    start = time.monotonic()
    check_ok(run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", out, src],
                 cwd=src, env=clean_env()))
    record_time(pytestconfig, "build sdist + wheel", time.monotonic() - start)
    (wheel,) = out.glob(f"harness-{VERSION}-*.whl")
    (sdist,) = out.glob(f"harness-{VERSION}.tar.gz")
    check_ok(run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel], cwd=out))
    check_wheel(wheel, src)
    check_sdist(sdist, src)
    return out


@pytest.fixture(scope="session")
def install_venv(dist_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                 pytestconfig: pytest.Config) -> Iterator[Callable[[str], Path]]:
    """``install_venv("bench,serve")`` -> a fresh venv with the wheel and those extras (once each).

    The venvs (about a GB together) are removed at the end of the session rather than left
    in pytest's temporary dirs for a later run to delete.
    """
    (wheel,) = dist_dir.glob("*.whl")
    root = tmp_path_factory.mktemp("venvs")
    made: dict[str, Path] = {}

    def make(extras: str) -> Path:
        if extras not in made:
            venv = root / (extras.replace(",", "+") or "core")
            start = time.monotonic()
            check_ok(run([sys.executable, "-m", "venv", venv], cwd=root, env=clean_env()))
            requirement = f"{wheel}[{extras}]" if extras else str(wheel)
            # pip's own cache stays on: a warm run installs from it.
            check_ok(run([venv / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check",
                          requirement], cwd=root, env=clean_env()))
            record_time(pytestconfig, f"venv + pip install harness[{extras or 'core only'}]",
                        time.monotonic() - start)
            made[extras] = venv
        return made[extras]

    yield make
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], dict[str, str]]:
    """``user_env(venv)`` -> the environment of a user who activated ``venv``."""
    cache = tmp_path_factory.mktemp("harness-cache")

    def env(venv: Path) -> dict[str, str]:
        base = clean_env(VIRTUAL_ENV=str(venv), HARNESS_CACHE=str(cache))
        base["PATH"] = os.pathsep.join((str(venv / "bin"), base["PATH"]))
        return base

    return env
