"""``harness completion bash``: the generated script completes commands, choices and paths in a real bash."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.cli import build_parser, iter_parsers
from tests.unit.test_cli_pipes import harness_command

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here to load the script into")

COMPLETE = """
source "$1"
shift
COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
_shtab_harness
printf '%s\\n' "${COMPREPLY[@]}"
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("completion") / "harness.bash"
    r = subprocess.run([*harness_command(), "completion", "bash"], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 0, r.stderr
    out.write_text(r.stdout)
    return out


def _complete(script: Path, *words: str, cwd: Path | None = None) -> list[str]:
    r = subprocess.run(["bash", "-c", COMPLETE, "complete", str(script), "harness", *words], capture_output=True,
                       text=True, timeout=30, cwd=cwd, check=False)
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if line]


def test_every_command_completes(script: Path) -> None:
    top = {path[0] for path, _ in iter_parsers(build_parser()) if len(path) == 1}
    assert set(_complete(script, "")) >= top
    assert _complete(script, "mat") == ["matrix"]


def test_nested_commands_options_and_choices(script: Path) -> None:
    assert _complete(script, "config", "sh") == ["show"]
    assert _complete(script, "validate", "--for") == ["--format"]
    assert _complete(script, "validate", "--format", "") == ["text", "json", "github"]
    assert "--quiet" in _complete(script, "matrix", "--")


def test_files_complete_where_a_file_is_read(script: Path, tmp_path: Path) -> None:
    (tmp_path / "chat.yaml").write_text("name: m\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "mo.txt").write_text("")
    assert _complete(script, "config", "show", "ch", cwd=tmp_path) == ["chat.yaml"]
    assert _complete(script, "validate", "--models-dir", "mo", cwd=tmp_path) == ["models"]  # directories only
