"""Run the jobs of a GitHub Actions workflow on this host, the way GitHub runs them.

Per job, in ``needs`` order (one fresh "runner" each: workspace, temp and tool directories):

- the job's ``if:`` decides (``success()`` over its ancestors when it names no status
  function), then ``strategy.matrix`` is expanded (axes, ``exclude``, ``include``, or an
  expression such as ``fromJSON(needs.matrix.outputs.matrix)``); a caller may pick and adjust
  the entries to run (``entries=``);
- ``run:`` steps run as ``bash --noprofile --norc -eo pipefail {0}`` (GitHub's default shell) in
  the workspace, with the workflow's, job's and step's ``env`` over GitHub's default variables;
  ``$GITHUB_OUTPUT``, ``$GITHUB_ENV`` and ``$GITHUB_PATH`` are fresh files per step, read back
  after it (``key=value`` lines and ``key<<DELIMITER`` heredocs) into ``steps.<id>.outputs``, the
  environment and ``PATH`` of later steps; a step's ``if:`` defaults to ``success()``;
- ``${{ }}`` is parsed (tokenizer + recursive descent over GitHub's expression grammar) and
  evaluated with GitHub's loose equality, truthiness and functions
  (:func:`.expressions.evaluate`), from the given event, ``vars``, the needed jobs' outputs and
  results, the matrix entry and the earlier steps; the job's ``outputs:`` are evaluated after
  its steps;
- ``uses:`` steps are stood in for by what the action does (:data:`.actions.ACTIONS`): checkout
  is a clone of the source repository with the working tree's uncommitted and untracked (not
  ignored) files laid over it; setup-python a fresh venv of a matching host interpreter put
  first on ``PATH``; upload/download-artifact a directory per artifact name under the run.

Refused loudly, before any job runs (:class:`WorkflowError`): an action without a stand-in (or
a version or input it does not implement), a key the runner does not implement
(``container:``, ``services:``, a reusable workflow), an expression that does not parse or
names an unknown function or context. While running, an expression that cannot be evaluated
(``fromJSON`` of an empty output, an array where a string is needed, a matrix field no entry
has) fails its step or job with the reason, as on GitHub. :meth:`WorkflowRun.check` turns
failures into one error naming each job and step with the tail of the step's log.

Not GitHub: everything runs on this host, one job after another; ``runs-on`` is recorded, not
honoured; nothing is cancelled (``cancelled()`` is false) except the rest of a matrix after a
failure under ``fail-fast``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import IO, Any, TypeAlias

import yaml

from .actions import _action, _git, _inside
from .expressions import (
    ExpressionError,
    StatusFn,
    StepFailed,
    Strict,
    WorkflowError,
    _kind,
    evaluate_condition,
    evaluate_template,
    parse_condition,
    parse_file_commands,
    parse_template,
    to_number,
    to_string,
    truthy,
)

# ---------------------------------------------------------------- validation

_WORKFLOW_KEYS = frozenset({"name", "run-name", "on", "permissions", "env", "defaults", "concurrency", "jobs"})
_JOB_KEYS = frozenset({"name", "needs", "if", "runs-on", "timeout-minutes", "strategy", "env", "outputs", "steps",
                       "permissions", "defaults", "concurrency"})
_STEP_KEYS = frozenset({"id", "name", "if", "uses", "with", "run", "env", "shell", "working-directory",
                        "continue-on-error", "timeout-minutes"})
_STRATEGY_KEYS = frozenset({"matrix", "fail-fast", "max-parallel"})
#: ``shell:`` -> argv before the script file (GitHub's templates for these shells).
SHELLS: dict[str, tuple[str, ...]] = {
    "bash": ("bash", "--noprofile", "--norc", "-eo", "pipefail"), "sh": ("sh", "-e"), "python": ("python",)}


def _walk_strings(value: Any, where: str) -> Iterable[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _walk_strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk_strings(v, f"{where}[{i}]")


def _needs(job: Mapping[str, Any]) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _unknown(keys: Iterable[Any], known: frozenset[str], where: str) -> None:
    extra = sorted(str(k) for k in keys if k not in known)
    if extra:
        msg = f"{where}: {', '.join(extra)} not implemented by this runner (it knows: {', '.join(sorted(known))})"
        raise WorkflowError(msg)


def validate(doc: Mapping[Any, Any]) -> list[str]:
    """Check that this runner can run every job as written; return the job ids in ``needs`` order.

    Raises :class:`WorkflowError` for anything it would otherwise have to guess at."""
    _unknown((k for k in doc if k is not True), _WORKFLOW_KEYS, "workflow")  # YAML 1.1 reads `on:` as True
    jobs = doc.get("jobs")
    if not isinstance(jobs, Mapping) or not jobs:
        msg = "workflow: no jobs"
        raise WorkflowError(msg)
    for where, text in _walk_strings(doc.get("env") or {}, "env"):
        _check_expressions(where, text)
    for job_id, job in jobs.items():
        where = f"jobs.{job_id}"
        if not isinstance(job, Mapping):
            msg = f"{where}: not a mapping"
            raise WorkflowError(msg)
        _unknown(job, _JOB_KEYS, where)
        if "runs-on" not in job or not job.get("steps"):
            msg = f"{where}: runs-on and steps are required"
            raise WorkflowError(msg)
        _unknown(job.get("strategy") or {}, _STRATEGY_KEYS, f"{where}.strategy")
        for dep in _needs(job):
            if dep not in jobs:
                msg = f"{where}.needs: no job {dep!r}"
                raise WorkflowError(msg)
        _check_condition(f"{where}.if", job.get("if"))
        for w, text in _walk_strings({k: v for k, v in job.items() if k not in ("if", "steps")}, where):
            _check_expressions(w, text)
        for i, step in enumerate(job["steps"]):
            _validate_step(step, f"{where}.steps[{i}]", job.get("defaults") or doc.get("defaults") or {})
    return _order(jobs)


def _validate_step(step: Any, where: str, defaults: Mapping[str, Any]) -> None:
    if not isinstance(step, Mapping):
        msg = f"{where}: not a mapping"
        raise WorkflowError(msg)
    _unknown(step, _STEP_KEYS, where)
    if ("run" in step) == ("uses" in step):
        msg = f"{where}: a step has exactly one of run: and uses:"
        raise WorkflowError(msg)
    if "uses" in step:
        action = _action(str(step["uses"]), where)
        _unknown(step.get("with") or {}, action.inputs | action.inert, f"{where}.with ({step['uses']})")
    shell = step.get("shell") or (defaults.get("run") or {}).get("shell") or "bash"
    if shell not in SHELLS:
        msg = f"{where}: shell {shell!r} not implemented (this runner has: {', '.join(SHELLS)})"
        raise WorkflowError(msg)
    _check_condition(f"{where}.if", step.get("if"))
    for w, text in _walk_strings({k: v for k, v in step.items() if k != "if"}, where):
        _check_expressions(w, text)


def _check_expressions(where: str, text: str) -> None:
    try:
        parse_template(text)
    except ExpressionError as e:
        msg = f"{where}: {e}"
        raise ExpressionError(msg) from e


def _check_condition(where: str, condition: Any) -> None:
    try:
        parse_condition(condition)
    except ExpressionError as e:
        msg = f"{where}: {e}"
        raise ExpressionError(msg) from e


def _order(jobs: Mapping[str, Any]) -> list[str]:
    done: list[str] = []
    pending = list(jobs)
    while pending:
        ready = [j for j in pending if all(d in done for d in _needs(jobs[j]))]
        if not ready:
            msg = f"jobs: a needs: cycle among {', '.join(pending)}"
            raise WorkflowError(msg)
        done += ready
        pending = [j for j in pending if j not in ready]
    return done


def expand_matrix(matrix: Any) -> list[dict[str, Any]]:
    """Entries of a ``strategy.matrix``: the product of its axes less ``exclude``; each ``include``
    entry extends the combinations whose axis values it does not change, or is added as its own."""
    if not isinstance(matrix, Mapping):
        msg = f"strategy.matrix must be an object, got {_kind(matrix)}: {str(matrix)[:200]!r}"
        raise ExpressionError(msg)
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    for k, v in axes.items():
        if not isinstance(v, list) or not v:
            msg = f"strategy.matrix.{k} must be a non-empty list"
            raise ExpressionError(msg)
    combos = [dict(zip(axes, values, strict=True)) for values in product(*axes.values())] if axes else []
    excludes = matrix.get("exclude") or []
    combos = [c for c in combos if not any(all(c.get(k) == v for k, v in x.items()) for x in excludes)]
    originals = [dict(c) for c in combos]  # an include matches these only, never an entry another include added
    added: list[dict[str, Any]] = []
    for extra in matrix.get("include") or []:
        matched = False
        for combo, original in zip(combos, originals, strict=True):
            if all(k not in original or original[k] == v for k, v in extra.items()):
                combo.update(extra)
                matched = True
        if not matched:
            added.append(dict(extra))
    combos += added
    if not combos:
        msg = "strategy.matrix has no entries"
        raise ExpressionError(msg)
    return combos


# ====================================================================== results


class WorkflowFailed(AssertionError):
    """Jobs failed; the message names each job and step with the tail of the step's log."""


@dataclass(frozen=True)
class StepResult:
    number: int
    name: str
    id: str | None
    outcome: str
    """success, failure or skipped (before continue-on-error)."""
    conclusion: str
    seconds: float
    log: Path | None
    outputs: Mapping[str, str]
    error: str = ""

    def tail(self, lines: int = 40) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


@dataclass(frozen=True)
class JobResult:
    job: str
    name: str
    result: str
    """success, failure, skipped or cancelled."""
    matrix: Mapping[str, Any] | None
    runs_on: Any
    steps: tuple[StepResult, ...]
    outputs: Mapping[str, str]
    workspace: Path | None
    seconds: float
    error: str = ""
    """A failure outside the steps (strategy or outputs evaluation, a timeout)."""

    def step(self, key: str) -> StepResult:
        """The step with this id, or the first whose name starts with ``key``."""
        found = [s for s in self.steps if s.id == key] or [s for s in self.steps if s.name.startswith(key)]
        if not found:
            msg = f"job {self.job}: no step {key!r} (steps: {', '.join(s.name for s in self.steps)})"
            raise KeyError(msg)
        return found[0]

    @property
    def failed_steps(self) -> list[StepResult]:
        return [s for s in self.steps if s.conclusion == "failure"]


def _aggregate(results: Sequence[JobResult]) -> str:
    """``needs.<job>.result`` of a (matrix) job."""
    kinds = {r.result for r in results}
    for kind in ("failure", "cancelled"):
        if kind in kinds:
            return kind
    return "success" if "success" in kinds else "skipped"


@dataclass(frozen=True)
class WorkflowRun:
    jobs: Mapping[str, tuple[JobResult, ...]]
    """Per job id, one result per matrix entry run (one for a job without a matrix)."""
    artifacts: Path
    seconds: float

    def job(self, job_id: str, entry: int = 0) -> JobResult:
        return self.jobs[job_id][entry]

    def result(self, job_id: str) -> str:
        return _aggregate(self.jobs[job_id])

    def check(self, expect_failure: Mapping[str, str] | None = None) -> None:
        """Raise :class:`WorkflowFailed` naming every failed job and step. ``expect_failure``: job
        id -> the step (id or name prefix) expected to be that job's only failure; it must fail."""
        expected = dict(expect_failure or {})
        problems: list[str] = []
        for job_id, results in self.jobs.items():
            step_key = expected.pop(job_id, None)
            for r in results:
                if r.result in ("success", "skipped"):
                    if step_key is not None:
                        problems.append(f"job {job_id!r} ({r.name}): expected step {step_key!r} to fail, "
                                        f"the job ended {r.result}")
                    continue
                bad = r.failed_steps
                if step_key is not None and not r.error and len(bad) == 1 and step_key in (bad[0].id, bad[0].name[:len(step_key)]):
                    continue
                problems.append(describe_failure(r))
        problems += [f"job {j!r} was expected to fail at {s!r} but did not run" for j, s in expected.items()]
        if problems:
            raise WorkflowFailed("\n\n".join(problems))


def describe_failure(r: JobResult) -> str:
    lines = [f"job {r.job!r}" + (f" ({r.name})" if r.name != r.job else "") + f": {r.result}"
             + (f": {r.error}" if r.error else "")]
    for s in r.failed_steps:
        lines.append(f"  step {s.number} {s.name!r}" + (f" (id {s.id})" if s.id else "") + f" failed: {s.error}")
        if s.tail():
            lines += [f"    | {line}" for line in s.tail().splitlines()]
            lines.append(f"    (log: {s.log})")
    return "\n".join(lines)


# ====================================================================== running


@dataclass(frozen=True, kw_only=True)
class Event:
    """What triggered the run: ``github.event_name``, a workflow_dispatch's ``inputs`` (defaults
    from the workflow fill the rest) and more of the event payload."""

    name: str = "workflow_dispatch"
    inputs: Mapping[str, Any] = field(default_factory=dict)
    payload: Mapping[str, Any] = field(default_factory=dict)


EntryPicker: TypeAlias = Callable[[str, list[dict[str, Any]]], list[dict[str, Any]]]

#: Variables of the calling process a fresh runner does not have (its Python, its harness settings).
_NOT_INHERITED = re.compile(r"(VIRTUAL_ENV|PYTHONHOME|PYTHONPATH|PYTHONSTARTUP|PYTEST_.*|GITHUB_.*|RUNNER_.*|"
                            r"ACTIONS_.*|NOX_.*|CONDA_.*|HARNESS_.*|_)")


def host_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment less what belongs to it rather than to the host (its venv on
    PATH, ``HARNESS_*``, ``GITHUB_*``), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not _NOT_INHERITED.fullmatch(k)}
    own = {str(Path(sys.prefix) / "bin")} if sys.prefix != sys.base_prefix else set()
    if os.environ.get("VIRTUAL_ENV"):
        own.add(str(Path(os.environ["VIRTUAL_ENV"]) / "bin"))
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p not in own)
    env.update(extra or {})
    return env


def _triggers(doc: Mapping[Any, Any]) -> dict[str, Any]:
    on = doc.get("on", doc.get(True))
    if isinstance(on, str):
        return {on: {}}
    if isinstance(on, list):
        return {str(t): {} for t in on}
    return {str(k): v or {} for k, v in (on or {}).items()}


def _inputs(doc: Mapping[Any, Any], event: Event) -> dict[str, Any]:
    """The ``inputs`` context: the event's workflow_dispatch inputs over the declared defaults, typed."""
    triggers = _triggers(doc)
    if event.name not in triggers:
        msg = f"the workflow is not triggered by {event.name} (on: {', '.join(triggers)})"
        raise WorkflowError(msg)
    declared = ((triggers[event.name] or {}).get("inputs") or {}) if event.name == "workflow_dispatch" else {}
    unknown = sorted(set(event.inputs) - set(declared))
    if unknown:
        msg = f"inputs {', '.join(unknown)} are not declared by the workflow's {event.name} (it has: {', '.join(declared) or 'none'})"
        raise WorkflowError(msg)
    values: dict[str, Any] = {}
    for name, spec in declared.items():
        spec = spec or {}
        kind = spec.get("type", "string")
        if name in event.inputs:
            raw = event.inputs[name]
        elif "default" in spec:
            raw = spec["default"]
        elif spec.get("required"):
            msg = f"input {name!r} is required"
            raise WorkflowError(msg)
        else:
            raw = False if kind == "boolean" else ""
        if kind == "boolean":
            values[name] = raw if isinstance(raw, bool) else str(raw).lower() == "true"
        elif kind == "number":
            values[name] = to_number(raw)
        else:
            values[name] = "" if raw is None else str(raw)
            if kind == "choice" and values[name] not in (spec.get("options") or []):
                msg = f"input {name!r}: {values[name]!r} is not one of {spec.get('options')}"
                raise WorkflowError(msg)
    return values


class _Runner:
    """One run of one workflow."""

    def __init__(self, workflow: Path, *, source: Path, root: Path, event: Event, variables: Mapping[str, str],
                 env: Mapping[str, str], entries: EntryPicker | None, log: Callable[[str], None]) -> None:
        self.path = workflow
        self.doc: dict[Any, Any] = yaml.safe_load(workflow.read_text(encoding="utf-8"))
        self.order = validate(self.doc)
        self.inputs = _inputs(self.doc, event)
        self.source = source.resolve()
        self.root = root
        self.artifacts = root / "artifacts"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.event = event
        self.vars = dict(variables)
        self.host_env = host_environment(env)
        self.entries = entries
        self.log = log
        self.repo = source.resolve().name
        self.results: dict[str, tuple[JobResult, ...]] = {}
        branch = subprocess.run(["git", "symbolic-ref", "-q", "--short", "HEAD"], cwd=source, capture_output=True,
                                text=True, check=False).stdout.strip() or "main"
        sha = _git("rev-parse", "HEAD", cwd=source).strip()
        payload: dict[str, Any] = {"repository": {"full_name": f"local/{self.repo}", "name": self.repo},
                                   "ref": f"refs/heads/{branch}", **event.payload}
        if event.name == "workflow_dispatch":
            payload["inputs"] = {k: to_string(v) for k, v in self.inputs.items()}
        self.event_path = root / "event.json"
        self.event_path.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        self.run_id = str(int(time.time()))
        self.github_base: dict[str, Any] = {
            "event_name": event.name, "event": payload, "event_path": str(self.event_path), "sha": sha,
            "ref": f"refs/heads/{branch}", "ref_name": branch, "ref_type": "branch", "head_ref": "", "base_ref": "",
            "repository": f"local/{self.repo}", "repository_owner": "local", "actor": "gha-local",
            "triggering_actor": "gha-local", "workflow": str(self.doc.get("name") or workflow.name),
            "run_id": self.run_id, "run_number": "1", "run_attempt": "1", "server_url": "https://github.com",
            "api_url": "https://api.github.com", "graphql_url": "https://api.github.com/graphql", "token": "",
            "action": "", "retention_days": "90"}
        self.workflow_env = {str(k): v for k, v in (self.doc.get("env") or {}).items()}

    # ------------------------------------------------------------ jobs

    def ancestors(self, job_id: str) -> set[str]:
        found: set[str] = set()
        todo = _needs(self.doc["jobs"][job_id])
        while todo:
            dep = todo.pop()
            if dep not in found:
                found.add(dep)
                todo += _needs(self.doc["jobs"][dep])
        return found

    def needs_context(self, job_id: str) -> Strict:
        needs = Strict(f"needs (jobs.{job_id}.needs)")
        for dep in _needs(self.doc["jobs"][job_id]):
            declared = self.doc["jobs"][dep].get("outputs") or {}
            outputs: dict[str, str] = dict.fromkeys(declared, "")
            for r in self.results[dep]:  # a matrix job's outputs: the last entry that set one wins
                outputs.update({k: v for k, v in r.outputs.items() if v})
            needs[dep] = {"result": _aggregate(self.results[dep]),
                          "outputs": Strict(f"needs.{dep}.outputs (declared in jobs.{dep}.outputs)", outputs)}
        return needs

    def job_status(self, job_id: str) -> StatusFn:
        results = [_aggregate(self.results[a]) for a in self.ancestors(job_id)]

        def status(name: str) -> bool:
            return {"success": all(r == "success" for r in results), "failure": "failure" in results,
                    "cancelled": "cancelled" in results, "always": True}[name]

        return status

    def run(self, only: Sequence[str] | None) -> WorkflowRun:
        start = time.monotonic()
        chosen = [j for j in self.order if only is None or j in only]
        for job_id in chosen:
            missing = sorted(self.ancestors(job_id) - set(chosen))
            if missing:
                msg = f"job {job_id} needs {', '.join(missing)}, which this run leaves out"
                raise WorkflowError(msg)
        for job_id in chosen:
            self.results[job_id] = self.run_job(job_id)
        return WorkflowRun(jobs=dict(self.results), artifacts=self.artifacts, seconds=round(time.monotonic() - start, 1))

    def run_job(self, job_id: str) -> tuple[JobResult, ...]:
        spec = self.doc["jobs"][job_id]
        needs = self.needs_context(job_id)
        contexts: dict[str, Any] = {"github": {**self.github_base, "job": job_id}, "needs": needs, "vars": self.vars,
                                    "inputs": self.inputs}

        def skipped(result: str = "skipped", error: str = "", name: str = job_id) -> JobResult:
            return JobResult(job=job_id, name=name, result=result, matrix=None, runs_on=spec.get("runs-on"), steps=(),
                             outputs={}, workspace=None, seconds=0.0, error=error)

        try:
            if not evaluate_condition(spec.get("if"), contexts, self.job_status(job_id)):
                self.log(f"{job_id}: skipped (if: {spec.get('if', 'success()')})")
                return (skipped(),)
            strategy = spec.get("strategy") or {}
            if "matrix" in strategy:
                m = strategy["matrix"]
                matrix = evaluate_template(m, contexts) if isinstance(m, str) else _evaluate_deep(m, contexts)
                entries = expand_matrix(matrix)
            else:
                entries = []
        except ExpressionError as e:
            self.log(f"{job_id}: failed before its steps: {e}")
            return (skipped("failure", str(e)),)
        if entries and self.entries is not None:
            entries = self.entries(job_id, entries)
            if not entries:
                msg = f"the entry picker chose no entry of {job_id}'s matrix"
                raise WorkflowError(msg)
        fail_fast = truthy(evaluate_template(strategy.get("fail-fast", True), contexts))
        results: list[JobResult] = []
        runs: list[dict[str, Any] | None] = [*entries] or [None]
        for i, entry in enumerate(runs):
            if fail_fast and any(r.result == "failure" for r in results):
                results.append(skipped("cancelled", "fail-fast: an earlier entry failed"))
                continue
            job = _Job(self, job_id, spec, entry, index=i, total=max(len(entries), 1), needs=needs, fail_fast=fail_fast)
            results.append(job.run())
        return tuple(results)


def _evaluate_deep(value: Any, contexts: Mapping[str, Any]) -> Any:
    if isinstance(value, Mapping):
        return {k: _evaluate_deep(v, contexts) for k, v in value.items()}
    if isinstance(value, list):
        return [_evaluate_deep(v, contexts) for v in value]
    return evaluate_template(value, contexts)


def _env_string(value: Any) -> str:
    return to_string(value) if not isinstance(value, str) else value


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "step"


def _run_process(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log: IO[str], timeout: float) -> str:
    """Run a step's process; '' when it succeeded, else why not."""
    log.flush()
    proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = proc.wait(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the step's own process group
        proc.wait()
        return f"timed out after {timeout / 60:.1f} min"
    return "" if rc == 0 else f"exit code {rc}"


class _Job:
    """One job (one matrix entry) on a fresh runner of its own."""

    def __init__(self, runner: _Runner, job_id: str, spec: Mapping[str, Any], entry: Mapping[str, Any] | None, *,
                 index: int, total: int, needs: Strict, fail_fast: bool) -> None:
        self.runner, self.job_id, self.spec = runner, job_id, spec
        self.dir = runner.root / "jobs" / (job_id if entry is None else f"{job_id}-{index + 1}")
        self.workspace = self.dir / "work" / runner.repo / runner.repo
        self.temp, self.tool, self.logs = self.dir / "temp", self.dir / "tool", self.dir / "logs"
        for d in (self.workspace, self.temp, self.tool, self.logs):
            d.mkdir(parents=True, exist_ok=False)
        self.entry = entry
        self.path_prefix: list[str] = []
        self.exported: dict[str, str] = {}
        self.failed = False
        self.steps_ctx = Strict("steps (the steps with an id that ran before this one)")
        arch = {"x86_64": "X64", "aarch64": "ARM64", "arm64": "ARM64"}.get(platform.machine(), platform.machine())
        self.contexts: dict[str, Any] = {
            "github": {**runner.github_base, "job": job_id, "workspace": str(self.workspace)},
            "needs": needs, "vars": runner.vars, "inputs": runner.inputs, "secrets": {},
            "matrix": Strict("matrix (this job's entry)" if entry is not None else "matrix (this job has none)",
                             entry or {}),
            "strategy": {"fail-fast": fail_fast, "job-index": index, "job-total": total, "max-parallel": total},
            "runner": {"os": "Linux", "arch": arch, "name": "gha-local", "environment": "self-hosted",
                       "temp": str(self.temp), "tool_cache": str(self.tool), "debug": ""},
            "steps": self.steps_ctx}
        self.defaults = {
            "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(self.workspace),
            "GITHUB_EVENT_NAME": runner.event.name, "GITHUB_EVENT_PATH": str(runner.event_path),
            "GITHUB_JOB": job_id, "GITHUB_RUN_ID": runner.run_id, "GITHUB_RUN_NUMBER": "1", "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_REPOSITORY": f"local/{runner.repo}", "GITHUB_REPOSITORY_OWNER": "local",
            "GITHUB_SHA": runner.github_base["sha"], "GITHUB_REF": runner.github_base["ref"],
            "GITHUB_REF_NAME": runner.github_base["ref_name"], "GITHUB_REF_TYPE": "branch",
            "GITHUB_SERVER_URL": "https://github.com", "GITHUB_API_URL": "https://api.github.com",
            "GITHUB_ACTOR": "gha-local", "GITHUB_WORKFLOW": runner.github_base["workflow"],
            "RUNNER_OS": "Linux", "RUNNER_ARCH": arch, "RUNNER_NAME": "gha-local",
            "RUNNER_TEMP": str(self.temp), "RUNNER_TOOL_CACHE": str(self.tool)}
        self.env: dict[str, str] = {}

    def env_context(self, step_env: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**self.env, **self.exported, **(step_env or {})}

    def ctx(self, step_env: Mapping[str, str] | None = None) -> dict[str, Any]:
        return {**self.contexts, "env": self.env_context(step_env),
                "job": {"status": "failure" if self.failed else "success"}}

    def step_status(self, name: str) -> bool:
        return {"success": not self.failed, "failure": self.failed, "cancelled": False, "always": True}[name]

    def run(self) -> JobResult:
        start = time.monotonic()
        spec = self.spec
        name, runs_on, error = self.job_id, spec.get("runs-on"), ""
        steps: list[StepResult] = []
        outputs: dict[str, str] = {}
        try:
            self.env = {k: _env_string(evaluate_template(v, {**self.contexts, "env": {}}))
                        for k, v in self.runner.workflow_env.items()}
            self.env.update({str(k): _env_string(evaluate_template(v, {**self.contexts, "env": self.env}))
                             for k, v in (spec.get("env") or {}).items()})
            name = to_string(evaluate_template(spec.get("name", self.job_id), self.ctx()))
            runs_on = evaluate_template(spec.get("runs-on"), self.ctx())
            minutes = to_number(evaluate_template(spec.get("timeout-minutes", 360), self.ctx()))
        except ExpressionError as e:
            error, minutes = str(e), 0.0
        self.runner.log(f"{name}: job {self.job_id} in {self.workspace} (runs-on {runs_on}: run here)")
        deadline = start + minutes * 60
        if not error:
            for i, step in enumerate(spec["steps"]):
                steps.append(self.run_step(i + 1, step, deadline))
            try:
                outputs = {k: to_string(evaluate_template(v, self.ctx())) for k, v in (spec.get("outputs") or {}).items()}
            except ExpressionError as e:
                error = f"outputs: {e}"
            if time.monotonic() > deadline:
                error = f"exceeded timeout-minutes ({minutes:g})"
        result = "failure" if error or self.failed else "success"
        seconds = round(time.monotonic() - start, 1)
        self.runner.log(f"{name}: {result} in {seconds:.1f} s" + (f": {error}" if error else ""))
        return JobResult(job=self.job_id, name=name, result=result, matrix=self.entry, runs_on=runs_on,
                         steps=tuple(steps), outputs=outputs, workspace=self.workspace, seconds=seconds, error=error)

    def process_env(self, step_env: Mapping[str, str], files: Mapping[str, Path]) -> dict[str, str]:
        env = {**self.runner.host_env, **self.env_context(step_env), **self.defaults,
               **{k: str(v) for k, v in files.items()}}
        if self.path_prefix:
            env["PATH"] = os.pathsep.join([*self.path_prefix, env.get("PATH", "")])
        return env

    def run_step(self, number: int, step: Mapping[str, Any], deadline: float) -> StepResult:
        start = time.monotonic()
        step_id = step.get("id")
        name = str(step.get("name") or (f"Run {str(step['run']).strip().splitlines()[0]}" if "run" in step
                                        else f"Run {step['uses']}"))
        outputs: dict[str, str] = {}
        error = ""
        continue_on_error = False
        step_env: dict[str, str] = {}
        ctx = self.ctx()
        minutes = 360.0
        try:
            if not evaluate_condition(step.get("if"), self.ctx(), self.step_status):
                self.runner.log(f"  step {number} {name}: skipped")
                return self.record(StepResult(number, name, step_id, "skipped", "skipped", 0.0, None, {}))
            step_env = {str(k): _env_string(evaluate_template(v, self.ctx())) for k, v in (step.get("env") or {}).items()}
            ctx = self.ctx(step_env)
            if "name" in step:
                name = to_string(evaluate_template(step["name"], ctx))
            continue_on_error = truthy(evaluate_template(step.get("continue-on-error", False), ctx))
            minutes = to_number(evaluate_template(step.get("timeout-minutes", 360), ctx))
        except ExpressionError as e:
            error = str(e)
        log_path = self.logs / f"{number:02d}-{_slug(name)}.log"
        self.runner.log(f"  step {number} {name} ... (log: {log_path})")
        files = {kind: self.temp / f"{kind.lower()}_{number}" for kind in
                 ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY", "GITHUB_STATE")}
        for f in files.values():
            f.write_text("")
        with log_path.open("a", encoding="utf-8") as log:
            try:
                if error:
                    raise StepFailed(error)
                timeout = min(minutes * 60, deadline - time.monotonic())
                env = self.process_env(step_env, files)
                if "run" in step:
                    script = to_string(evaluate_template(step["run"], ctx))
                    error = self.run_script(number, step, script, env, log, timeout)
                else:
                    inputs = {str(k): to_string(evaluate_template(v, ctx)) for k, v in (step.get("with") or {}).items()}
                    action = _action(str(step["uses"]), f"jobs.{self.job_id}.steps[{number - 1}]")
                    outputs.update(action.run(self, inputs, log))
                outputs.update(parse_file_commands(files["GITHUB_OUTPUT"]))
                self.exported.update(parse_file_commands(files["GITHUB_ENV"]))
                added = [p for p in files["GITHUB_PATH"].read_text(encoding="utf-8").splitlines() if p.strip()]
                self.path_prefix[:0] = reversed(added)
            except StepFailed as e:
                error = str(e)
                log.write(f"\n##[error]{error}\n")
            except (ExpressionError, OSError, subprocess.SubprocessError) as e:
                error = f"{type(e).__name__}: {e}"
                log.write(f"\n##[error]{error}\n")
        outcome = "failure" if error else "success"
        conclusion = "success" if continue_on_error else outcome
        if conclusion == "failure":
            self.failed = True
        result = StepResult(number, name, step_id, outcome, conclusion, round(time.monotonic() - start, 1), log_path,
                            outputs, error)
        self.runner.log(f"  step {number} {name}: {outcome} in {result.seconds:.1f} s" + (f" ({error})" if error else ""))
        return self.record(result)

    def record(self, result: StepResult) -> StepResult:
        if result.id:
            self.steps_ctx[result.id] = {"outputs": dict(result.outputs), "outcome": result.outcome,
                                         "conclusion": result.conclusion}
        return result

    def run_script(self, number: int, step: Mapping[str, Any], script: str, env: Mapping[str, str], log: IO[str],
                   timeout: float) -> str:
        defaults = (self.spec.get("defaults") or self.runner.doc.get("defaults") or {}).get("run") or {}
        shell = step.get("shell") or defaults.get("shell") or "bash"
        cwd = _inside(self.workspace, str(evaluate_template(step.get("working-directory")
                                                              or defaults.get("working-directory") or ".", self.ctx())))
        argv = list(SHELLS[shell])
        program = shutil.which(argv[0], path=env.get("PATH"))
        if program is None:
            return f"{argv[0]} not found on PATH"
        path = self.temp / f"step_{number}{'.py' if shell == 'python' else '.sh'}"
        path.write_text(script, encoding="utf-8")
        log.write(f"##[group]Run ({shell} in {cwd})\n" + "".join(f"| {line}\n" for line in script.splitlines())
                  + "##[endgroup]\n")
        return _run_process([program, *argv[1:], str(path)], cwd=cwd, env=env, log=log, timeout=timeout)


def _default_log(message: str) -> None:
    print(f"[gha-local] {message}", file=sys.stderr, flush=True)


def run_workflow(workflow: Path, *, source: Path, root: Path, event: Event | None = None,
                 variables: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
                 entries: EntryPicker | None = None, jobs: Sequence[str] | None = None,
                 artifacts: Mapping[str, Path] | None = None,
                 log: Callable[[str], None] = _default_log) -> WorkflowRun:
    """Run ``workflow``'s jobs (``jobs``: a subset closed under ``needs``) from the repository at
    ``source`` into ``root`` (a new, empty directory: job workspaces, logs and artifacts).

    :param event: what triggered the run (default: workflow_dispatch with the default inputs).
    :param variables: the ``vars`` context (repository variables; unset ones are null).
    :param env: variables every job's processes get on top of this host's (see :func:`host_environment`).
    :param entries: ``entries(job_id, matrix_entries) -> entries to run``, to pick or adjust entries.
    :param artifacts: artifacts present before the run (name -> directory), as if uploaded by
        jobs not run here (another host's matrix entry).
    """
    if root.exists() and any(root.iterdir()):
        msg = f"{root} is not empty: each run gets a fresh directory"
        raise WorkflowError(msg)
    runner = _Runner(workflow, source=source, root=root, event=event or Event(), variables=variables or {},
                     env=env or {}, entries=entries, log=log)
    for name, directory in (artifacts or {}).items():
        shutil.copytree(directory, runner.artifacts / name)
    return runner.run(jobs)
