"""Mistakes a user makes exit with the code the README's table gives their error class.

Each case runs the installed ``harness`` command in a subprocess, as a user or a CI step does.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness import cli
from harness.core import errors, extras
from tests.unit.test_cli_pipes import harness_command

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "models" / "smollm2-chat.yaml"
INVALID = "name: m\nparameters: {model: ../x.gguf}\n"  # a model path that escapes the models dir


def _harness(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*harness_command(), *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=120, check=False)


@pytest.mark.parametrize("command", [["validate"], ["validate", "--json"], ["validate", "--format", "github"],
                                     ["config", "show"], ["config", "show", "--json"], ["select"]],
                         ids=" ".join)
def test_an_invalid_config_is_a_config_error(command: list[str], tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(INVALID)
    r = _harness(*command, f, cwd=tmp_path)
    assert r.returncode == errors.ConfigError.exit_code == 3, r.stdout + r.stderr
    assert "escapes" in r.stdout


def test_strict_validate_fails_a_warning_as_a_config_error(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("name: m\nbackend: llamacpp\nparameters:\n  model: m.gguf\noptions: [blok_size:3]\n")
    assert _harness("validate", f, cwd=tmp_path).returncode == 0
    assert _harness("validate", "--strict", f, cwd=tmp_path).returncode == errors.ConfigError.exit_code


def test_a_valid_config_passes(tmp_path: Path) -> None:
    r = _harness("validate", EXAMPLE, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_missing_config_file(tmp_path: Path) -> None:
    """`config show` reads one named file: its absence is a usage error. `validate` checks many, as a
    linter does: a missing one is a diagnostic among the others' and fails the run as a config error."""
    r = _harness("config", "show", tmp_path / "missing.yaml", cwd=tmp_path)
    assert r.returncode == errors.UsageError.exit_code, r.stdout + r.stderr
    r = _harness("validate", tmp_path / "missing.yaml", EXAMPLE, cwd=tmp_path)
    assert r.returncode == errors.ConfigError.exit_code, r.stdout + r.stderr
    assert r.stdout == f"{tmp_path / 'missing.yaml'}:1:1: HRN016 error: no such file or directory\n"


def test_all_lacks_test_and_the_hint_says_so(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """In an `[all]` venv `harness e2e` lacks pytest: the hint names `harness[all,test]`, not `[all]`."""
    assert {"build", "bench", "video", "serve"} <= extras.in_all() and "test" not in extras.in_all()
    monkeypatch.setattr(extras, "missing", lambda extra: ["pytest"] if extra == "test" else [])
    assert cli.main(["e2e"]) == errors.HostError.exit_code
    err = " ".join(capsys.readouterr().err.split())
    assert "harness e2e needs the `test` extra (pytest not installed)" in err
    assert "'harness[all,test]'" in err and "'harness[all]'" not in err


@pytest.mark.parametrize("after", ["engines/llamacpp/e2e/test_bench_aa.py",
                                   "engines/llamacpp/e2e/test_bench_aa.py::test_aa_run_on_the_binding_arm"])
def test_a_spec_file_after_the_dashes_is_a_usage_error(after: str, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`harness e2e ENGINE -- FILE.py` would run FILE beside each of the engine's spec files (20 times
    over, cachegrind included): refused before any spec runs, with the form that runs it once."""
    import harness.qualify.e2e as e2e

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(e2e, "run_specs", lambda *a, **k: pytest.fail("a spec ran"))
    assert cli.main(["e2e", "llamacpp", "--variant", "cpu", "--", after]) == errors.UsageError.exit_code
    err = " ".join(capsys.readouterr().err.split())
    assert "give spec files before --: harness e2e engines/llamacpp/e2e/test_bench_aa.py" in err


def test_an_extra_within_all_keeps_the_short_hint() -> None:
    assert "'harness[all]'" in str(extras.missing_error("harness bench", "bench", ["scipy"]))
