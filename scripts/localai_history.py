"""LocalAI's history of backend names, read from its git history (used by refresh_localai_index.py).

At every release tag that is an ancestor of the checkout's HEAD, the backend names a config could
give are read from the files that defined them then:

- ``backend/index.yaml`` (v3 on): each entry's ``alias`` and each meta backend's name (an entry with
  ``capabilities``; the per-hardware ``!!merge`` variants only merge into it);
- ``pkg/model/initializers.go``: the string constants of its ``const (...)`` blocks (the backend
  names of the v1/v2 loader) and the ``Aliases`` map (an alias -> the name LocalAI loads instead);
- ``Makefile``: the ``backend-assets/grpc/NAME`` binaries LocalAI v1/v2 built in;
- ``Dockerfile``: ``EXTERNAL_GRPC_BACKENDS`` (the v1/v2 Python backends, ``NAME:run.sh``).

A name that disappears between two releases is looked up commit by commit (first-parent history,
the commits that touch those files, bisected) for the commit that removed it or made it an alias;
the commit's subject and the names it added say what replaced it. Nothing here is hand-listed: the
output is a function of the checkout's history alone.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

INDEX = "backend/index.yaml"
INITIALIZERS = "pkg/model/initializers.go"
SOURCES = (INDEX, INITIALIZERS, "Makefile", "Dockerfile")
RELEASE = re.compile(r"^v(\d+)\.(\d+)(?:\.(\d+))?$")
_CONST_BLOCK = re.compile(r"^const \(\n(.*?)^\)", re.M | re.S)
_CONST = re.compile(r'^\s*(\w+)\s*=\s*"([A-Za-z0-9][A-Za-z0-9._-]*)"\s*(?://.*)?$', re.M)
_ALIASES = re.compile(r"^var Aliases\b[^{]*\{(.*?)^\}", re.M | re.S)
_TYPE_ALIASES = re.compile(r"^var TypeAlias\b[^{]*\{(.*?)^\}", re.M | re.S)
_MAP_ITEM = re.compile(r'"([^"]+)"\s*:\s*(\w+|"[^"]*")')


class Git:
    """Blobs of a git directory by ``rev:path``, through one ``git cat-file --batch`` process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._proc = subprocess.Popen(["git", "-C", str(root), "cat-file", "--batch"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE)
        self._cache: dict[str, str | None] = {}

    def run(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.root), *args], capture_output=True, text=True,
                              check=True).stdout

    def show(self, rev: str, path: str) -> str | None:
        key = f"{rev}:{path}"
        if key in self._cache:
            return self._cache[key]
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(key.encode() + b"\n")
        self._proc.stdin.flush()
        header = self._proc.stdout.readline().decode().split()
        text: str | None = None
        if len(header) == 3 and header[1] == "blob":
            data = self._proc.stdout.read(int(header[2]) + 1)[:-1]
            text = data.decode("utf-8", "replace")
        elif len(header) == 3:  # a tree or a commit: read past it
            self._proc.stdout.read(int(header[2]) + 1)
        self._cache[key] = text
        return text

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait()


def _consts(text: str) -> dict[str, str]:
    return {ident: value for block in _CONST_BLOCK.findall(text) for ident, value in _CONST.findall(block)}


def _go_map(pattern: re.Pattern[str], text: str, consts: dict[str, str]) -> dict[str, str]:
    m = pattern.search(text)
    if m is None:
        return {}
    out = {}
    for key, value in _MAP_ITEM.findall(m.group(1)):
        out[key] = value.strip('"') if value.startswith('"') else consts.get(value, value)
    return out


def index_names(text: str) -> set[str]:
    """The names a config may give from one backend/index.yaml: of each entry that is not a
    per-hardware variant (``!!merge <<: *anchor``, which inherits everything else), its ``alias``,
    and its name when it is a meta backend (it has ``capabilities``)."""
    try:
        data = yaml.safe_load(text) or []
    except yaml.YAMLError:
        return set()
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("- ")]
    out: set[str] = set()
    for pos, item in zip(starts, data if isinstance(data, list) else (), strict=False):
        if not isinstance(item, dict) or lines[pos][2:].lstrip().startswith(("!!merge", "<<")):
            continue
        if isinstance(item.get("alias"), str):
            out.add(item["alias"])
        if "capabilities" in item and isinstance(item.get("name"), str):
            out.add(item["name"])
    return out


def snapshot(show: Callable[[str], str | None]) -> tuple[set[str], dict[str, str], dict[str, str]]:
    """(backend names, alias -> target, alias -> model type) of one tree, read by ``show(path)``."""
    names: set[str] = set()
    index = show(INDEX)
    if index:
        names |= index_names(index)
    init = show(INITIALIZERS) or ""
    consts = _consts(init)
    names |= set(consts.values())
    make = show("Makefile") or ""
    names |= set(re.findall(r"backend-assets/grpc/([A-Za-z0-9][A-Za-z0-9._-]*)", make))
    docker = show("Dockerfile") or ""
    for value in re.findall(r'EXTERNAL_GRPC_BACKENDS="([^"]*)"', docker):
        names |= {item.split(":")[0] for item in value.split(",") if ":" in item}
    aliases = _go_map(_ALIASES, init, consts)
    types = _go_map(_TYPE_ALIASES, init, consts)
    return names - set(aliases), aliases, types


def releases(git: Git) -> list[tuple[str, str]]:
    """(tag, commit) of every release tag (vX.Y[.Z]) that is an ancestor of HEAD, oldest first."""
    out = []
    for line in git.run("for-each-ref", "--format=%(refname:short) %(objectname) %(*objectname)",
                        "refs/tags").splitlines():
        tag, obj, peeled = [*line.split(), ""][:3]
        m = RELEASE.match(tag)
        if m is None:
            continue
        commit = peeled or obj
        if subprocess.run(["git", "-C", str(git.root), "merge-base", "--is-ancestor", commit, "HEAD"]).returncode:
            continue
        out.append((tuple(int(g or 0) for g in m.groups()), tag, commit))
    return [(tag, commit) for _, tag, commit in sorted(out)]


def _first_change(git: Git, old: str, new: str, gone: Callable[[str], bool]) -> str:
    """The first commit of ``old..new`` (first parent, touching the sources) after which ``gone``
    holds (bisected: ``gone(new)`` is known to hold)."""
    commits = git.run("rev-list", "--first-parent", "--reverse", f"{old}..{new}", "--", *SOURCES).split()
    if not commits:
        return new
    lo, hi = 0, len(commits) - 1
    if not gone(commits[hi]):
        return new
    while lo < hi:
        mid = (lo + hi) // 2
        if gone(commits[mid]):
            hi = mid
        else:
            lo = mid + 1
    return commits[lo]


def collect(root: Path) -> dict[str, Any]:
    """The history: releases covered, and every backend name's and alias's spans across them."""
    git = Git(root)
    try:
        return _collect(git)
    finally:
        git.close()


def _collect(git: Git) -> dict[str, Any]:
    head = git.run("rev-parse", "HEAD").strip()
    tags = releases(git)
    points = tags if tags and tags[-1][1] == head else [*tags, (head[:12], head)]
    snaps = {commit: snapshot(lambda p, c=commit: git.show(c, p)) for _, commit in points}

    def at(commit: str) -> tuple[set[str], dict[str, str], dict[str, str]]:
        if commit not in snaps:
            snaps[commit] = snapshot(lambda p: git.show(commit, p))
        return snaps[commit]

    spans: dict[str, list[dict[str, Any]]] = {}
    alias_spans: dict[str, list[dict[str, Any]]] = {}
    prev: tuple[str, str] | None = None
    for tag, commit in points:
        names, aliases, _ = at(commit)
        for name in sorted(names):
            open_ = spans.get(name, [])
            if not open_ or open_[-1].get("until"):
                spans.setdefault(name, []).append({"since": tag})
        for alias, target in sorted(aliases.items()):
            open_ = alias_spans.get(alias, [])
            if not open_ or open_[-1].get("until") or open_[-1]["target"] != target:
                if open_ and not open_[-1].get("until"):
                    open_[-1]["until"] = prev[0] if prev else tag
                alias_spans.setdefault(alias, []).append({"since": tag, "target": target})
        if prev is not None:
            before_names, before_aliases, _ = at(prev[1])
            for name in sorted(before_names - names):
                change = _first_change(git, prev[1], commit, lambda c, n=name: n not in at(c)[0])
                spans[name][-1].update(_removal(git, change, name, at, prev[0]))
            for alias in sorted(set(before_aliases) - set(aliases)):
                change = _first_change(git, prev[1], commit, lambda c, a=alias: a not in at(c)[1])
                alias_spans[alias][-1].update(_removal(git, change, alias, at, prev[0]))
        prev = (tag, commit)
    _, _, types = at(head)
    return {"releases": dict(tags), "backends": dict(sorted(spans.items())),
            "aliases": dict(sorted(alias_spans.items())), "type_aliases": dict(sorted(types.items()))}


def _removal(git: Git, commit: str, name: str, at: Callable[[str], tuple[set[str], dict[str, str], dict[str, str]]],
             last: str) -> dict[str, Any]:
    """How ``name`` left at ``commit``: the commit, its subject, and what it became or what came with it."""
    subject = git.run("log", "-1", "--format=%s", commit).strip()
    names, aliases, _ = at(commit)
    parent = git.run("rev-parse", f"{commit}^").strip()
    before, before_aliases, _ = at(parent)
    out: dict[str, Any] = {"until": last, "commit": commit, "subject": subject}
    if name in aliases:
        out["became_alias_of"] = aliases[name]
    added = sorted((names - before) | (set(aliases) - set(before_aliases) - before))
    if added:
        out["added_with_it"] = added
    return out
