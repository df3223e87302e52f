"""The runner's stand-ins for actions (:data:`ACTIONS`): what each action does, done on this host.

checkout is a clone of the source repository with the working tree's uncommitted and untracked
(not ignored) files laid over it; setup-python a fresh venv of a matching host interpreter put
first on ``PATH``; upload/download-artifact a directory per artifact name under the run.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .expressions import StepFailed, WorkflowError

if TYPE_CHECKING:
    from .runner import _Job


def _inside(base: Path, rel: str) -> Path:
    return Path(os.path.normpath(base / os.path.expanduser(rel)))


@dataclass(frozen=True)
class _Action:
    """A stand-in: the refs it follows (the action's major versions) and the inputs it implements."""

    refs: frozenset[str]
    inputs: frozenset[str]
    run: Callable[[_Job, Mapping[str, str], IO[str]], dict[str, str]]
    inert: frozenset[str] = frozenset()
    """Inputs accepted and ignored on a local run (credentials, caches of GitHub's)."""


def _git(*argv: str, cwd: Path) -> str:
    r = subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        msg = f"git {' '.join(argv)} (in {cwd}) exited {r.returncode}: {r.stderr.strip()[-2000:]}"
        raise StepFailed(msg)
    return r.stdout


def _checkout(job: _Job, inputs: Mapping[str, str], log: IO[str]) -> dict[str, str]:
    """A clone of the source repository (``fetch-depth``, default 1, as actions/checkout), with
    the working tree's tracked and untracked-not-ignored files laid over it: what the run sees is
    the working tree, uncommitted changes included, never ignored build or venv state."""
    source = job.runner.source
    dest = _inside(job.workspace, inputs.get("path", ""))
    if not dest.is_relative_to(job.workspace):
        msg = f"path {inputs['path']!r} leaves the workspace"
        raise StepFailed(msg)
    if dest.exists():
        shutil.rmtree(dest)
    depth = int(inputs.get("fetch-depth") or "1")
    _git("clone", "--quiet", "--no-hardlinks", *(["--depth", str(depth)] if depth > 0 else []),
         source.as_uri(), str(dest), cwd=job.dir)
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=source).split("\0")
    copied = removed = 0
    for rel in sorted({r for r in listed if r}):
        src, dst = source / rel, dest / rel
        if src.is_dir() and not src.is_symlink():
            msg = f"{rel} is a nested repository or submodule: this stand-in copies files only"
            raise StepFailed(msg)
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        if src.is_symlink():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(src), dst)
            copied += 1
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            copied += 1
        else:  # tracked, deleted in the working tree
            removed += 1
    changes = _git("status", "--porcelain", "--untracked-files=all", cwd=source).splitlines()
    commit = _git("rev-parse", "HEAD", cwd=dest).strip()
    log.write(f"checkout: clone of {source} at {commit} (depth {depth or 'full'}), then {copied} files of its "
              f"working tree laid over it, {removed} deleted; {len(changes)} uncommitted changes:\n")
    log.writelines(f"  {c}\n" for c in changes[:200])
    return {"commit": commit, "ref": job.runner.github_base["ref"]}


def find_python(version: str) -> str:
    """A host interpreter whose version starts with ``version`` (``3.11``, ``3.11.7``, ``3.x``):
    this process's, else ``pythonX.Y`` on PATH."""
    want = version.split(".")
    tried: list[str] = []
    names = [sys.executable, f"python{version}", f"python{'.'.join(want[:2])}", f"python{want[0]}"]
    for name in dict.fromkeys(names):
        exe = shutil.which(name)
        if exe is None:
            tried.append(f"{name}: not found")
            continue
        r = subprocess.run([exe, "-c", "import platform; print(platform.python_version())"],
                           capture_output=True, text=True, check=False)
        found = r.stdout.strip().split(".")
        if r.returncode == 0 and all(w in ("x", "*") or w == f for w, f in zip(want, found, strict=False)):
            return exe
        tried.append(f"{exe}: {'.'.join(found) or r.stderr.strip()}")
    msg = f"no Python {version} on this host ({'; '.join(tried)})"
    raise StepFailed(msg)


def _setup_python(job: _Job, inputs: Mapping[str, str], log: IO[str]) -> dict[str, str]:
    """A fresh venv of the host's matching interpreter, its bin/ first on PATH for later steps
    (``python``, ``pip`` and what they install resolve there)."""
    version = inputs.get("python-version", "").strip()
    if not version:
        msg = "python-version is required (this stand-in does not read python-version-file)"
        raise StepFailed(msg)
    exe = find_python(version)
    venv = job.tool / "Python" / version
    r = subprocess.run([exe, "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
    log.write(r.stdout + r.stderr)
    if r.returncode != 0:
        msg = f"{exe} -m venv {venv} exited {r.returncode}"
        raise StepFailed(msg)
    python = venv / "bin" / "python"
    full = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    job.path_prefix.insert(0, str(venv / "bin"))
    job.exported["pythonLocation"] = str(venv)
    log.write(f"setup-python: venv {venv} of {exe} (Python {full}), {venv / 'bin'} first on PATH\n")
    return {"python-version": full, "python-path": str(python)}


def _collect(workspace: Path, spec: str, *, hidden: bool) -> tuple[Path, list[Path]]:
    """upload-artifact's ``path``: lines of files, directories or globs (``!`` excludes); files are
    stored relative to the common ancestor of the paths searched. Hidden files (a component
    starting with '.') are left out unless ``include-hidden-files``."""
    def expand(pattern: str) -> tuple[Path, set[Path]]:
        full = _inside(workspace, pattern)
        if glob.has_magic(str(full)):
            parts = full.parts
            cut = next(i for i, p in enumerate(parts) if glob.has_magic(p))
            root = Path(*parts[:cut])
            matches = [Path(m) for m in glob.glob(str(full), recursive=True, include_hidden=True)]
        else:
            root = full if full.is_dir() else full.parent
            matches = [full] if full.exists() else []
        files = {f for m in matches for f in ([m] if m.is_file() else m.rglob("*")) if f.is_file()}
        return root, files

    lines = [line.strip() for line in spec.splitlines() if line.strip()]
    roots: list[Path] = []
    files: set[Path] = set()
    for line in (x for x in lines if not x.startswith("!")):
        root, found = expand(line)
        roots.append(root)
        files |= found
    for line in (x for x in lines if x.startswith("!")):
        files -= expand(line[1:])[1]
    base = Path(os.path.commonpath(roots)) if roots else workspace
    if not hidden:
        files = {f for f in files if not any(p.startswith(".") for p in f.relative_to(base).parts)}
    return base, sorted(files)


def _upload_artifact(job: _Job, inputs: Mapping[str, str], log: IO[str]) -> dict[str, str]:
    name = inputs.get("name") or "artifact"
    mode = inputs.get("if-no-files-found") or "warn"
    if mode not in ("warn", "error", "ignore"):
        msg = f"if-no-files-found: {mode!r} (expected warn, error or ignore)"
        raise StepFailed(msg)
    if "path" not in inputs:
        msg = "path is required"
        raise StepFailed(msg)
    base, files = _collect(job.workspace, inputs["path"], hidden=inputs.get("include-hidden-files") == "true")
    if not files:
        text = f"No files were found with the provided path: {inputs['path']}. No artifacts will be uploaded."
        if mode == "error":
            raise StepFailed(text)
        log.write(("warning: " if mode == "warn" else "") + text + "\n")
        return {}
    dest = job.runner.artifacts / name
    if dest.exists():
        if inputs.get("overwrite") != "true":
            msg = f"an artifact named {name!r} already exists in this run (artifacts are immutable; overwrite: true)"
            raise StepFailed(msg)
        shutil.rmtree(dest)
    for f in files:
        target = dest / f.relative_to(base)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    log.write(f"upload-artifact: {name}: {len(files)} files from {base}\n")
    log.writelines(f"  {f.relative_to(base)}\n" for f in files[:200])
    return {"artifact-id": name, "artifact-url": dest.as_uri()}


def _download_artifact(job: _Job, inputs: Mapping[str, str], log: IO[str]) -> dict[str, str]:
    """One artifact (``name``) into ``path``; else every artifact (matching ``pattern``) into
    ``path/<name>/``, or all into ``path`` with ``merge-multiple``. A pattern matching nothing
    downloads nothing, as download-artifact v4 does."""
    store = job.runner.artifacts
    dest = _inside(job.workspace, inputs.get("path") or ".")
    if inputs.get("name"):
        if inputs.get("pattern"):
            msg = "give name or pattern, not both"
            raise StepFailed(msg)
        source = store / inputs["name"]
        if not source.is_dir():
            have = sorted(p.name for p in store.iterdir()) if store.is_dir() else []
            msg = f"Artifact not found: {inputs['name']!r} (this run has: {', '.join(have) or 'none'})"
            raise StepFailed(msg)
        shutil.copytree(source, dest, dirs_exist_ok=True)
        log.write(f"download-artifact: {inputs['name']} -> {dest}\n")
        return {"download-path": str(dest)}
    pattern = inputs.get("pattern") or "*"
    names = sorted(p.name for p in store.iterdir() if fnmatchcase(p.name, pattern)) if store.is_dir() else []
    merge = inputs.get("merge-multiple") == "true"
    for name in names:
        shutil.copytree(store / name, dest if merge else dest / name, dirs_exist_ok=True)
    log.write(f"download-artifact: {len(names)} artifacts matching {pattern!r} -> {dest}: {', '.join(names)}\n")
    return {"download-path": str(dest)}


#: The actions this runner stands in for, by ``owner/name``.
ACTIONS: dict[str, _Action] = {
    "actions/checkout": _Action(frozenset({"v4", "v5"}), frozenset({"path", "fetch-depth"}), _checkout,
                                inert=frozenset({"persist-credentials", "clean", "show-progress"})),
    "actions/setup-python": _Action(frozenset({"v5", "v6"}), frozenset({"python-version"}), _setup_python,
                                    inert=frozenset({"cache", "cache-dependency-path", "check-latest"})),
    "actions/upload-artifact": _Action(
        frozenset({"v4"}), frozenset({"name", "path", "if-no-files-found", "overwrite", "include-hidden-files"}),
        _upload_artifact, inert=frozenset({"retention-days", "compression-level"})),
    "actions/download-artifact": _Action(frozenset({"v4"}), frozenset({"name", "pattern", "path", "merge-multiple"}),
                                         _download_artifact),
}


def _action(uses: str, where: str) -> _Action:
    name, _, ref = uses.partition("@")
    action = ACTIONS.get(name)
    if action is None:
        msg = (f"{where}: uses: {uses!r}: no local stand-in for this action (this runner has: "
               f"{', '.join(sorted(ACTIONS))}); add one to {Path(__file__).name} or replace the step")
        raise WorkflowError(msg)
    if ref not in action.refs:
        msg = f"{where}: uses: {uses!r}: the stand-in follows {name}@{'/'.join(sorted(action.refs))}, not @{ref or '(none)'}"
        raise WorkflowError(msg)
    return action

