"""Which upstream build a git commit is: only a build tag of the upstream repository says so.

Counting commits (``git rev-list --count``) says nothing of upstream: a fork's commit, a feature branch,
any ref counts to some number. The rule here never calls a fork's commit an upstream build:

- an engine whose builds are numbered by tags says so in its descriptor: ``provenance.build_tags``
  names the repository whose tags number the builds (``repository: OWNER/NAME``) and the tag's form
  (``pattern``: a regex with a named group ``build``; ``b(?P<build>[0-9]+)`` for ``b11549``);
- the source's repository is the one its URL names (``OWNER/NAME``); a repository on this host is the
  one its ``remote.origin.url`` names (what ``git clone --mirror`` records), else its path's last two
  parts;
- the commit is upstream build N only when that repository is the one that numbers builds, the commit
  IS the commit of its build tag for N, and that tag lies on the line of the other build tags (every
  lower-numbered build tag is an ancestor of it).

Everything else has no upstream build the source can vouch for, and says why:

- ``fork``: another repository (a fork numbers and tags its own commits as it likes: a fork's
  ``b12074`` can sit on 2,144 commits of its own), or a build tag off the line of the others (its
  commit lacks a lower build tag and carries commits no other build tag has);
- ``branch``: a commit in no build tag (a branch no release holds);
- ``untagged``: a commit between two build tags that is neither's own. Upstream may number it (its
  build number counts commits along its main line), but a commit reached through a merge is not on
  that line, and the source cannot say which it is: the harness does not guess.

``harness pin`` then requires ``--upstream-build`` (the build the commit is based on, as the user knows
it) and records it as given; ``upstream.repository`` names where the commit really comes from (the
fork's ``OWNER/NAME``, not upstream's). ``harness fetch`` refuses an ``upstream.build`` that a build
tag of the upstream repository contradicts (:func:`recorded`), and accepts a user's statement about a
commit no build tag names.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from harness.core.errors import SourceError, SubprocessError
from harness.engine.confine import (
    LOCAL_UPLOAD_PACK,
    check_git_url,
    git_env,
    git_url_is_local,
    recipe_regex,
    run_git,
    upload_pack_args,
)

KINDS = ("release", "fork", "branch", "untagged")
_SCP = re.compile(r"^[^/@:]+@[^/:]+:(?P<path>.+)$")


@dataclass(frozen=True, kw_only=True)
class TagRule:
    """``provenance.build_tags``: the repository whose tags number upstream builds, and the tags' form."""

    repository: str
    pattern: str

    def build_of(self, tag: str) -> int | None:
        m = recipe_regex(self.pattern, where="provenance.build_tags.pattern").fullmatch(tag)
        value = m.groupdict().get("build") if m else None
        return int(value) if value and value.isdigit() else None


@dataclass(frozen=True, kw_only=True)
class GitBuild:
    """What a git commit is upstream: a release (``build`` set) or a fork, branch or untagged commit."""

    kind: str
    build: int | None
    repository: str
    """``OWNER/NAME`` the commit comes from (upstream's for a release, the fork's for a fork)."""
    why: str
    tag: str | None = None
    """The build tag at the commit, where one is."""
    nearest: str | None = None
    """The highest build tag the commit descends from (what a user's ``--upstream-build`` is based on)."""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def tag_rule(provenance: Mapping[str, Any]) -> TagRule | None:
    """The descriptor's ``provenance.build_tags``, or None where its builds are not numbered by tags."""
    rule = provenance.get("build_tags")
    if not isinstance(rule, Mapping) or not rule.get("pattern") or not rule.get("repository"):
        return None
    return TagRule(repository=str(rule["repository"]), pattern=str(rule["pattern"]))


def _git(*args: str, cwd: Path | None = None) -> str:
    return run_git(*args, cwd=cwd)


def _local_path(url: str) -> str:
    return unquote(urlparse(url).path) if url.lower().startswith("file:") else url


def _tail(path: str) -> str:
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    if len(parts) > 1 and parts[-1] == ".git":  # a work tree's own .git
        parts.pop()
    if parts:
        parts[-1] = parts[-1].removesuffix(".git")
    return "/".join(parts[-2:])


def repository_name(url: str) -> str:
    """``OWNER/NAME`` of a git URL: ``https://host/OWNER/NAME(.git)``, ``user@host:OWNER/NAME``; a
    repository on this host is named by the ``remote.origin.url`` it records (a mirror's origin), else by
    its path's last two parts."""
    if git_url_is_local(url):
        path = _local_path(url)
        try:
            origin = _git("-C", path, "config", "--get", "remote.origin.url")
        except (SubprocessError, OSError):
            origin = ""
        if origin and not git_url_is_local(origin):
            return repository_name(origin)
        return _tail(_local_path(origin) if origin else path)
    m = _SCP.match(url)
    return _tail(m.group("path") if m else urlparse(url).path)


def same_repository(a: str, b: str) -> bool:
    return a.strip("/").lower().removesuffix(".git") == b.strip("/").lower().removesuffix(".git")


def _build_tags(repo: Path, rule: TagRule) -> dict[str, tuple[int, str]]:
    """Every build tag of ``repo``: name -> (build, the commit it points at)."""
    out: dict[str, tuple[int, str]] = {}
    listing = _git("for-each-ref", "--format=%(refname:strip=2) %(objectname) %(*objectname)", "refs/tags", cwd=repo)
    for line in listing.splitlines():
        name, _, rest = line.partition(" ")
        obj, _, peeled = rest.partition(" ")
        build = rule.build_of(name)
        if build is not None:
            out[name] = (build, peeled.strip() or obj)
    return out


def _tag_names(repo: Path, *args: str) -> set[str]:
    return set(_git("tag", "--list", *args, cwd=repo).split())


def _by_build(names: set[str], tags: Mapping[str, tuple[int, str]]) -> list[str]:
    return sorted((n for n in names if n in tags), key=lambda n: tags[n][0])


def classify(repo: Path, commit: str, *, url: str, rule: TagRule) -> GitBuild:
    """What ``commit`` is upstream, in ``repo`` (a clone of ``url`` holding its tags and their history)."""
    here = repository_name(url)
    tags = _build_tags(repo, rule)
    merged = _by_build(_tag_names(repo, "--merged", commit), tags)  # build tags the commit descends from
    at = [n for n in merged if tags[n][1] == commit]
    below = [n for n in merged if n not in at]
    short = commit[:12]

    def since(tag: str | None) -> str:
        if tag is None:
            return "no build tag below it"
        if tags[tag][1] == commit:
            return f"the commit of {tag}"
        return f"{_git('rev-list', '--count', f'{tags[tag][1]}..{commit}', cwd=repo)} commit(s) after {tag}"

    nearest = merged[-1] if merged else None
    # the build tag at the commit, and the lower build tags it lacks (a tag off the line of the others)
    tag = at[-1] if at else None
    lacks = sorted((n for n in tags if tag and tags[n][0] < tags[tag][0] and n not in merged), key=lambda n: tags[n][0])
    if tag and lacks:
        nearest = below[-1] if below else None  # where it branched off: the fork's own tag is no base
    if not same_repository(here, rule.repository):
        tagged = f"; its tag {at[-1]} there is the fork's word, not upstream's" if at else ""
        why = (f"{here} is not {rule.repository}, the repository whose build tags number upstream builds: a fork "
               f"numbers and tags its own commits as it likes{tagged} (commit {short}: {since(nearest)})")
        return GitBuild(kind="fork", build=None, repository=here, why=why, tag=at[-1] if at else None,
                        nearest=nearest)
    if tag:
        build = tags[tag][0]
        if not lacks:
            return GitBuild(kind="release", build=build, repository=here, tag=tag, nearest=tag,
                            why=f"build {build}: commit {short} is the build tag {tag} of {rule.repository}")
        own = _count_not(repo, commit, sorted({c for n, (_, c) in tags.items() if n != tag}))
        shown = ", ".join(lacks[:3]) + (f" and {len(lacks) - 3} more" if len(lacks) > 3 else "")
        why = (f"the tag {tag} is a fork's own: its commit {short} lacks the lower build tag(s) {shown} and carries "
               f"{own} commit(s) no other build tag has ({since(nearest)})")
        return GitBuild(kind="fork", build=None, repository=here, why=why, tag=tag, nearest=nearest)
    later = _by_build(_tag_names(repo, "--contains", commit), tags)
    if not later:
        why = f"commit {short} is in no build tag of {rule.repository}: a branch no release holds ({since(nearest)})"
        return GitBuild(kind="branch", build=None, repository=here, why=why, nearest=nearest)
    why = (f"commit {short} is no build tag's own commit: {since(nearest)}, first released in {later[0]}; upstream "
           "numbers only the commits of its main line, and the source cannot say this is one")
    return GitBuild(kind="untagged", build=None, repository=here, why=why, nearest=nearest)


def _count_not(repo: Path, commit: str, others: list[str]) -> str:
    """How many commits ``commit`` reaches that none of ``others`` does (``--stdin``: thousands of tags)."""
    argv = ["git", "rev-list", "--count", commit, "--stdin"]
    r = subprocess.run(argv, cwd=repo, input="".join(f"^{c}\n" for c in others), capture_output=True, text=True,
                       check=False, env=git_env(os.environ))
    if r.returncode:
        raise SubprocessError(argv, r.returncode, r.stdout + r.stderr)
    return r.stdout.strip()


def commits_clone(url: str, dest: Path, *, where: str = "git:URL") -> Path:
    """A bare clone of ``url`` with its history and tags and no trees nor blobs (``--filter=tree:0``)."""
    repo = dest / "repo.git"
    _git("clone", "-q", "--bare", "--filter=tree:0", "--no-tags", *upload_pack_args(url), "--",
         check_git_url(url, where=where), str(repo))
    if upload_pack_args(url):  # the fetches below and any lazy one: served with the filter allowed
        _git("config", "remote.origin.uploadpack", LOCAL_UPLOAD_PACK, cwd=repo)
    _git("fetch", "-q", "--filter=tree:0", "origin", "+refs/tags/*:refs/tags/*", cwd=repo)
    return repo


# --------------------------------------------------------------------------- the record fetch checks


def _record_path(url: str, commit: str, rule: TagRule) -> Path:
    from harness.core import paths

    key = hashlib.sha256("\0".join((url, commit, rule.repository, rule.pattern)).encode()).hexdigest()[:16]
    return paths.provenance_dir() / f"git-{commit}-{key}.json"


def remember(url: str, commit: str, rule: TagRule, found: GitBuild) -> None:
    """Keep what ``commit`` is for later fetches (written by ``harness pin``, which cloned anyway)."""
    path = _record_path(url, commit, rule)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(found.as_json(), sort_keys=True))
    tmp.replace(path)


def recorded(url: str, commit: str, rule: TagRule, *, where: str) -> GitBuild | None:
    """What ``commit`` of ``url`` is upstream: the record an earlier pin or fetch kept, else from a clone of
    its history (commits and tags only; once, then kept). None when the repository cannot be reached now (a
    fetch of a cached tree offline): the source cannot say, and nothing is refused for it."""
    from harness.core.inputs import read_text

    path = _record_path(url, commit, rule)
    if path.is_file():
        try:
            data = json.loads(read_text(path, kind="manifest", error=SourceError))
            return GitBuild(**{k: data.get(k) for k in ("kind", "build", "repository", "why", "tag", "nearest")})
        except (SourceError, ValueError, TypeError):
            pass  # a damaged record is made again
    try:
        with tempfile.TemporaryDirectory(prefix="harness-provenance-") as tmp:
            found = classify(commits_clone(url, Path(tmp), where=where), commit, url=url, rule=rule)
    except (SubprocessError, OSError):
        return None
    remember(url, commit, rule, found)
    return found
