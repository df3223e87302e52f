"""``harness pin``'s SOURCE argument: parsed, then resolved to the descriptor's ``source:`` fields.

- ``pypi:PACKAGE==VERSION[#SUBDIR]``: the sdist on the configured index, its sha256 as the index publishes it
  (verified again at download). Without ``#SUBDIR`` the engine tree inside the sdist is the old pin's subdir
  when the package is the same, else the one directory holding the engine's ABI headers.
- ``git:URL@REV[#SUBDIR]``: REV (a tag, branch or commit) resolved to its full commit on a treeless clone,
  where ``git rev-list --count`` also gives the upstream build (llama.cpp's bNNNN is that count).
- ``archive:PATH_OR_FILE_URL#sha256=HEX[&subdir=SUBDIR]``: a local archive (``kind: local-archive``); its
  sha256 is computed from the file and must equal the one given.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from harness.core.errors import SourceError, SubprocessError, UsageError
from harness.engine.confine import check_git_url, git_env

FORMS = ("pypi:PACKAGE==VERSION[#SUBDIR]", "git:URL@REV[#SUBDIR]", "archive:PATH#sha256=HEX[&subdir=SUBDIR]")
_PYPI = re.compile(r"^pypi:(?P<package>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)"
                   r"(?:#(?P<subdir>[^#]+))?$")
_SHA = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """The descriptor's new ``source:`` fields, and what resolving found of the upstream build."""

    source: dict[str, Any]
    keep: frozenset[str] = field(default=frozenset())
    """Keys of the old ``source:`` that stay (a git source's ``filter`` and ``sparse``)."""
    build: int | None = None
    build_how: str = ""
    text: str = ""
    """SOURCE as the user wrote it."""


def _usage(text: str, why: str) -> UsageError:
    return UsageError(f"SOURCE {text!r}: {why}; expected one of {', '.join(FORMS)}")


def _subdir(value: str | None, text: str) -> str | None:
    if value is None:
        return None
    sub = value.strip("/")
    if not sub or Path(sub).is_absolute() or ".." in Path(sub).parts:
        raise _usage(text, f"subdir {value!r} must be a relative path inside the source (no '..')")
    return sub


def _git(*args: str, cwd: Path | None = None) -> str:
    argv = ["git", *args]
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, env=git_env(os.environ))
    if r.returncode:
        raise SubprocessError(argv, r.returncode, r.stdout + r.stderr)
    return r.stdout.strip()


def resolve_git(url: str, rev: str) -> tuple[str, int]:
    """``(full commit, rev-list count)`` of ``rev`` in ``url``, from a treeless bare clone (commits only)."""
    if shutil.which("git") is None:
        msg = "git is needed to resolve a git: SOURCE; install it (scripts/install-system-deps.sh)"
        raise SourceError(msg)
    with tempfile.TemporaryDirectory(prefix="harness-pin-") as tmp:
        repo = Path(tmp) / "repo.git"
        _git("clone", "-q", "--bare", "--filter=tree:0", "--no-tags", "--", check_git_url(url, where="git:URL"), str(repo))
        _git("fetch", "-q", "--filter=tree:0", "origin", "+refs/tags/*:refs/tags/*", cwd=repo)
        try:
            commit = _git("rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}", cwd=repo)
        except SubprocessError:
            msg = f"{url} has no revision {rev!r} (a tag, branch or commit)"
            raise SourceError(msg) from None
        count = int(_git("rev-list", "--count", commit, cwd=repo))
    return commit, count


def parse_archive(text: str) -> tuple[Path, str, str | None]:
    body = text.removeprefix("archive:")
    where, _, frag = body.partition("#")
    params = dict(p.partition("=")[::2] for p in frag.split("&") if p)
    sha = params.get("sha256", "")
    if not _SHA.match(sha):
        raise _usage(text, "an archive: SOURCE pins its bytes with #sha256=<64 hex>")
    if where.startswith("file://"):
        path = Path(unquote(urlparse(where).path))
    elif "://" in where:
        raise _usage(text, "archive: takes a local file or a file:// URL (download it first, then pin the file)")
    else:
        path = Path(where).expanduser()
    return path.resolve(), sha, _subdir(params.get("subdir"), text)


def resolve(text: str, *, old: Mapping[str, Any], headers: Sequence[str], commit: str | None = None) -> Resolved:
    """Resolve SOURCE against the engine's current ``source:`` (``old``) and its ABI ``headers`` (to find the
    engine tree inside an sdist of another package)."""
    if text.startswith("pypi:"):
        m = _PYPI.match(text)
        if not m:
            raise _usage(text, "a pypi: SOURCE names PACKAGE==VERSION")
        from harness.source.index import find_sdist

        package, version = m.group("package"), m.group("version")
        found = find_sdist(package, version)
        subdir = _subdir(m.group("subdir"), text)
        if subdir is None:
            same = str(old.get("package", "")).lower().replace("_", "-") == package.lower().replace("_", "-")
            subdir = str(old["subdir"]) if same and old.get("subdir") else find_subdir(package, version, headers)
        source: dict[str, Any] = {"kind": "pypi-sdist", "package": package, "version": version,
                                  "filename": found.filename, "sha256": str(found.sha256)}
        if subdir:
            source["subdir"] = subdir
        return Resolved(source=source, text=text)
    if text.startswith("git:"):
        body, _, frag = text.removeprefix("git:").partition("#")
        url, at, rev = body.rpartition("@")
        if not at or not url or not rev or url.endswith(":"):
            raise _usage(text, "a git: SOURCE names URL@REV")
        commit, count = resolve_git(url, rev)
        source = {"kind": "git", "url": url, "commit": commit}
        sub = _subdir(frag or None, text) or (old.get("subdir") if old.get("kind") == "git" else None)
        if sub:
            source["subdir"] = str(sub)
        keep = frozenset({"filter", "sparse"}) if old.get("kind") == "git" else frozenset()
        return Resolved(source=source, keep=keep, build=count, text=text,
                        build_how=f"build {count}: `git rev-list --count {commit[:12]}` in {url}")
    if text.startswith("archive:"):
        path, sha, sub = parse_archive(text)
        if not path.is_file():
            raise _usage(text, f"no such file {path}")
        from harness.source.manifest import sha256_file

        actual = sha256_file(path)
        if actual != sha:
            msg = f"{path}: sha256 is {actual}, not the {sha} SOURCE pins; check where the file came from"
            raise SourceError(msg)
        source = {"kind": "local-archive", "path": str(path), "sha256": sha}
        if commit:  # the plugin records which upstream commit the archive holds (full 40 hex)
            if not re.fullmatch(r"[0-9a-f]{40}", commit):
                raise _usage(text, f"--upstream-commit {commit!r}: a local archive records the full 40-hex commit")
            source["commit"] = commit
        if sub:
            source["subdir"] = sub
        # the upstream repository it was made from stays; the old archive's commit never does
        keep = frozenset({"url"}) if old.get("kind") == "local-archive" else frozenset()
        return Resolved(source=source, keep=keep, text=text)
    raise _usage(text, "unknown kind")


def find_subdir(package: str, version: str, headers: Sequence[str]) -> str | None:
    """The directory inside ``package==version``'s sdist that holds every ABI header (downloads and
    extracts it once, verified); None when the sdist's top directory is the engine tree."""
    from harness.abi.pins import fetch_sdist_version

    top = fetch_sdist_version(package, version)
    if not headers or all((top / h).is_file() for h in headers):
        return None
    first = str(headers[0])
    hits = sorted({str(p.relative_to(top)).removesuffix(first).rstrip("/")
                   for p in top.rglob(Path(first).name) if str(p.relative_to(top)).endswith(first)
                   and all((top / str(p.relative_to(top)).removesuffix(first) / h).is_file() for h in headers)},
                  key=lambda s: (s.count("/"), s))
    if not hits:
        msg = (f"{package} {version} does not vendor the engine: no directory of its sdist holds "
               f"{', '.join(headers)}; name it with pypi:{package}=={version}#SUBDIR")
        raise SourceError(msg)
    return hits[0]
