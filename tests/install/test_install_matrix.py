"""Every install profile (core, each extra, all), used the way the README tells users to.

Each profile is one fresh, non-editable venv (made once and reused by all its tests); every
command runs from a directory outside the checkout with no ``HARNESS_ROOT`` or ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from tests.install.conftest import REPO_ROOT, VERSION, check_ok, record_time, run

PROFILES = ("", "build", "bench", "video", "serve", "all")
EXAMPLE = "smollm2-chat.yaml"
#: Nested subcommands the README documents: the --help walk must find at least these.
DOCUMENTED_NESTED = {("abi", "check"), ("config", "show"), ("config", "schema"), ("models", "fetch"),
                     ("report", "compare"), ("video", "check"), ("engine", "info"), ("audit", "isa")}
#: Modules start-up must not import (heavy, or only in an extra).
HEAVY = frozenset({"numpy", "scipy", "matplotlib", "clang", "iced_x86", "torch", "starlette", "gguf"})

UserEnv = Callable[[Path], dict[str, str]]


@pytest.fixture(scope="module", autouse=True)
def _total_time(pytestconfig: pytest.Config) -> Iterator[None]:
    start = time.monotonic()
    yield
    record_time(pytestconfig, "test_install_matrix.py total", time.monotonic() - start)


@pytest.fixture(scope="module", params=PROFILES, ids=[p or "core" for p in PROFILES])
def venv(request: pytest.FixtureRequest, install_venv: Callable[[str], Path]) -> Path:
    """One venv per profile; pytest runs all of a profile's tests before making the next."""
    return install_venv(request.param)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory outside the checkout holding a copy of the example model configs."""
    work = tmp_path_factory.mktemp("user")
    shutil.copytree(REPO_ROOT / "examples" / "models", work / "models")
    return work


def harness(venv: Path, *args: str, env: dict[str, str], cwd: Path | str,
            timeout: float = 120) -> CompletedProcess[str]:
    return run([venv / "bin" / "harness", *args], cwd=cwd, env=env, timeout=timeout)


_CHOICES = re.compile(r"\{([\w,-]+)\} \.\.\.")
_METAVAR = re.compile(r"(?<![\[\w])([A-Z][A-Z_-]*) \.\.\.(?!\])")


def subcommands(help_text: str) -> list[str] | None:
    """The subcommands an argparse --help offers; ``[]`` for a leaf, ``None`` when unparseable.

    Subparsers print as ``{a,b} ...`` in the usage, or, with a metavar, as ``METAVAR ...`` with
    the names listed under ``  METAVAR`` in the positional arguments, one indent deeper.
    """
    usage = help_text.split("\n\n", 1)[0]
    if m := _CHOICES.search(usage):
        return m.group(1).split(",")
    m = _METAVAR.search(usage)
    if not m:
        return []
    lines = help_text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.split() == [m.group(1)]), None)
    if start is None:
        return None
    names: list[str] = []
    indent = None
    for line in lines[start + 1:]:
        depth = len(line) - len(line.lstrip())
        if not line.strip() or depth <= 2 or (indent is not None and depth < indent):
            break
        if indent is None or depth == indent:
            indent = depth
            names.append(line.split()[0])
    return names or None


def walk_help(venv: Path, env: dict[str, str], cwd: str) -> dict[tuple[str, ...], CompletedProcess[str]]:
    """``harness [SUB ...] --help`` for the top level and every subcommand, found recursively."""
    found: dict[tuple[str, ...], CompletedProcess[str]] = {}
    level: list[tuple[str, ...]] = [()]
    with ThreadPoolExecutor(max_workers=2) as pool:  # --help has no side effects: two at a time
        while level:
            procs = list(pool.map(lambda p: harness(venv, *p, "--help", env=env, cwd=cwd), level))
            found.update(zip(level, procs, strict=True))
            level = [(*prefix, name) for prefix, proc in zip(level, procs, strict=True)
                     if proc.returncode == 0 for name in subcommands(proc.stdout) or ()]
    return found


def _failure(proc: CompletedProcess[str]) -> str:
    return f"$ {' '.join(map(str, proc.args[1:]))} -> {proc.returncode}\n" + \
        "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])


def test_installed_copy_is_used(venv: Path, user_env: UserEnv, workdir: Path) -> None:
    """The venv's own harness (not the checkout) runs, with its data from <venv>/share/harness."""
    code = "import harness, harness.core.paths as p; print(harness.__file__); print(p.project_root())"
    out = check_ok(run([venv / "bin" / "python", "-c", code], cwd=workdir, env=user_env(venv)))
    module, root = (Path(line) for line in out.splitlines())
    assert module.resolve().is_relative_to(venv.resolve()), module
    assert root.resolve() == (venv / "share" / "harness").resolve()
    assert (root / "engines").is_dir() and (root / "matrix").is_dir()


def test_version(venv: Path, user_env: UserEnv) -> None:
    out = check_ok(harness(venv, "--version", env=user_env(venv), cwd="/"))
    assert out.strip() == f"harness {VERSION}"


def test_help_of_every_subcommand(venv: Path, user_env: UserEnv) -> None:
    """``--help`` of the top level and of every (nested) subcommand exits 0, from ``/``."""
    found = walk_help(venv, user_env(venv), "/")
    failed = [_failure(p) for p in found.values() if p.returncode != 0 or "Traceback" in p.stdout + p.stderr]
    unparsed = [" ".join(k) for k, p in found.items() if p.returncode == 0 and subcommands(p.stdout) is None]
    assert not failed, "\n\n".join(failed)
    assert not unparsed, f"could not read the subcommands of: {unparsed}"
    for prefix, proc in found.items():
        assert proc.stdout.startswith(" ".join(("usage: harness", *prefix))), proc.stdout[:200]
    assert {("validate",), ("bench",), ("serve",), ("host",), ("matrix",)} <= set(found)
    assert set(DOCUMENTED_NESTED) <= set(found), sorted(DOCUMENTED_NESTED - set(found))


def _json(out: str) -> None:
    json.loads(out)


def _engines_json(out: str) -> None:
    assert "llamacpp" in json.dumps(json.loads(out))


def _ci_github(out: str) -> None:
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    include = json.loads(lines[0])["include"]
    assert isinstance(include, list) and include, lines[0]
    assert {"engine", "variant", "runner"} <= set(include[0]), include[0]


def _schema(out: str) -> None:
    assert "properties" in json.loads(out)


# name -> (arguments, with {models} for the copied examples; a check of stdout or None)
COMMANDS: dict[str, tuple[tuple[str, ...], Callable[[str], None] | None]] = {
    "engines": (("engines",), None),
    "engines-json": (("engines", "--json"), _engines_json),
    "plugins": (("plugins",), None),
    "matrix": (("matrix",), None),
    "matrix-json": (("matrix", "--json"), _json),
    "matrix-ci-github": (("matrix", "--ci", "github"), _ci_github),
    "validate": (("validate", "{models}/"), None),
    "select": (("select", f"{{models}}/{EXAMPLE}"), None),
    "config-show": (("config", "show", f"{{models}}/{EXAMPLE}"), None),
    "config-schema": (("config", "schema"), _schema),
    "host": (("host",), None),
    "host-json": (("host", "--json"), _json),
}


@pytest.mark.parametrize("name", COMMANDS)
def test_command(venv: Path, user_env: UserEnv, workdir: Path, name: str) -> None:
    args, check = COMMANDS[name]
    args = tuple(a.replace("{models}", str(workdir / "models")) for a in args)
    proc = harness(venv, *args, env=user_env(venv), cwd=workdir)
    assert proc.returncode == 0, _failure(proc)
    assert "Traceback" not in proc.stdout + proc.stderr, _failure(proc)
    if check:
        check(proc.stdout)


def test_config_schema_path_is_installed(venv: Path, user_env: UserEnv, workdir: Path) -> None:
    out = check_ok(harness(venv, "config", "schema", "--path", env=user_env(venv), cwd=workdir))
    path = Path(out.strip())
    assert path.is_file(), path
    assert path.resolve().is_relative_to(venv.resolve()), path
    assert "properties" in json.loads(path.read_text(encoding="utf-8"))


# Core install: commands of an extra say which one to install (errors.HostError: exit 4).
NEEDS_EXTRA = {
    "bench": ("bench", ("bench", "--a", "x", "--b", "y")),
    "report-compare": ("bench", ("report", "compare", "a.json", "b.json")),
    "serve": ("serve", ("serve", f"{{models}}/{EXAMPLE}")),
    "audit-isa": ("build", ("audit", "isa", "llamacpp")),
    "abi-check": ("build", ("abi", "check", "llamacpp")),
}


@pytest.mark.parametrize(("extra", "args"), NEEDS_EXTRA.values(), ids=NEEDS_EXTRA)
def test_core_names_the_missing_extra(install_venv: Callable[[str], Path], user_env: UserEnv,
                                      workdir: Path, extra: str, args: tuple[str, ...]) -> None:
    venv = install_venv("")
    args = tuple(a.replace("{models}", str(workdir / "models")) for a in args)
    # A short limit: the check comes before any download or server start.
    proc = harness(venv, *args, env=user_env(venv), cwd=workdir, timeout=60)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, _failure(proc)
    assert f"needs the `{extra}` extra" in out, _failure(proc)
    assert f"pip install 'harness[{extra}]'" in out, _failure(proc)
    assert proc.returncode == 4, _failure(proc)


def imported_modules(importtime_stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output (``import time: self | cumulative | name``)."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


@pytest.mark.parametrize("profile", ["", "all"], ids=["core", "all"])
@pytest.mark.parametrize("argv", [["-c", "import harness"], ["-c", "import harness.cli"],
                                  ["-m", "harness", "--version"]], ids=" ".join)
def test_startup_imports_nothing_heavy(install_venv: Callable[[str], Path], user_env: UserEnv,
                                       workdir: Path, profile: str, argv: list[str]) -> None:
    venv = install_venv(profile)
    proc = run([venv / "bin" / "python", "-X", "importtime", *argv], cwd=workdir, env=user_env(venv))
    check_ok(proc)
    modules = imported_modules(proc.stderr)
    assert "harness" in modules, proc.stderr[-2000:]
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert not heavy, f"python {' '.join(argv)} imports {heavy}"
