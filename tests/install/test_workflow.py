"""The shipped workflow, ``.github/workflows/qualify.yml``, run on this host (the package ``gha``).

- the expression evaluator against the examples and rules of GitHub's expressions reference;
- the runner's mechanics on small workflows (file commands, env, if:, matrix, artifacts,
  checkout of the working tree, setup-python), in seconds;
- the real workflow, ``matrix`` -> one ``qualify`` entry -> ``merge`` (marked slow: minutes);
- a broken copy fails naming job and step; what the runner cannot stand in for is refused
  before any job runs.

The qualify entry runs the real step (``python -m nox -s qualify -- $ARGS --out reports-ci``)
with :data:`CHEAP_ARGS` appended to the entry's own arguments, and the harness cache in
``$GHA_LOCAL_HARNESS_CACHE`` (default ``~/.cache/harness-gha-local``, not the developers'
``~/.cache/harness``): the pinned sdist and the fixture models are fetched once, later runs
reuse them.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.install.conftest import record_time
from tests.install.gha import (
    Event,
    ExpressionError,
    StepFailed,
    WorkflowError,
    WorkflowFailed,
    describe_failure,
    evaluate,
    evaluate_condition,
    evaluate_template,
    expand_matrix,
    parse_file_commands,
    run_workflow,
    validate,
)

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "qualify.yml"
ENGINE = "llamacpp"
#: Appended to the matrix entry's ``ENGINE --variant cpu`` (argparse keeps the last --variant):
#: the metal row cannot build on Linux, so ``harness qualify`` runs fetch, patch, ABI check and
#: models for real, records the build as failed ("no default variant is buildable here: needs macOS"),
#: skips what needs a build (binding, e2e, cross-variant, bench: their minutes), and writes its
#: report; ``--arch none`` leaves out the emulated rows. The entry fails (qualify exits 1), as
#: an entry of an unbuildable row would on GitHub, and its report is still uploaded (``if:
#: always()``) and merged. A passing entry needs a cold cpu build and the e2e suite: ~15+ min.
CHEAP_ARGS = "--variant metal --no-bench --arch none"
#: The stages that run without a build and pass.
CHEAP_STAGES = ("fetch", "patch", "abi-check", "models")


# ====================================================================== the evaluator

CONTEXTS: dict[str, Any] = {
    "github": {"event_name": "push", "ref": "refs/heads/main",
               "event": {"issue": {"labels": [{"name": "bug"}, {"name": "help wanted"}]}}},
    "env": {"continue": "true", "time": "3", "empty": ""},
    "vars": {},
}


def ev(expression: str, **contexts: Any) -> Any:
    return evaluate(expression, {**CONTEXTS, **contexts})


@pytest.mark.parametrize(("expression", "value"), [
    # "Example of literals" in GitHub's expressions reference
    ("null", None), ("false", False), ("711", 711), ("-9.2", -9.2), ("0xff", 255), ("-2.99e-2", -0.0299),
    ("'It''s open source!'", "It's open source!"),
])
def test_literals(expression: str, value: Any) -> None:
    assert ev(expression) == value


def test_literals_as_env_values_render_as_github_writes_them() -> None:
    rendered = {k: evaluate_template(v, CONTEXTS) for k, v in {
        "myNull": "${{ null }}", "myBoolean": "${{ false }}", "myIntegerNumber": "${{ 711 }}",
        "myFloatNumber": "${{ -9.2 }}", "myHexNumber": "${{ 0xff }}", "myString": "Mona the Octocat",
        "myStringInBraces": "${{ 'It''s open source!' }}", "inText": "n=${{ 0xff }} f=${{ false }} z=${{ null }}."}.items()}
    assert rendered["myHexNumber"] == 255 and rendered["myString"] == "Mona the Octocat"
    assert rendered["inText"] == "n=255 f=false z=."  # in a string: numbers in short form, null empty


@pytest.mark.parametrize("expression", ["false", "0", "-0", "''", "null", "NaN", "env.empty", "github.no_such_key"])
def test_falsy(expression: str) -> None:
    assert ev(f"!({expression})") is True
    assert ev(f"{expression} || 'fallback'") == "fallback"


@pytest.mark.parametrize("expression", ["true", "1", "-1", "'false'", "'0'", "' '", "fromJSON('[]')", "fromJSON('{}')",
                                        "github"])
def test_truthy(expression: str) -> None:
    assert ev(f"!({expression})") is False


@pytest.mark.parametrize(("expression", "value"), [
    # different types are coerced to numbers: null 0, true 1, false 0, strings parsed ('' is 0)
    ("null == 0", True), ("true == 1", True), ("false == 0", True), ("'' == 0", True), ("'1' == 1", True),
    ("' 1.5 ' == 1.5", True), ("'0x10' == 16", True), ("'abc' == 0", False), ("'true' == true", False),
    ("null == false", True), ("null == ''", True),
    # NaN equals nothing, itself included
    ("NaN == NaN", False), ("NaN != NaN", True), ("'abc' == NaN", False),
    # strings compare ignoring case
    ("'Octocat' == 'octocat'", True), ("'a' != 'A'", False), ("github.event_name == 'PUSH'", True),
    # arrays and objects: only the same instance
    ("fromJSON('[1]') == fromJSON('[1]')", False), ("github.event == github.event", True),
    ("fromJSON('{}') == 0", False),
    # comparisons: numbers, strings ignoring case, coercion across types, NaN never
    ("1 < 2", True), ("'2' > 1", True), ("'abc' < 'ABD'", True), ("true > false", True), ("'x' < 1", False),
    ("null <= 0", True), ("1.002 > 1.001", True),
])
def test_loose_equality_and_comparison(expression: str, value: bool) -> None:
    assert ev(expression) is value


def test_logical_operators_return_an_operand() -> None:
    # the reference's ternary-like idiom
    idiom = "github.ref == 'refs/heads/main' && 'value_for_main_branch' || 'value_for_other_branches'"
    assert ev(idiom) == "value_for_main_branch"
    assert ev(idiom, github={"ref": "refs/heads/dev"}) == "value_for_other_branches"
    assert ev("'' || null") is None and ev("0 && 'x'") == 0 and ev("'a' && 'b'") == "b"
    assert ev("!(1 == 1) || (2 > 1 && !false)") is True


@pytest.mark.parametrize(("expression", "value"), [
    ("contains('Hello world', 'llo')", True), ("contains('Hello world', 'LLO')", True),
    ("contains(github.event.issue.labels.*.name, 'bug')", True),
    ("contains(fromJSON('[\"push\", \"pull_request\"]'), github.event_name)", True),
    ("contains(fromJSON('[1, 2]'), '2')", True), ("contains(fromJSON('[\"a\"]'), 'b')", False),
    ("startsWith('Hello world', 'He')", True), ("startsWith('Hello world', 'he')", True),
    ("endsWith('Hello world', 'ld')", True), ("endsWith('Hello world', 'He')", False),
    ("format('Hello {0} {1} {2}', 'Mona', 'the', 'Octocat')", "Hello Mona the Octocat"),
    ("format('{{Hello {0} {1} {2}!}}', 'Mona', 'the', 'Octocat')", "{Hello Mona the Octocat!}"),
    ("format('{0} {0} {1}', 1.5, null)", "1.5 1.5 "),
    ("join(github.event.issue.labels.*.name, ', ')", "bug, help wanted"),
    ("join(fromJSON('[\"a\", \"b\", 3]'))", "a,b,3"), ("join('one')", "one"),
    ("toJSON(fromJSON('{\"a\": [1, true, null]}'))", '{\n  "a": [\n    1,\n    true,\n    null\n  ]\n}'),
    ("fromJSON(env.continue)", True), ("fromJSON(env.time)", 3),
    ("fromJSON('{\"include\": [{\"n\": 1}]}').include[0].n", 1),
    ("FROMJSON('[1]')[0]", 1),  # function names ignore case
])
def test_functions(expression: str, value: Any) -> None:
    assert ev(expression) == value


def test_object_filters() -> None:
    fruits = [{"name": "apple", "quantity": 1}, {"name": "orange", "quantity": 2}, {"name": "pear", "quantity": 1}]
    vegetables = {"scallions": {"colors": ["green", "white", "red"], "ediblePortions": ["roots", "stems"]},
                  "beets": {"colors": ["purple", "red"], "ediblePortions": ["roots", "stems", "leaves"]}}
    contexts = {"vars": {"fruits": fruits, "vegetables": vegetables}}
    assert evaluate("vars.fruits.*.name", contexts) == ["apple", "orange", "pear"]
    assert evaluate("vars.vegetables.*.ediblePortions", contexts) == [["roots", "stems"], ["roots", "stems", "leaves"]]
    assert evaluate("contains(vars.vegetables.*.ediblePortions.*, 'leaves')", contexts) is True
    assert evaluate("vars.fruits['0'] || vars.FRUITS[0].NAME", contexts) == "apple"  # names ignore case


def test_a_whole_value_keeps_its_type_and_text_becomes_a_string() -> None:
    matrix = evaluate_template("${{ fromJSON(needs.m.outputs.matrix) }}",
                               {"needs": {"m": {"outputs": {"matrix": '{"include": [{"a": 1}]}'}}}})
    assert matrix == {"include": [{"a": 1}]}
    assert evaluate_template("  ${{ 1 == 1 }} ", {}) is True
    assert evaluate_template("nox -s ${{ 'qualify' }} -- ${{ 1 }}", {}) == "nox -s qualify -- 1"
    with pytest.raises(ExpressionError, match="an array cannot be used as a string"):
        evaluate_template("list: ${{ fromJSON('[1]') }}", {})


def test_conditions_default_to_success() -> None:
    calls: list[str] = []

    def status(name: str) -> bool:
        calls.append(name)
        return name == "always"

    assert evaluate_condition("true", {}, status) is False  # success() && (true): success() is false here
    assert evaluate_condition("always()", {}, status) is True
    assert evaluate_condition("${{ always() && 1 }}", {}, status) is True
    assert evaluate_condition(None, {}, status) is False
    assert calls == ["success", "always", "always", "success"]
    with pytest.raises(ExpressionError, match="mixes text"):
        evaluate_condition("${{ true }} && false", {}, status)
    with pytest.raises(ExpressionError, match=r"only allowed in an if"):
        evaluate("success()", {})


@pytest.mark.parametrize(("expression", "message"), [
    ("hashFiles('**/pyproject.toml')", "unknown function"),
    ("secretz.TOKEN", "unknown context"),
    ('"double quotes"', "strings take single quotes"),
    ("github.ref ==", "expected a literal"),
    ("(1 == 1", "expected ')'"),
    ("github.", "expected a property name"),
    ("format('{0} {1}', 1)", "no argument for '{1}'"),
    ("format('}', 1)", "lone '}'"),
    ("toJSON(1, 2)", "takes 1 argument"),
    ("fromJSON('')", "fromJSON: Expecting value"),
    ("startsWith(github.event, 'x')", "an object cannot be used as a string"),
    ("jobs.x", "the jobs context is not available"),
])
def test_what_the_evaluator_does_not_take_fails_loudly(expression: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=re.escape(message)):
        ev(expression)


def test_matrix_expansion() -> None:
    # the include and exclude examples of GitHub's "Running variations of jobs" reference
    assert expand_matrix({
        "fruit": ["apple", "pear"], "animal": ["cat", "dog"],
        "include": [{"color": "green"}, {"color": "pink", "animal": "cat"}, {"fruit": "apple", "shape": "circle"},
                    {"fruit": "banana"}, {"fruit": "banana", "animal": "cat"}]}) == [
        {"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"},
        {"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"},
        {"fruit": "pear", "animal": "cat", "color": "pink"}, {"fruit": "pear", "animal": "dog", "color": "green"},
        {"fruit": "banana"}, {"fruit": "banana", "animal": "cat"}]
    entries = expand_matrix({"os": ["macos-latest", "windows-latest"], "version": [12, 14, 16],
                             "environment": ["staging", "production"],
                             "exclude": [{"os": "macos-latest", "version": 12, "environment": "production"},
                                         {"os": "windows-latest", "version": 16}]})
    assert len(entries) == 9 and {"os": "windows-latest", "version": 16, "environment": "staging"} not in entries
    # what `harness matrix --ci github` prints: include only, one entry each
    assert expand_matrix({"include": [{"n": 1}, {"n": 2}]}) == [{"n": 1}, {"n": 2}]
    for bad, message in (({"include": []}, "no entries"), ({"os": []}, "non-empty list"), ("x", "must be an object")):
        with pytest.raises(ExpressionError, match=message):
            expand_matrix(bad)


def test_file_commands(tmp_path: Path) -> None:
    f = tmp_path / "output"
    f.write_text("a=1\nb=x=y\n\nmulti<<EOF_1\nline one\n\nline = three\nEOF_1\nempty=\n")
    assert parse_file_commands(f) == {"a": "1", "b": "x=y", "multi": "line one\n\nline = three", "empty": ""}
    f.write_text("key<<EOF\nno end\n")
    with pytest.raises(StepFailed, match="no closing delimiter 'EOF'"):
        parse_file_commands(f)
    f.write_text("just words\n")
    with pytest.raises(StepFailed, match="neither key=value nor key<<DELIMITER"):
        parse_file_commands(f)


# ====================================================================== the runner on small workflows


def quiet(message: str) -> None:
    """Progress lines of the small runs are not worth printing."""


def write_workflow(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "workflow.yml"
    path.write_text(textwrap.dedent(text))
    return path


MECHANICS = """\
    name: mechanics
    on:
      workflow_dispatch:
        inputs:
          greeting: {default: hello}
          loud: {type: boolean, default: false}
    env:
      LEVEL: workflow
      SHARED: workflow
    jobs:
      producer:
        runs-on: ubuntu-24.04
        env:
          SHARED: job
          JOB_ONLY: ${{ inputs.greeting }}-${{ github.event_name }}
        outputs:
          one: ${{ steps.write.outputs.one }}
          multi: ${{ steps.write.outputs.multi }}
          matrix: ${{ steps.write.outputs.matrix }}
          seen: ${{ steps.env.outputs.seen }}
          after: ${{ steps.after.outputs.ran }}
        steps:
          - id: write
            run: |
              echo "one=1" >> "$GITHUB_OUTPUT"
              printf 'multi<<EOF\\nline a\\nline b = c\\nEOF\\n' >> "$GITHUB_OUTPUT"
              echo 'matrix={"include": [{"n": 1, "word": "one"}, {"n": 2, "word": "two"}]}' >> "$GITHUB_OUTPUT"
              echo "EXPORTED=from-github-env" >> "$GITHUB_ENV"
              mkdir -p "$RUNNER_TEMP/bin"
              printf '#!/bin/sh\\necho tool-on-path\\n' > "$RUNNER_TEMP/bin/mytool"
              chmod +x "$RUNNER_TEMP/bin/mytool"
              echo "$RUNNER_TEMP/bin" >> "$GITHUB_PATH"
          - id: env
            env:
              SHARED: step
            run: echo "seen=$LEVEL $SHARED $JOB_ONLY $EXPORTED $(mytool) ${{ env.SHARED }}" >> "$GITHUB_OUTPUT"
          - id: pipefail
            continue-on-error: true
            run: false | true
          - name: never
            if: false
            run: exit 9
          - id: after
            if: steps.pipefail.outcome == 'failure' && steps.pipefail.conclusion == 'success' && !inputs.loud
            run: echo "ran=yes" >> "$GITHUB_OUTPUT"
      fan-out:
        needs: producer
        name: fan-out ${{ matrix.word }}
        runs-on: ubuntu-24.04
        strategy:
          matrix: ${{ fromJSON(needs.producer.outputs.matrix) }}
        outputs:
          word: ${{ steps.w.outputs.word }}
        steps:
          - id: w
            run: |
              test "${{ matrix.n }}" -ge 1
              echo "word=${{ matrix.word }}" >> "$GITHUB_OUTPUT"
      failing:
        needs: producer
        runs-on: ubuntu-24.04
        steps:
          - name: boom
            run: |
              echo "about to fail"
              exit 3
          - name: not reached
            run: exit 0
          - name: cleanup
            if: failure()
            run: echo cleaning
      after-failure:
        needs: failing
        runs-on: ubuntu-24.04
        steps:
          - run: exit 0
      report:
        needs: [failing, fan-out]
        if: always()
        runs-on: ubuntu-24.04
        outputs:
          results: ${{ needs.failing.result }} ${{ needs.fan-out.result }} ${{ needs.fan-out.outputs.word }}
        steps:
          - run: echo ok
    """


def test_outputs_env_conditions_needs_and_matrix(tmp_path: Path) -> None:
    run = run_workflow(write_workflow(tmp_path, MECHANICS), source=ROOT, root=tmp_path / "run", log=quiet)
    producer = run.job("producer")
    assert producer.result == "success", describe_failure(producer)
    assert producer.outputs == {
        "one": "1", "multi": "line a\nline b = c", "matrix": producer.outputs["matrix"],
        # workflow < job < $GITHUB_ENV < step env; $GITHUB_PATH reaches later steps; inputs' defaults
        "seen": "workflow step hello-workflow_dispatch from-github-env tool-on-path step", "after": "yes"}
    assert [(s.name, s.outcome, s.conclusion) for s in producer.steps[2:4]] == [
        ("Run false | true", "failure", "success"), ("never", "skipped", "skipped")]  # pipefail is on
    assert [(r.name, r.result, r.matrix) for r in run.jobs["fan-out"]] == [
        ("fan-out one", "success", {"n": 1, "word": "one"}), ("fan-out two", "success", {"n": 2, "word": "two"})]
    failing = run.job("failing")
    assert [(s.name, s.outcome) for s in failing.steps] == [
        ("boom", "failure"), ("not reached", "skipped"), ("cleanup", "success")]
    assert run.result("after-failure") == "skipped"
    assert run.job("report").outputs == {"results": "failure success two"}
    run.check(expect_failure={"failing": "boom"})
    with pytest.raises(WorkflowFailed) as e:
        run.check()
    assert "job 'failing': failure\n  step 1 'boom' failed: exit code 3" in str(e.value)
    assert "| about to fail" in str(e.value)
    with pytest.raises(WorkflowFailed, match="expected step 'write' to fail, the job ended success"):
        run.check(expect_failure={"failing": "boom", "producer": "write"})


def test_an_expression_that_fails_while_running_fails_its_job(tmp_path: Path) -> None:
    text = MECHANICS.replace('echo \'matrix={"include"', 'echo \'nomatrix={"include"')
    run = run_workflow(write_workflow(tmp_path, text), source=ROOT, root=tmp_path / "run", log=quiet,
                       event=Event(inputs={"loud": True}))
    assert run.job("producer").outputs["after"] == ""  # !inputs.loud: the step was skipped
    fan_out = run.job("fan-out")
    assert fan_out.result == "failure" and fan_out.steps == ()
    assert "fromJSON: Expecting value" in fan_out.error and "''" in fan_out.error


ARTIFACTS = """\
    on: workflow_dispatch
    jobs:
      up:
        runs-on: ubuntu-24.04
        steps:
          - run: |
              mkdir -p out/sub
              echo a > out/a.txt; echo b > out/sub/b.txt; echo h > out/.hidden; echo x > out/skip.log
          - uses: actions/upload-artifact@v4
            with:
              name: part-one
              path: |
                out/
                !out/*.log
              if-no-files-found: error
          - uses: actions/upload-artifact@v4
            with: {name: part-two, path: out/sub/b.txt}
          - id: missing
            continue-on-error: true
            uses: actions/upload-artifact@v4
            with: {name: none, path: nothing-here/, if-no-files-found: error}
          - id: again
            continue-on-error: true
            uses: actions/upload-artifact@v4
            with: {name: part-two, path: out/a.txt}
      down:
        needs: up
        runs-on: ubuntu-24.04
        steps:
          - uses: actions/download-artifact@v4
            with: {pattern: part-*, path: all}
          - uses: actions/download-artifact@v4
            with: {name: part-one, path: one}
          - uses: actions/download-artifact@v4
            with: {name: seeded}
          - run: |
              test -f all/part-one/a.txt && test -f all/part-one/sub/b.txt && test -f all/part-two/b.txt
              test ! -e all/part-one/.hidden && test ! -e all/part-one/skip.log && test ! -e all/seeded
              test -f one/a.txt && test -f from-elsewhere.txt
          - id: absent
            continue-on-error: true
            uses: actions/download-artifact@v4
            with: {name: no-such-artifact}
    """


def test_artifacts(tmp_path: Path) -> None:
    seeded = tmp_path / "seeded"
    seeded.mkdir()
    (seeded / "from-elsewhere.txt").write_text("another host's upload\n")
    run = run_workflow(write_workflow(tmp_path, ARTIFACTS), source=ROOT, root=tmp_path / "run", log=quiet,
                       artifacts={"seeded": seeded})
    run.check()
    up, down = run.job("up"), run.job("down")
    assert "No files were found with the provided path: nothing-here/" in up.step("missing").error
    assert "an artifact named 'part-two' already exists" in up.step("again").error
    assert "Artifact not found: 'no-such-artifact'" in down.step("absent").error
    stored = sorted(str(p.relative_to(run.artifacts)) for p in run.artifacts.rglob("*") if p.is_file())
    assert stored == ["part-one/a.txt", "part-one/sub/b.txt", "part-two/b.txt", "seeded/from-elsewhere.txt"]


def _git(*argv: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *argv], cwd=cwd, check=True,
                   capture_output=True)


def test_checkout_is_the_working_tree_and_setup_python_a_fresh_venv(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", "-b", "main", cwd=repo)
    (repo / "committed.txt").write_text("v1\n")
    (repo / "gone.txt").write_text("deleted in the working tree\n")
    (repo / ".gitignore").write_text("ignored.txt\n")
    _git("add", ".", cwd=repo)
    _git("commit", "-q", "-m", "one", cwd=repo)
    (repo / "committed.txt").write_text("v2, not committed\n")
    (repo / "untracked.txt").write_text("new\n")
    (repo / "ignored.txt").write_text("build state\n")
    (repo / "gone.txt").unlink()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    workflow = write_workflow(tmp_path, f"""\
        on: workflow_dispatch
        jobs:
          check:
            runs-on: ubuntu-24.04
            steps:
              - uses: actions/checkout@v4
              - id: py
                uses: actions/setup-python@v5
                with: {{python-version: "{version}"}}
              - run: |
                  test "$(cat committed.txt)" = "v2, not committed"
                  test "$(cat untracked.txt)" = new
                  test ! -e ignored.txt && test ! -e gone.txt
                  test "$(git rev-list --count HEAD)" = 1
                  test "$(command -v python)" = "$pythonLocation/bin/python"
                  test "$(python -c 'import sys; print(sys.prefix)')" = "$pythonLocation"
                  test "${{{{ steps.py.outputs.python-version }}}}" = "$(python -c 'import platform; print(platform.python_version())')"
        """)
    run = run_workflow(workflow, source=repo, root=tmp_path / "run", log=quiet)
    run.check()
    assert "3 uncommitted changes" in run.job("check").steps[0].tail()


# ====================================================================== refused before any job runs


def test_the_shipped_workflow_is_runnable_here() -> None:
    assert validate(yaml.safe_load(WORKFLOW.read_text())) == ["matrix", "qualify", "merge"]


@pytest.mark.parametrize(("old", "new", "message"), [
    ("      - uses: actions/setup-python@v5\n", "      - uses: actions/cache@v4\n        with: {path: x, key: y}\n"
     "      - uses: actions/setup-python@v5\n", r"jobs.matrix.steps\[1\]: uses: 'actions/cache@v4': no local stand-in"),
    ("actions/checkout@v4", "actions/checkout@v3", "follows actions/checkout@v4/v5, not @v3"),
    ("actions/checkout@v4", "./.github/actions/local", "no local stand-in for this action"),
    ("if-no-files-found: error", "if-no-files-found: error\n          retention: 3",
     r"jobs.qualify.steps\[4\].with \(actions/upload-artifact@v4\): retention not implemented"),
    ("    runs-on: ${{ matrix.runner }}\n", "    runs-on: ${{ matrix.runner }}\n    container: debian:12\n",
     "jobs.qualify: container not implemented"),
    ("ARGS: ${{ matrix.args }}", "ARGS: ${{ hashFiles('**/pyproject.toml') }}",
     r"jobs.qualify.steps\[3\].env.ARGS: unknown function"),
    ("if: always()", "if: alwayz()", r"jobs.qualify.steps\[4\].if: unknown function"),
])
def test_what_the_runner_cannot_stand_in_for_is_refused_before_any_job(tmp_path: Path, old: str, new: str,
                                                                      message: str) -> None:
    text = WORKFLOW.read_text()
    assert old in text
    broken = tmp_path / "qualify.yml"
    broken.write_text(text.replace(old, new, 1))
    with pytest.raises(WorkflowError, match=message):
        run_workflow(broken, source=ROOT, root=tmp_path / "run", log=quiet)
    assert not (tmp_path / "run" / "jobs").exists()


# ====================================================================== the shipped workflow


def progress(message: str) -> None:
    print(f"[gha-local] {message}", flush=True)


def harness_cache() -> Path:
    return Path(os.environ.get("GHA_LOCAL_HARNESS_CACHE") or Path.home() / ".cache" / "harness-gha-local")


def test_a_misspelled_command_fails_the_run_naming_job_and_step(tmp_path: Path) -> None:
    broken = tmp_path / "qualify.yml"
    broken.write_text(WORKFLOW.read_text().replace("- run: python -m pip install", "- run: pyhton -m pip install", 1))
    run = run_workflow(broken, source=ROOT, root=tmp_path / "run", jobs=["matrix"], log=progress)
    with pytest.raises(WorkflowFailed) as e:
        run.check()
    message = str(e.value)
    assert message.startswith("job 'matrix': failure\n  step 3 'Run pyhton -m pip install --disable-pip-version-check .' "
                              "failed: exit code 127"), message
    assert "pyhton: command not found" in message
    assert run.job("matrix").step("matrix").outcome == "skipped"


@pytest.mark.slow
def test_a_misspelled_harness_command_fails_its_own_step(tmp_path: Path) -> None:
    broken = tmp_path / "qualify.yml"
    broken.write_text(WORKFLOW.read_text().replace('harness matrix "${args[@]}"', 'harness matrx "${args[@]}"'))
    run = run_workflow(broken, source=ROOT, root=tmp_path / "run", jobs=["matrix"], log=progress)
    matrix = run.job("matrix")
    if [s.outcome for s in matrix.steps[:3]] != ["success"] * 3:  # not the defect this marks: a plain failure
        pytest.fail(describe_failure(matrix))
    assert matrix.step("matrix").outcome == "failure", matrix.outputs


def reference_reports() -> list[Path]:
    """Committed qualification reports of this pin and patch series: other hosts' artifacts."""
    from harness.qualify.merge import series_hash as report_series
    from harness.source.patches import load_series, series_hash

    pin = yaml.safe_load((ROOT / "engines" / ENGINE / "engine.yaml").read_text())["source"]["version"]
    series = series_hash(load_series(ROOT / "engines" / ENGINE / "patches"))
    found = []
    for f in sorted(ROOT.glob(f"reports/reference-*-qualify-{ENGINE}*/qualify.json")):
        doc = json.loads(f.read_text())
        if doc.get("pin") == pin and report_series(doc) == series:
            found.append(f.parent)
    return found


def one_cheap_entry(job: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This host's entry of the engine, with :data:`CHEAP_ARGS` appended."""
    assert job == "qualify", job
    here = [e for e in entries if e["engine"] == ENGINE and e["os"] == "linux" and e["arch"] == platform.machine()]
    assert len(here) == 1, entries
    return [{**here[0], "args": f"{here[0]['args']} {CHEAP_ARGS}"}]


@pytest.mark.slow
def test_full_run_matrix_then_one_qualify_entry_then_merge(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    references = reference_reports()
    assert references, "no committed reference report of this pin and patch series (reports/reference-*)"
    seeds = {}
    for i, ref in enumerate(references, 1):  # as another host's upload of reports-ci/
        seeds[f"qualify-{ENGINE}-reference-{i}"] = tmp_path / f"seed-{i}"
        shutil.copytree(ref, tmp_path / f"seed-{i}" / ref.name)
    run = run_workflow(WORKFLOW, source=ROOT, root=tmp_path / "run", event=Event(inputs={"engine": ENGINE}),
                       env={"HARNESS_CACHE": str(harness_cache())}, entries=one_cheap_entry, artifacts=seeds,
                       log=progress)
    record_time(pytestconfig, "workflow: whole run", run.seconds)
    for job_id, results in run.jobs.items():
        for r in results:
            record_time(pytestconfig, f"workflow: job {r.name}", r.seconds)
            for s in r.steps:
                record_time(pytestconfig, f"workflow:   {job_id} step {s.number} {s.name[:60]}", s.seconds)

    matrix = run.job("matrix")
    assert matrix.result == "success", describe_failure(matrix)
    entries = matrix.outputs["matrix"] and json.loads(matrix.outputs["matrix"])["include"]
    assert entries, f"`harness matrix` printed no matrix; its step's log:\n{matrix.step('matrix').tail()}"
    assert {e["engine"] for e in entries} == {ENGINE}

    # the entry fails on purpose (CHEAP_ARGS: no buildable row); nothing else may fail
    run.check(expect_failure={"qualify": "nox -s qualify"})
    qualify = run.job("qualify")
    assert qualify.name == f"qualify-{ENGINE}-cpu-linux-{platform.machine()}"
    assert qualify.step("nox").name == f"nox -s qualify -- {ENGINE} --variant cpu {CHEAP_ARGS}"
    assert qualify.workspace is not None
    (report,) = (qualify.workspace / "reports-ci").glob(f"*-qualify-{ENGINE}/qualify.json")
    stages = {s["name"]: s for s in json.loads(report.read_text())["stages"]}
    assert {n: stages[n]["status"] for n in CHEAP_STAGES} == dict.fromkeys(CHEAP_STAGES, "passed"), stages
    assert stages["build"]["status"] == "failed", stages["build"]
    assert "no default variant is buildable here: needs macOS" in stages["build"]["summary"], stages["build"]
    others = {n: s["status"] for n, s in stages.items() if n not in (*CHEAP_STAGES, "build")}
    assert set(others.values()) == {"skipped"}, others
    # uploaded although the step before failed (if: always())
    assert qualify.step("Run actions/upload-artifact@v4").outcome == "success"
    assert (run.artifacts / qualify.name / report.parent.name / "qualify.json").is_file()

    merge = run.job("merge")
    assert merge.result == "success" and merge.workspace is not None
    merged = json.loads((merge.workspace / "merged" / ENGINE / "merged.json").read_text())
    assert len(merged["hosts"]) == 1 + len(references), merged["hosts"]
    assert merged["passed"] is False  # this entry's build stage
    assert merged["differences"], merged  # this entry's build failed where the references' passed
    assert (run.artifacts / "qualify-merged" / ENGINE / "merged.json").is_file()
    shutil.rmtree(qualify.workspace / ".nox", ignore_errors=True)  # the session venv: over a GiB
