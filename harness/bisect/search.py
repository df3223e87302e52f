"""The search: ``git bisect run`` over a bare clone, each step a probe, every probe stamped.

State dir ``<cache>/bisect/<key>/`` (the key hashes the engine, the repository, both endpoints, the
gate, the options and the CPU level):

- ``repo.git``: a bare clone of the repository (hard links for a local one); git's bisect refs live
  there (``git bisect start`` in a bare repository never checks anything out);
- ``bisect.json``: what the search is (the step processes read it);
- ``steps/<commit>.json``: each probed commit's verdict (good, bad, skip), its figure, its build; a
  commit is never probed twice, so running the same command again resumes a stopped search, and a
  finished one answers at once;
- ``bisect.log``: ``git bisect log`` of the last run (``git bisect replay`` reads it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from harness.bisect import gates, probe
from harness.core import paths, progress
from harness.core.errors import BisectError, HarnessError, SubprocessError, UsageError
from harness.core.types import EngineSpec

#: ``git bisect run``'s answers.
GOOD, BAD, SKIP, ABORT = 0, 1, 125, 128


def _git(repo: Path, *args: str, check: bool = True) -> str:
    argv = ["git", "-C", str(repo), *args]
    r = subprocess.run(argv, capture_output=True, text=True, check=False,
                       env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    if check and r.returncode:
        raise SubprocessError(argv, r.returncode, r.stdout + r.stderr)
    return r.stdout.strip()


@dataclass(frozen=True, kw_only=True)
class Config:
    """What one search is: written to ``bisect.json`` for the step processes."""

    engine: str
    url: str
    good: str
    bad: str
    gate: str
    options: dict[str, Any]
    level: str
    patches: bool = True
    sim_shape: str | None = None
    filter: str = ""
    sparse: tuple[str, ...] = ()

    def key(self) -> str:
        blob = json.dumps(self.as_dict(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "url": self.url, "good": self.good, "bad": self.bad, "gate": self.gate,
                "options": self.options, "level": self.level, "patches": self.patches, "sim_shape": self.sim_shape,
                "filter": self.filter, "sparse": list(self.sparse)}

    @classmethod
    def load(cls, state: Path) -> Config:
        data = json.loads(_own(state / "bisect.json"))
        return cls(**{**data, "sparse": tuple(data.get("sparse", ()))})


@dataclass(frozen=True, kw_only=True)
class Step:
    commit: str
    subject: str
    verdict: str
    """good, bad or skip."""
    text: str
    figure: float | None = None
    build: dict[str, Any] | None = None
    outcome: dict[str, Any] | None = None
    seconds: float = 0.0
    reused: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "subject": self.subject, "verdict": self.verdict, "text": self.text,
                "figure": self.figure, "build": self.build, "outcome": self.outcome, "seconds": round(self.seconds, 1),
                "reused": self.reused}

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, reused: bool = False) -> Step:
        return cls(**{**{k: d[k] for k in ("commit", "subject", "verdict", "text", "figure", "build", "outcome",
                                           "seconds")}, "reused": reused})


@dataclass(frozen=True, kw_only=True)
class Result:
    config: Config
    state: Path
    first_bad: str | None
    """The first bad commit; None when skipped commits leave several (``candidates``)."""
    candidates: tuple[str, ...]
    subject: str
    commits: int
    """Commits in good..bad (what the search chose among)."""
    good: Step
    bad: Step
    steps: tuple[Step, ...]
    """The commits git chose, in order (endpoints apart)."""
    seconds: float
    reproduce: tuple[str, ...] = ()
    skipped: tuple[Step, ...] = field(default=())

    @property
    def builds(self) -> int:
        """Builds made by this run (a stamped probe reused is not one)."""
        return sum(1 for s in (self.good, self.bad, *self.steps) if s.build and s.build.get("built") and not s.reused)

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.config.engine, "repository": self.config.url, "gate": self.config.gate,
                "level": self.config.level, "patches": self.config.patches, "good": self.good.as_dict(),
                "bad": self.bad.as_dict(), "commits": self.commits, "first_bad": self.first_bad,
                "subject": self.subject, "candidates": list(self.candidates),
                "steps": [s.as_dict() for s in self.steps], "skipped": [s.as_dict() for s in self.skipped],
                "probes": len(self.steps), "builds": self.builds, "seconds": round(self.seconds, 1),
                "state": str(self.state), "reproduce": list(self.reproduce)}


def _own(path: Path) -> str:
    """A file of the bisect's state dir: written by this module (the search's config, its stamps, git's log)."""
    return path.read_text()


def mirror_path(url: str) -> Path:
    """The bisect's own bare clone of ``url``, which every probe's checkout fetches from."""
    return paths.cache_root() / "bisect" / "repos" / hashlib.sha256(url.encode()).hexdigest()[:16]


def state_dir(config: Config) -> Path:
    return paths.cache_root() / "bisect" / f"{config.engine}-{config.key()}"


def _mirror(url: str, dest: Path) -> Path:
    """A bare clone of ``url`` at ``dest`` (made once; fetched again when a revision is missing)."""
    if not (dest / "HEAD").is_file():
        progress.info(f"cloning {url} (bare) for the bisect")
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        r = subprocess.run(["git", "clone", "--bare", "--quiet", "--", url, str(tmp)], capture_output=True, text=True,
                           check=False, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
        if r.returncode:
            msg = f"could not clone {url} for the bisect: {r.stderr.strip()[-500:]}; --repo takes a git URL or a local repository"
            raise UsageError(msg)
        os.replace(tmp, dest)
    return dest


def resolve(repo: Path, rev: str, *, what: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        msg = f"{what} {rev!r} is not a commit of the repository being bisected ({repo}); give a tag, branch or commit of it"
        raise UsageError(msg)
    return out.stdout.strip()


def subject(repo: Path, commit: str) -> str:
    return _git(repo, "log", "-1", "--format=%s", commit, check=False)


def prepare(engine: EngineSpec, *, good: str, bad: str, gate: gates.Gate, repo_url: str | None,
            options: dict[str, Any], patches: bool, sim_shape: str | None, filter: str = "",
            sparse: tuple[str, ...] = ()) -> tuple[Config, Path]:
    """The search's config and state dir: the repository cloned, both endpoints resolved and ordered."""
    url = repo_url or (engine.source.url if engine.source.kind == "git" else "")
    if not url:
        msg = (f"the {engine.name} engine's source is {engine.source.kind}, not git: name the repository to bisect "
               "with --repo URL (a git URL, or a local clone or mirror)")
        raise UsageError(msg)
    if os.path.isdir(url):
        url = str(Path(url).resolve())
    level = probe.probe_level()
    if gate.kind == "speed":
        gates.speed_kind(engine.name)  # refuses an engine without a benchmark tool before any clone
    probe.level_defines(engine, level)  # and one whose descriptor cannot build a single level
    if engine.source.kind == "git" and not repo_url:
        filter, sparse = filter or engine.source.filter, sparse or engine.source.sparse
    pre = Config(engine=engine.name, url=url, good=good, bad=bad, gate=gate.text, options=options, level=level,
                 patches=patches, sim_shape=sim_shape, filter=filter, sparse=tuple(sparse))
    mirror_path(url).parent.mkdir(parents=True, exist_ok=True)
    repo = _mirror(url, mirror_path(url))
    # each probe's checkout fetches from this clone: with a partial-clone filter it must honour it (a
    # mirror without its large blobs cannot send them)
    _git(repo, "config", "uploadpack.allowFilter", "true")
    g, b = resolve(repo, good, what="--good"), resolve(repo, bad, what="--bad")
    if g == b:
        raise UsageError(f"--good and --bad are one commit ({g[:12]}): nothing to bisect")
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", g, b], check=False).returncode:
        msg = (f"--good {good} ({g[:12]}) is not an ancestor of --bad {bad} ({b[:12]}): a bisect looks for the first "
               "bad commit after a good one; swap them, or name a good commit the bad one descends from")
        raise UsageError(msg)
    config = dataclasses.replace(pre, good=g, bad=b)
    state = state_dir(config)
    (state / "steps").mkdir(parents=True, exist_ok=True)
    (state / "bisect.json").write_text(json.dumps(config.as_dict(), indent=2) + "\n")
    work = state / "repo.git"
    if not (work / "HEAD").is_file():
        # its own clone (hard links): git's bisect refs of one search never meet another's
        r = subprocess.run(["git", "clone", "--bare", "--quiet", "--", str(repo), str(work)], capture_output=True,
                           text=True, check=False)
        if r.returncode:
            raise SubprocessError(["git", "clone", "--bare", str(repo), str(work)], r.returncode, r.stderr)
    return config, state


def probe_commit(state: Path, config: Config, commit: str) -> Step:
    """The verdict on ``commit``: from its stamp, else built and gated against the good build."""
    stamp = state / "steps" / f"{commit}.json"
    if stamp.is_file():
        return Step.from_dict(json.loads(_own(stamp)), reused=True)
    from harness.engine.descriptor import load_engine

    t0 = time.perf_counter()
    engine = load_engine(config.engine)
    gate = gates.Gate.parse(config.gate)
    repo = state / "repo.git"
    subj = subject(repo, commit)
    spec = probe.probe_spec(engine, url=mirror_path(config.url).as_uri(), commit=commit, gate_kind=gate.kind, filter=config.filter,
                            sparse=config.sparse)
    progress.info(f"probe {commit[:12]} {subj[:70]}")
    try:
        built = probe.build(spec, level=config.level, gate_kind=gate.kind, patches=config.patches)
    except probe.Unbuildable as e:
        step = Step(commit=commit, subject=subj, verdict="skip", text=f"skipped: {e}", seconds=time.perf_counter() - t0)
        _write(stamp, step)
        return step
    if commit == config.good:
        step = Step(commit=commit, subject=subj, verdict="good", text="the good build: the reference",
                    figure=1.0 if gate.kind == "speed" else None, build=built.as_dict(),
                    seconds=time.perf_counter() - t0)
        _write(stamp, step)
        return step
    good = probe_commit(state, config, config.good)
    if good.verdict != "good" or not good.build:
        msg = f"the good commit {config.good[:12]} cannot be built: {good.text}; choose another --good"
        raise BisectError(msg)
    outcome = gates.evaluate(gate, config.engine, Path(good.build["artifact"]), built.artifact, options=config.options,
                             workdir=state / "runs" / commit[:12], sim_shape=config.sim_shape)
    verdict = "good" if outcome.passed else "bad" if outcome.passed is False else "skip"
    text = outcome.text if outcome.passed is not None else f"skipped: the gate did not decide ({outcome.text})"
    step = Step(commit=commit, subject=subj, verdict=verdict, text=text, figure=outcome.figure, build=built.as_dict(),
                outcome=outcome.as_dict(), seconds=time.perf_counter() - t0)
    _write(stamp, step)
    return step


def _write(stamp: Path, step: Step) -> None:
    tmp = stamp.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(step.as_dict(), indent=2) + "\n")
    os.replace(tmp, stamp)


def _answer(repo: Path) -> tuple[str | None, tuple[str, ...]]:
    """(the first bad commit, or None; the candidates when skipped commits leave several), read from git's
    bisect refs, not from what ``git bisect run`` prints (its closing ``git show`` of the commit fails in a
    mirror without the blobs the commit's neighbours hold, and the line before it is lost)."""
    bad = _git(repo, "rev-parse", "--verify", "--quiet", "refs/bisect/bad", check=False)
    if not bad:
        return None, ()
    goods = _git(repo, "for-each-ref", "--format=%(objectname)", "refs/bisect/good-*", check=False).split()
    skips = set(_git(repo, "for-each-ref", "--format=%(objectname)", "refs/bisect/skip-*", check=False).split())
    left = _git(repo, "rev-list", bad, "--not", *goods, check=False).split()
    if left == [bad]:
        return bad, ()
    if left and set(left) - {bad} <= skips:
        return None, tuple(reversed(left))
    return None, ()


def run(engine: EngineSpec, *, good: str, bad: str, gate: gates.Gate, repo_url: str | None = None,
        options: dict[str, Any] | None = None, patches: bool = True, sim_shape: str | None = None, filter: str = "",
        sparse: tuple[str, ...] = ()) -> Result:
    """The whole search: endpoints checked (good passes, bad fails), then ``git bisect run``."""
    from harness.core.pyexec import python_argv

    t0 = time.perf_counter()
    config, state = prepare(engine, good=good, bad=bad, gate=gate, repo_url=repo_url, options=dict(options or {}),
                            patches=patches, sim_shape=sim_shape, filter=filter, sparse=sparse)
    repo = state / "repo.git"
    with FileLock(str(state / "lock")):
        stamped = {p.stem for p in (state / "steps").glob("*.json")}  # probes of an earlier run: not built by this one
        commits = int(_git(repo, "rev-list", "--count", f"{config.good}..{config.bad}"))
        progress.info(f"bisect {engine.name}: {commits} commits in {config.good[:12]}..{config.bad[:12]}, gate "
                      f"{gate.text}, CPU level {config.level}; state {state}")
        g = probe_commit(state, config, config.good)
        if g.verdict != "good":
            msg = f"--good {config.good[:12]} cannot serve as the reference: {g.text}; choose another good commit"
            raise BisectError(msg)
        b = probe_commit(state, config, config.bad)
        if b.verdict != "bad":
            why = ("passes the gate" if b.verdict == "good" else "was not decided")
            msg = (f"--bad {config.bad[:12]} {why} ({b.text}): nothing to bisect; check the gate's threshold, or name a "
                   "bad commit that fails it")
            raise BisectError(msg)
        _git(repo, "bisect", "reset", check=False)
        _git(repo, "bisect", "start", "--no-checkout", config.bad, config.good)
        argv = ["git", "-C", str(repo), "bisect", "run", *python_argv("-m", "harness.bisect.step", str(state))]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        out = proc.stdout + proc.stderr
        (state / "bisect.log").write_text(_git(repo, "bisect", "log", check=False) + "\n")
        order = re.findall(r"^# (?:good|bad|skip): \[([0-9a-f]{40})\]", _own(state / "bisect.log"), re.M)
        first_bad, candidates = _answer(repo)
        _git(repo, "bisect", "reset", check=False)
        error = state / "steps" / "error.txt"
        if error.is_file():
            text = _own(error).strip()
            error.unlink()
            raise BisectError(f"the bisect stopped: {text}")
        if first_bad is None and not candidates:
            msg = f"git bisect run ended without naming a commit (exit {proc.returncode}):\n{out[-2000:]}"
            raise BisectError(msg)
        steps = tuple(Step.from_dict(json.loads(_own(state / "steps" / f"{c}.json")), reused=c in stamped)
                      for c in dict.fromkeys(order) if c not in (config.good, config.bad)
                      and (state / "steps" / f"{c}.json").is_file())
        culprit = first_bad or (candidates[0] if candidates else "")
        result = Result(config=config, state=state, first_bad=first_bad, candidates=candidates,
                        subject=subject(repo, culprit) if culprit else "", commits=commits, good=g, bad=b,
                        steps=steps, skipped=tuple(s for s in steps if s.verdict == "skip"),
                        seconds=time.perf_counter() - t0,
                        reproduce=_reproduce(config, engine, g, b, culprit, steps))
    (state / "result.json").write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    return result


def _reproduce(config: Config, engine: EngineSpec, good: Step, bad: Step, culprit: str, steps: tuple[Step, ...]) -> tuple[str, ...]:
    from shlex import quote

    gate = gates.Gate.parse(config.gate)
    opts = "".join(f" --option {quote(f'{k}={v}')}" for k, v in sorted(config.options.items()))
    cmd = (f"harness bisect {engine.name} --good {config.good[:12]} --bad {config.bad[:12]} --gate {quote(config.gate)}"
           f" --repo {quote(config.url)}{opts}{'' if config.patches else ' --no-patches'}"
           f"{' --sim-shape ' + config.sim_shape if config.sim_shape else ''}"
           f"{' --filter ' + config.filter if config.filter else ''}" + "".join(f" --sparse {quote(p)}" for p in config.sparse))
    out = [f"{cmd}   # the same search: answered from its stamps"]
    found = next((s for s in steps if s.commit == culprit), bad if culprit == config.bad else None)
    art_bad = (found.build or {}).get("artifact") if found else None
    art_good = (good.build or {}).get("artifact")
    if gate.kind == "speed" and art_bad and art_good:
        kind = gates.speed_kind(engine.name)
        extra = "".join(f",{k}={v}" for k, v in sorted(config.options.items()))
        out.append(f"harness bench --a {kind}:artifact={art_good}{extra} --b {kind}:artifact={art_bad}{extra} "
                   f"--instrument simulation --fail-on-slower {gate.metric}={(1 - gate.threshold) * 100:g}"
                   "   # good against the first bad commit")
    elif gate.kind == "e2e" and art_bad:
        out.append(f"HARNESS_ARTIFACT={art_bad} harness e2e {gate.spec.split('::')[0]}   # the spec on the first bad commit")
    if culprit:
        out.append(f"git -C {quote(config.url)} show {culprit[:12]}")
    return tuple(out)


def record_error(state: Path, e: HarnessError) -> None:
    """A step that failed for the harness's own reasons (not the commit's): the search stops with it."""
    (state / "steps" / "error.txt").write_text(f"{type(e).__name__}: {e}\n")
