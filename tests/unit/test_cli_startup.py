"""Start-up imports only what builds the parser; a missing extra is a typed error, never a traceback."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.core import errors, extras

#: What no `--help` / `--version` may import (extras, or heavy core dependencies a parser needs not).
HEAVY = ("numpy", "scipy", "matplotlib", "clang", "iced_x86", "torch", "starlette", "uvicorn", "gguf",
         "httpx", "jsonschema", "yaml", "ruamel", "rich", "elftools", "imageio_ffmpeg", "harness.bench.stats",
         "harness.build.pipeline", "harness.config.effective")


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((*prefix, name))
                out.extend(_subcommands(sub, (*prefix, name)))
    return out


COMMANDS = _subcommands(cli.build_parser())


def _imported(args: list[str], tmp_path: Path) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "harness", *args], capture_output=True,
                       text=True, cwd=tmp_path, env=env, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}


def test_every_command_is_seen() -> None:
    names = {c[0] for c in COMMANDS}
    assert {"validate", "bench", "serve", "qualify", "build", "matrix", "report"} <= names
    assert ("report", "compare") in COMMANDS and ("config", "show") in COMMANDS


@pytest.mark.parametrize("args", [["--version"], ["--help"], *[[*c, "--help"] for c in COMMANDS]],
                         ids=lambda a: " ".join(a))
def test_help_imports_nothing_heavy(args: list[str], tmp_path: Path) -> None:
    loaded = _imported(args, tmp_path)
    heavy = sorted(m for m in loaded if m in HEAVY or m.split(".")[0] in HEAVY)
    assert not heavy, f"harness {' '.join(args)} imported {heavy}"


def test_missing_extra_is_a_typed_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(extras, "missing", lambda extra: ["scipy"] if extra == "bench" else [])
    code = cli.main(["bench", "--a", "llama-bench:model=m", "--b", "in-process:model=m"])
    err = capsys.readouterr().err
    assert code == errors.HostError.exit_code
    assert "harness bench needs the `bench` extra" in err and "pip install 'harness[bench]'" in err
    assert "Traceback" not in err


def _engines_raising(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """`harness engines` whose handler fails to import ``module``, as an optional import would."""
    def handler(args: argparse.Namespace) -> int:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.choices["engines"].set_defaults(func=handler)


def test_undeclared_optional_import_still_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _engines_raising(monkeypatch, "matplotlib")
    code = cli.main(["engines"])
    err = capsys.readouterr().err
    assert code == errors.HostError.exit_code
    assert "harness engines needs the `bench` extra" in err


def test_a_missing_module_no_extra_provides_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    _engines_raising(monkeypatch, "nonexistent_mod")
    with pytest.raises(ModuleNotFoundError):
        cli.main(["engines"])


def test_extras_come_from_the_installed_metadata() -> None:
    groups = extras.extras()
    assert "scipy" in groups["bench"] and "libclang" in groups["build"] and "starlette" in groups["serve"]
    assert extras.extra_for_module("scipy.special") == "bench"
    assert extras.extra_for_module("clang.cindex") == "build"
    assert extras.import_name("iced-x86") == "iced_x86" and extras.import_name("pyelftools") == "elftools"


def test_build_binding_runs_and_its_old_name_is_gone(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "harness", "build-binding", "--help"], capture_output=True, text=True,
                       cwd=tmp_path, check=False)
    assert r.returncode == 0 and "build + install the binding" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "harness", "build-backend", "--help"], capture_output=True, text=True,
                       cwd=tmp_path, check=False)
    assert r.returncode == 2 and "invalid choice: 'build-backend'" in r.stderr, r.stdout + r.stderr
