"""``harness pin``'s SOURCE argument: parsed, then resolved to the descriptor's ``source:`` fields.

- ``pypi:PACKAGE==VERSION[#SUBDIR]``: the sdist on the configured index, its sha256 as the index publishes it
  (verified again at download). Without ``#SUBDIR`` the engine tree inside the sdist is the old pin's subdir
  when the package is the same, else the one directory holding the engine's ABI headers.
- ``git:URL@REV[#SUBDIR]``: REV (a tag, branch or commit) resolved to its full commit on a treeless clone,
  where the repository's build tags say whether the commit is an upstream build (a release), a fork's, a
  branch's or an untagged commit (:mod:`harness.source.gitbuild`; never a count of commits).
- ``archive:PATH_OR_FILE_URL#sha256=HEX[&subdir=SUBDIR][&url=URL]``: a local archive (``kind: local-archive``);
  its sha256 is computed from the file and must equal the one given. It records the upstream repository it was
  made from (``&url=``, else the old source's) and the commit it holds (the one ``git archive`` writes into it,
  else ``--upstream-commit``); without either nothing is written.

Whatever the kind, the engine tree (the top or ``SUBDIR``) must hold the engine's files (its ABI headers and a
``CMakeLists.txt``), and a git ``--sparse`` checkout must keep them: checked before anything is written, on a
``--dry-run`` too. A local mirror or archive is written where every machine finds it
(:mod:`harness.engine.locations`): relative to the project, or under ``$HARNESS_MIRRORS``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from harness.core.errors import ConfigError, SourceError, SubprocessError, UsageError
from harness.engine import locations
from harness.engine.confine import (
    LOCAL_UPLOAD_PACK,
    check_git_url,
    git_env,
    git_url_is_local,
    run_git,
    upload_pack_args,
)
from harness.source import gitbuild
from harness.source.gitbuild import GitBuild, TagRule

FORMS = ("pypi:PACKAGE==VERSION[#SUBDIR]", "git:URL@REV[#SUBDIR]",
         "archive:PATH#sha256=HEX[&subdir=SUBDIR][&url=URL]")
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
    git: GitBuild | None = None
    """A git source: what its commit is upstream (a release, or a fork, branch or untagged commit, and why)."""
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
    return run_git(*args, cwd=cwd)


def resolve_git(url: str, rev: str, *, check: Callable[[Path, str], None] | None = None,
                rule: TagRule | None = None) -> tuple[str, GitBuild | None]:
    """``(full commit, what it is upstream)`` of ``rev`` in ``url``, from a treeless bare clone (commits and
    tags only): its upstream build only from a build tag of ``rule`` (:mod:`harness.source.gitbuild`), None
    without a rule; ``check(clone, commit)`` runs on that clone before it goes (trees are fetched as it asks
    for them)."""
    if shutil.which("git") is None:
        msg = "git is needed to resolve a git: SOURCE; install it (scripts/install-system-deps.sh)"
        raise SourceError(msg)
    with tempfile.TemporaryDirectory(prefix="harness-pin-") as tmp:
        repo = Path(tmp) / "repo.git"
        _git("clone", "-q", "--bare", "--filter=tree:0", "--no-tags", *upload_pack_args(url), "--",
             check_git_url(url, where="git:URL"), str(repo))
        if upload_pack_args(url):  # the fetches below and any lazy one: served with the filter allowed
            _git("config", "remote.origin.uploadpack", LOCAL_UPLOAD_PACK, cwd=repo)
        _git("fetch", "-q", "--filter=tree:0", "origin", "+refs/tags/*:refs/tags/*", cwd=repo)
        try:
            commit = _git("rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}", cwd=repo)
        except SubprocessError:
            msg = f"{url} has no revision {rev!r} (a tag, branch or commit)"
            raise SourceError(msg) from None
        found = gitbuild.classify(repo, commit, url=url, rule=rule) if rule is not None else None
        if check is not None:
            check(repo, commit)
    if rule is not None and found is not None:
        gitbuild.remember(url, commit, rule, found)  # what a later fetch checks upstream.build against
    return commit, found


def parse_archive(text: str) -> tuple[Path, str, str | None]:
    path, sha, sub, _ = _parse_archive(text)
    return path, sha, sub


def _parse_archive(text: str) -> tuple[Path, str, str | None, str | None]:
    """``(absolute path, sha256, subdir, upstream url)`` of an archive: SOURCE."""
    body = text.removeprefix("archive:")
    where, _, frag = body.partition("#")
    params = dict(p.partition("=")[::2] for p in frag.split("&") if p)
    unknown = sorted(set(params) - {"sha256", "subdir", "url"})
    if unknown:
        raise _usage(text, f"unknown archive parameter(s) {', '.join(unknown)} (sha256=, subdir=, url=)")
    sha = params.get("sha256", "")
    if not _SHA.match(sha):
        raise _usage(text, "an archive: SOURCE pins its bytes with #sha256=<64 hex>")
    url = params.get("url") or None
    if url is not None:
        check_git_url(url, where=f"SOURCE {text!r}: url=")
    if locations.is_reference(where):
        path = Path(locations.expand(where, where=f"SOURCE {text!r}", error=UsageError))
    elif where.startswith("file://"):
        path = Path(unquote(urlparse(where).path))
    elif "://" in where:
        raise _usage(text, "archive: takes a local file or a file:// URL (download it first, then pin the file)")
    else:
        path = Path(where).expanduser()
    return path.resolve(), sha, _subdir(params.get("subdir"), text), url


def _git_location(url: str, text: str, project: Path) -> tuple[str, str]:
    """``(what git fetches, what the descriptor writes)`` for SOURCE's git URL: a repository on this host
    (``file://``, a path, ``$HARNESS_MIRRORS/...``) is fetched by its absolute ``file://`` URL and written
    relative to the project or under ``$HARNESS_MIRRORS`` (refused elsewhere); a server's URL is both."""
    check_git_url(url, where=f"SOURCE {text!r}")
    if locations.is_reference(url):
        path = Path(locations.expand(url, where=f"SOURCE {text!r}", error=UsageError))
    elif url.lower().startswith("file://"):
        path = Path(unquote(urlparse(url).path))
    elif git_url_is_local(url) and "://" not in url and ":" not in url.split("/", 1)[0]:
        path = Path(url).expanduser()
    else:
        return url, url
    path = Path(os.path.abspath(path))
    written = locations.portable(path, project, what="the git mirror")
    if ":" in written.split("/", 1)[0]:  # git would read 'a:b' as host:path
        written = f"./{written}"
    return path.as_uri(), written


def _missing(exists: Callable[[str], bool], sub: str | None, required: Sequence[str]) -> list[str]:
    return [r for r in required if not exists(f"{sub}/{r}" if sub else r)]


def _no_engine(where: str, sub: str | None, required: Sequence[str], missing: Sequence[str], hint: str) -> SourceError:
    """The engine tree ``sub`` of ``where`` lacks ``missing`` of the engine's ``required`` files."""
    tree = f"{sub!r}" if sub else "its top directory"
    if len(missing) == len(required):
        found = f"{tree} holds none of the engine's files ({', '.join(required)})"
    else:
        found = f"{tree} lacks {', '.join(missing)} (of the engine's files {', '.join(required)})"
    msg = f"{where}: {found}, so it is not the engine's tree; nothing was written. {hint}"
    return SourceError(msg)


def _check_sparse(text: str, commit: str, exists: Callable[[str], bool], sparse: Sequence[str],
                  sub: str | None, required: Sequence[str]) -> None:
    """Each ``--sparse`` path is at ``commit`` and together they keep every file the engine needs."""
    gone = [p for p in sparse if not exists(p.strip("/"))]
    if gone:
        raise _usage(text, f"commit {commit[:12]} has no {', '.join(gone)}; a --sparse path is a file or directory "
                     "relative to the repository root")
    needed = [f"{sub}/{r}" if sub else r for r in required]
    roots = [p.strip("/") for p in sparse]
    left = [n for n in needed if not any(n == r or n.startswith(f"{r}/") for r in roots)]
    if left:
        raise _usage(text, f"the sparse checkout ({', '.join(sparse)}) leaves out {', '.join(left)}, which the "
                     "engine needs; add --sparse for each")


def _git_tree_checks(text: str, sub: str | None, required: Sequence[str],
                     sparse: Sequence[str]) -> Callable[[Path, str], None]:
    """What :func:`resolve_git` checks on its clone: the engine's files at ``sub``, and the sparse paths."""
    def check(repo: Path, commit: str) -> None:
        def exists(path: str) -> bool:
            argv = ["git", "rev-parse", "--verify", "-q", "--end-of-options", f"{commit}:{path}"]
            return subprocess.run(argv, cwd=repo, capture_output=True, check=False,
                                  env=git_env(os.environ)).returncode == 0

        missing = _missing(exists, sub, required)
        if missing:
            raise _no_engine(f"commit {commit[:12]}", sub, required, missing,
                             "Name the directory that holds them with git:URL@REV#SUBDIR.")
        if sparse:
            _check_sparse(text, commit, exists, sparse, sub, required)

    return check


def _archive_listing(path: Path) -> tuple[set[str], str | None]:
    """The member paths of an archive (under its single top directory, when it has one) and the commit
    ``git archive`` recorded in it (a tar's pax comment, a zip's comment), if any."""
    import tarfile
    import zipfile

    from harness.core.inputs import open_input

    try:
        # the archive the user names: a regular file, bounded, never a FIFO (harness.core.inputs)
        with open_input(path, kind="archive", error=SourceError) as f:
            if zipfile.is_zipfile(f):
                f.seek(0)
                with zipfile.ZipFile(f) as zf:
                    names = [i.filename for i in zf.infolist()]
                    note = zf.comment.decode("ascii", "replace")
            else:
                f.seek(0)
                with tarfile.open(fileobj=f) as tf:
                    names = tf.getnames()
                    note = str(tf.pax_headers.get("comment", ""))
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as e:
        msg = f"cannot read archive {path}: {e}; pin a .tar.gz, .tar or .zip"
        raise SourceError(msg) from None
    members = {m for m in (n.removeprefix("./").strip("/") for n in names) if m and m != "."}
    tops = {n.split("/", 1)[0] for n in members if not n.startswith(".")}  # hidden ones aside, as at extraction
    if len(tops) == 1 and any("/" in n for n in members):
        top = next(iter(tops))
        members = {n.split("/", 1)[1] for n in members if n.startswith(f"{top}/")}
    commit = note.strip() if re.fullmatch(r"[0-9a-f]{40}", note.strip()) else None
    return members, commit


def _archive_upstream(text: str, old: Mapping[str, Any], url: str | None, project: Path) -> str:
    """The upstream repository a local archive records: ``&url=``, else the old source's (a git source's
    URL, a local archive's recorded one)."""
    if url:
        return url
    before = str(old.get("url") or "") if old.get("kind") in ("git", "local-archive") else ""
    if not before:
        msg = (f"SOURCE {text!r}: a local-archive source records the upstream repository it was made from "
               "(source.url), and the old source names none; add &url=URL (e.g. the repository's https:// URL) "
               "to SOURCE. Nothing was written.")
        raise ConfigError(msg)
    if locations.is_reference(before) or not git_url_is_local(before) or not (
            before.lower().startswith("file:") or Path(before).is_absolute()):
        return before  # a server, or already written where every machine finds it
    return _git_location(before, text, project)[1]


def resolve(text: str, *, old: Mapping[str, Any], headers: Sequence[str], commit: str | None = None,
            project: Path | None = None, required: Sequence[str] = (), git_filter: str | None = None,
            sparse: Sequence[str] = (), rule: TagRule | None = None) -> Resolved:
    """Resolve SOURCE against the engine's current ``source:`` (``old``) and its ABI ``headers`` (to find the
    engine tree inside an sdist of another package).

    ``project``: the root the descriptor's local paths are written relative to (default: the working
    directory); ``required``: the files the engine tree must hold (checked before anything is written);
    ``git_filter`` and ``sparse``: a git source's ``filter`` and ``sparse`` (``--filter``, ``--sparse``);
    ``rule``: the engine's ``provenance.build_tags`` (a git commit's upstream build comes from those only)."""
    root = Path(project or Path.cwd())
    if (git_filter or sparse) and not text.startswith("git:"):
        raise _usage(text, "--filter and --sparse are for a git: SOURCE (a partial clone of a mirror)")
    if text.startswith("pypi:"):
        m = _PYPI.match(text)
        if not m:
            raise _usage(text, "a pypi: SOURCE names PACKAGE==VERSION")
        from harness.source.index import find_sdist

        package, version = m.group("package"), m.group("version")
        found = find_sdist(package, version)
        subdir = _subdir(m.group("subdir"), text)
        same = str(old.get("package", "")).lower().replace("_", "-") == package.lower().replace("_", "-")
        if subdir is None and same and old.get("subdir"):
            subdir = str(old["subdir"])
        if subdir is None:
            subdir = find_subdir(package, version, headers)  # found by the engine's files: nothing to check
        elif required:
            _check_sdist_tree(package, version, subdir, required)
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
        _check_partial(text, git_filter, sparse)
        fetch_url, url = _git_location(url, text, root)
        sub = _subdir(frag or None, text) or (old.get("subdir") if old.get("kind") == "git" else None)
        kept_sparse = [str(p) for p in old.get("sparse") or ()] if old.get("kind") == "git" else []
        paths = [str(p) for p in sparse] or kept_sparse
        check = _git_tree_checks(text, str(sub) if sub else None, required, paths) if required or paths else None
        commit, tagged = resolve_git(fetch_url, rev, check=check, rule=rule)
        source = {"kind": "git", "url": url, "commit": commit}
        if sub:
            source["subdir"] = str(sub)
        if git_filter:
            source["filter"] = git_filter
        if sparse:
            source["sparse"] = [str(p).strip("/") for p in sparse]
        keep = frozenset({"filter", "sparse"}) if old.get("kind") == "git" else frozenset()
        return Resolved(source=source, keep=keep, build=tagged.build if tagged else None, git=tagged, text=text,
                        build_how=tagged.why if tagged and tagged.build is not None else "")
    if text.startswith("archive:"):
        return _resolve_archive(text, old=old, commit=commit, project=root, required=required)
    raise _usage(text, "unknown kind")


def _check_partial(text: str, git_filter: str | None, sparse: Sequence[str]) -> None:
    """``--filter`` is one the git source kind takes; each ``--sparse`` path is relative and stays inside."""
    from harness.engine.descriptor import engine_schema

    rule = engine_schema()["properties"]["source"]["properties"]["filter"]["pattern"]
    if git_filter is not None and not re.fullmatch(rule, git_filter):
        raise _usage(text, f"--filter {git_filter!r}: the git source kind takes blob:none, blob:limit=SIZE or tree:0")
    for p in sparse:
        q = p.strip("/")
        if not q or Path(p).is_absolute() or ".." in Path(q).parts:
            raise _usage(text, f"--sparse {p!r} must be a path relative to the repository root (no '..')")


def _candidates(files: set[str], required: Sequence[str]) -> list[str]:
    """The directories (shallowest first) under which ``files`` hold every one of ``required``."""
    first = required[0]
    dirs = {f.removesuffix(first).rstrip("/") for f in files if f == first or f.endswith(f"/{first}")}
    hits = [d for d in dirs if all((f"{d}/{r}" if d else r) in files for r in required)]
    return sorted(hits, key=lambda d: (d.count("/"), d))


def _check_sdist_tree(package: str, version: str, subdir: str, required: Sequence[str]) -> None:
    """``subdir`` of the sdist holds the engine's ``required`` files."""
    from harness.abi.pins import fetch_sdist_version

    top = fetch_sdist_version(package, version)
    missing = _missing(lambda p: (top / p).is_file(), subdir, required)
    if not missing:
        return
    files = {p.relative_to(top).as_posix() for p in top.rglob("*") if p.is_file()}
    hits = _candidates(files, required)
    hint = (f"They are in {hits[0]!r}: pin pypi:{package}=={version}#{hits[0]}." if hits else
            f"No directory of the sdist holds them: {package} does not vendor the engine.")
    raise _no_engine(f"{package} {version}", subdir, required, missing, hint)


def _resolve_archive(text: str, *, old: Mapping[str, Any], commit: str | None, project: Path,
                     required: Sequence[str]) -> Resolved:
    """An archive: SOURCE, as a ``local-archive`` source that its schema accepts (path, sha256, url, commit)."""
    path, sha, sub, url = _parse_archive(text)
    if not path.is_file():
        raise _usage(text, f"no such file {path}")
    from harness.source.manifest import sha256_file

    actual = sha256_file(path)
    if actual != sha:
        msg = f"{path}: sha256 is {actual}, not the {sha} SOURCE pins; check where the file came from"
        raise SourceError(msg)
    written = locations.portable(path, project, what="the archive")
    members, recorded = _archive_listing(path)
    if required:
        missing = _missing(lambda p: p in members, sub, required)
        if missing:
            hits = _candidates(members, required)
            hint = (f"They are in {hits[0]!r}: name it with &subdir={hits[0]}." if hits
                    else "No directory of the archive holds them: it is not an archive of the engine.")
            raise _no_engine(path.name, sub, required, missing, hint)
    if commit is not None and not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise _usage(text, f"--upstream-commit {commit!r}: a local archive records the full 40-hex commit")
    if commit and recorded and commit != recorded:
        raise _usage(text, f"--upstream-commit {commit}, but {path.name} records commit {recorded} (git archive "
                     "wrote it); leave --upstream-commit out to take the archive's")
    commit = commit or recorded
    if not commit:
        msg = (f"SOURCE {text!r}: a local-archive source records the upstream commit it holds (source.commit, full "
               f"40 hex), and {path.name} does not say (an archive made by `git archive` does); give it with "
               "--upstream-commit SHA. Nothing was written.")
        raise ConfigError(msg)
    source: dict[str, Any] = {"kind": "local-archive", "path": written, "sha256": sha,
                              "url": _archive_upstream(text, old, url, project), "commit": commit}
    if sub:
        source["subdir"] = sub
    return Resolved(source=source, text=text)


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
