"""The CLI's grammar, walked over every parser: what ``--help`` prints and what every command accepts.

- every argument and option has a help line;
- rendered help holds no ``%%`` (a description is not %-formatted: ``95%%`` prints as typed), and no
  line wider than the terminal (raw descriptions are wrapped too);
- every repository path a help text names exists;
- the global options (``-q``) are accepted before and after the subcommand;
- a misspelled subcommand gets a "did you mean";
- ``validate -`` reads standard input.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from harness import cli
from harness.core import errors
from tests.unit.test_cli_pipes import harness_command

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 100
#: Parsers whose text lives in a file another change owns right now, with what is left to fix there.
#: The test below fails once such a parser complies: then its entry goes.
PENDING: dict[tuple[str, ...], str] = {
}
_REPO_PATH = re.compile(r"(?<![\w/$<.])((?:tests|scripts|examples|reports|harness|plugins|engines|matrix|abi|patches)"
                        r"/[\w./*-]*)(?![\w<])")


def _parsers() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    return list(cli.iter_parsers(cli.build_parser()))


PARSERS = _parsers()
IDS = [" ".join(path) or "harness" for path, _ in PARSERS]


def _problems(path: tuple[str, ...], parser: argparse.ArgumentParser, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    text = parser.format_help()
    found = [f"{'/'.join(a.option_strings) or a.dest}: no help line" for a in parser._actions
             if not a.help and not isinstance(a, argparse._SubParsersAction)]
    found += [f"'%%' in: {line.strip()}" for line in text.splitlines() if "%%" in line]
    found += [f"{len(line)} columns: {line[:80]}..." for line in text.splitlines() if len(line) > WIDTH]
    for name in _REPO_PATH.findall(text):
        name = name.rstrip(".")
        if not (ROOT / name).exists() and not any(ROOT.glob(name)):
            found.append(f"names {name}, which is not in the repository")
    return found


@pytest.mark.parametrize(("path", "parser"), PARSERS, ids=IDS)
def test_help_follows_the_grammar(path: tuple[str, ...], parser: argparse.ArgumentParser,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    problems = _problems(path, parser, monkeypatch)
    if path in PENDING:
        assert problems, f"harness {' '.join(path)} complies now: drop it from PENDING ({PENDING[path]})"
        return
    assert not problems, "\n".join(problems)


def test_the_walk_sees_every_level() -> None:
    paths = {path for path, _ in PARSERS}
    assert {(), ("validate",), ("report", "compare"), ("config", "show"), ("abi", "diff")} <= paths
    assert set(PENDING) <= paths


@pytest.mark.parametrize("argv", [["-q", "matrix"], ["matrix", "-q"], ["matrix", "--quiet"],
                                  ["-q", "config", "show", "f.yaml"], ["config", "show", "f.yaml", "-q"],
                                  ["report", "compare", "-q", "a", "b"]], ids=" ".join)
def test_global_options_anywhere(argv: list[str]) -> None:
    assert cli.build_parser().parse_args(argv).quiet is True


def test_a_global_option_given_nowhere_stays_off() -> None:
    assert cli.build_parser().parse_args(["config", "show", "f.yaml"]).quiet is False


def test_every_command_takes_the_global_options() -> None:
    lacking = [" ".join(path) for path, p in PARSERS
               if path and not any("--quiet" in a.option_strings for a in p._actions)]
    assert not lacking


@pytest.mark.parametrize(("argv", "hint"), [(["matirx"], "'matrix'"), (["config", "shwo", "f"], "'show'"),
                                            (["reprot", "compare"], "'report'")], ids=" ".join)
def test_did_you_mean_for_a_misspelled_subcommand(argv: list[str], hint: str, tmp_path: Path) -> None:
    r = subprocess.run([*harness_command(), *argv], capture_output=True, text=True, cwd=tmp_path,
                       timeout=60, check=False)
    assert r.returncode == errors.UsageError.exit_code
    assert f"invalid choice: {argv[-2] if len(argv) == 3 else argv[0]!r} (did you mean {hint}?)" in r.stderr
    assert "Traceback" not in r.stderr


def test_validate_reads_standard_input(tmp_path: Path) -> None:
    example = (ROOT / "examples" / "models" / "smollm2-chat.yaml").read_text()
    run = [*harness_command(), "validate"]
    ok = subprocess.run([*run, "-"], input=example, capture_output=True, text=True, cwd=tmp_path,
                        timeout=60, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "1 files, 1 configs: 0 errors" in ok.stderr
    bad = subprocess.run([*run, "-", str(ROOT / "examples" / "models")], capture_output=True, text=True,
                         input="name: m\nparameters: {model: ../x.gguf}\n", cwd=tmp_path, timeout=60, check=False)
    assert bad.returncode == errors.ConfigError.exit_code
    assert bad.stdout.startswith("<stdin>:2:21: LAI002 error: parameters.model '../x.gguf' escapes")
