"""``harness matrix --ci github`` and the example workflow it drives.

The workflow is checked against the published GitHub workflow schema as check-jsonschema vendors
it from schemastore (``--builtin-schema vendor.github-workflows``: no network).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import cli
from harness.core.errors import ConfigError, UsageError
from harness.qualify.ci_matrix import github_matrix, load_runners

ROOT = Path(__file__).parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "qualify.yml"


def check_workflow(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(path)], capture_output=True, text=True, timeout=120, check=False)


def test_workflow_validates_against_the_github_workflow_schema() -> None:
    r = check_workflow(WORKFLOW)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_schema_check_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "qualify.yml"
    # a job without runs-on, and a strategy with an unknown key
    text = WORKFLOW.read_text().replace("    runs-on: ${{ matrix.runner }}\n", "").replace("fail-fast:", "fail-fastest:")
    broken.write_text(text)
    r = check_workflow(broken)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "qualify" in r.stdout


def test_default_entries_are_the_ci_rows_on_the_listed_runners() -> None:
    m = github_matrix()
    assert m.include, m.notes
    runners = {(r.os, r.arch): r.github for r in load_runners()}
    for e in m.include:
        assert e["variant"] == "cpu"  # the only row marked ci: true
        assert e["runner"] == runners[(e["os"], e["arch"])]
        assert e["session"] == "qualify"
        assert e["args"] == f"{e['engine']} --variant {e['variant']}"
    assert len({e["name"] for e in m.include}) == len(m.include)
    assert {e["engine"] for e in m.include} >= {"llamacpp"}
    assert any("no runner for darwin, windows" in n for n in m.notes)


def test_engine_and_variant_select(tmp_path: Path) -> None:
    m = github_matrix(engine="llamacpp", variant="cpu*")
    assert {(e["engine"], e["variant"]) for e in m.include} == {("llamacpp", "cpu"), ("llamacpp", "cpu-native"),
                                                                ("llamacpp", "cpu-aarch64")}
    cross = [e for e in m.include if e["variant"] == "cpu-aarch64"]
    # built on an x86_64 runner, qualified under emulation by the cpu row's run
    assert [(e["arch"], e["args"]) for e in cross] == [("x86_64", "llamacpp --variant cpu --arch aarch64")]
    with pytest.raises(UsageError, match="no CI entry: llamacpp metal: no runner for darwin"):
        github_matrix(engine="llamacpp", variant="metal")


def _matrix_dir(tmp_path: Path, runners: list[dict[str, Any]]) -> Path:
    d = tmp_path / "matrix"
    d.mkdir(parents=True)
    shutil.copy(ROOT / "matrix" / "variants.yaml", d / "variants.yaml")
    (d / "runners.yaml").write_text(yaml.safe_dump({"runners": runners}))
    return d


def test_self_hosted_labels_and_one_runner_per_os_arch(tmp_path: Path) -> None:
    d = _matrix_dir(tmp_path, [{"os": "linux", "arch": "x86_64", "github": ["self-hosted", "linux", "x64", "amx"]},
                               {"os": "darwin", "arch": "arm64", "github": "macos-15"}])
    m = github_matrix(engine="llamacpp", variant="cpu,metal", directory=d)
    assert [(e["variant"], e["os"], e["runner"]) for e in m.include] == [
        ("cpu", "linux", ["self-hosted", "linux", "x64", "amx"]), ("cpu", "darwin", "macos-15"),
        ("metal", "darwin", "macos-15")]
    d2 = _matrix_dir(tmp_path / "2", [{"os": "linux", "arch": "x86_64", "github": "a"},
                                      {"os": "linux", "arch": "x86_64", "github": "b"}])
    with pytest.raises(ConfigError, match="linux/x86_64 listed twice"):
        load_runners(d2)
    d3 = _matrix_dir(tmp_path / "3", [{"os": "linux", "arch": "x86_64", "github": ""}])
    with pytest.raises(ConfigError, match="runners/0/github"):
        load_runners(d3)


def test_cli_prints_one_line_of_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["matrix", "--ci", "github", "--engine", "llamacpp"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one line: what the workflow appends to $GITHUB_OUTPUT
    assert json.loads(out) == github_matrix(engine="llamacpp").as_strategy()
    assert cli.main(["matrix", "--engine", "llamacpp"]) == 2


def test_matrix_output_drives_the_workflow() -> None:
    wf = yaml.safe_load(WORKFLOW.read_text())
    jobs = wf["jobs"]
    producer = "\n".join(s.get("run", "") for s in jobs["matrix"]["steps"])
    assert 'harness matrix "${args[@]}"' in producer and "args=(--ci github)" in producer
    assert jobs["matrix"]["outputs"]["matrix"] == "${{ steps.matrix.outputs.matrix }}"
    assert jobs["qualify"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"
    # every field the workflow reads from an entry is in every entry harness prints
    used = set(re.findall(r"(?<![.\w])matrix\.(\w+)", WORKFLOW.read_text()))
    assert used >= {"runner", "session", "args", "name"}
    for entry in github_matrix().include:
        assert used <= set(entry), used - set(entry)
    run = next(s["run"] for s in jobs["qualify"]["steps"] if "nox" in s.get("run", "") and "$SESSION" in s["run"])
    assert run == 'python -m nox -s "$SESSION" -- $ARGS --out reports-ci'
    # the nox session hands its posargs to harness qualify, which takes an entry's args
    for entry in github_matrix().include:
        args = cli.build_parser().parse_args(["qualify", *entry["args"].split(), "--out", "reports-ci"])
        assert (args.engine, args.variant, str(args.out)) == (entry["engine"], entry["variant"], "reports-ci")
    assert 'session.run("harness", "qualify", *session.posargs' in (ROOT / "noxfile.py").read_text()
    upload = next(s for s in jobs["qualify"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["path"] == "reports-ci/" and upload["with"]["name"] == "${{ matrix.name }}"
