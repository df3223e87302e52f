"""``harness pin ENGINE SOURCE``: move an engine's pin, derive its provenance, and check it before any build.

A pin move is one command instead of a hand edit of YAML:

1. ``SOURCE`` is resolved (:mod:`harness.pin.sources`): a package version on the configured index (its
   sha256 from the index), a git revision (a tag or branch resolved to the full commit), or a local
   archive (its sha256 from the file, checked against the one given);
2. the upstream build and commit are derived from what the source carries
   (:mod:`harness.source.provenance`), else taken from ``--upstream-build/--upstream-commit``; a commit
   nobody knows is written ``unknown``, never left at the old pin's;
3. ``engines/<engine>/engine.yaml`` is rewritten with a round-trip YAML library (ruamel.yaml): comments,
   key order and quoting stay; ``pinned_on`` becomes today (``--dry-run`` prints the diff and writes nothing);
   the new text must load as the engine's descriptor (its schema, its confinement, its paths) before anything
   is written, on a dry run too;
4. then the checks a release engineer runs, stopping at the first failure with what to do: fetch,
   ``patch --check`` (a patch now upstream named for retirement, a conflict naming its hunk), and the
   ABI check with both halves (the C surface; the binding compiled syntax-only against the new headers).
"""

from __future__ import annotations

import datetime
import difflib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError, UsageError
from harness.pin.direction import Direction, direction
from harness.source.provenance import UNKNOWN, Provenance, disagreements, from_source

if TYPE_CHECKING:
    from harness.pin.sources import Resolved
    from harness.source.gitbuild import GitBuild

DESCRIPTOR = "engine.yaml"


@dataclass(frozen=True, kw_only=True)
class PinPlan:
    """What ``harness pin`` will write: the descriptor's text before and after, and why."""

    engine: str
    path: Path
    before: str
    after: str
    old: dict[str, Any]
    new: dict[str, Any]
    upstream: dict[str, Any]
    provenance: tuple[str, ...] = field(default=())
    direction: Direction = field(default_factory=lambda: direction({}, {}))
    """Backwards, sideways, forward or unknown, by upstream build: the first line ``harness pin`` prints."""
    git: GitBuild | None = None
    """A git source: what its commit is upstream (a release, a fork, a branch or an untagged commit)."""

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        rel = f"engines/{self.engine}/{DESCRIPTOR}"
        return "".join(difflib.unified_diff(self.before.splitlines(True), self.after.splitlines(True),
                                            fromfile=f"a/{rel}", tofile=f"b/{rel}"))


def _yaml() -> Any:
    from ruamel.yaml import YAML

    y = YAML()
    y.preserve_quotes = True
    y.width = 4096  # never re-wrap a long line the author wrote
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def _set(mapping: Any, key: str, value: Any) -> None:
    """Set ``key`` keeping its place (and its comment) when it exists; quoted like the value it replaces, a
    list in the style of the one it replaces (a new one in flow style: ``[a, b]``)."""
    from ruamel.yaml.comments import CommentedSeq
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    old = mapping.get(key)
    if isinstance(old, DoubleQuotedScalarString) and isinstance(value, str):
        value = DoubleQuotedScalarString(value)
    if isinstance(value, list):
        seq = CommentedSeq(value)
        if not (isinstance(old, CommentedSeq) and old.fa.flow_style() is False):
            seq.fa.set_flow_style()
        value = seq
    mapping[key] = value


def plan(engine_dir: Path, resolved: Resolved, *, build: int | None = None, commit: str | None = None,
         today: datetime.date | None = None) -> PinPlan:
    """The new descriptor text for ``resolved``, with provenance derived and checked against what was given."""
    path = engine_dir / DESCRIPTOR
    from harness.core.inputs import read_text

    before = read_text(path, kind="descriptor", error=ConfigError)
    y = _yaml()
    doc = y.load(before)
    if not isinstance(doc, dict) or "source" not in doc:
        msg = f"{path}: not an engine descriptor (no source:)"
        raise ConfigError(msg)
    old_source = {k: v for k, v in dict(doc["source"]).items()}
    old_upstream = dict(doc.get("upstream") or {})
    # The new source: keys of the old that still mean something for the new kind keep their place.
    src = doc["source"]
    for key in list(src):
        if key not in resolved.source and key not in resolved.keep:
            del src[key]
    for key, value in resolved.source.items():
        _set(src, key, value)
    derived = from_source(resolved.source, dict(doc.get("provenance") or {}))
    if resolved.build is not None:
        derived = Provenance(build=resolved.build, commit=derived.commit, how=(*derived.how, resolved.build_how))
    lines = list(derived.how)
    given = {"build": build, "commit": commit}
    for key, value in given.items():
        found = getattr(derived, key)
        if value is not None and found is not None and str(value) != str(found)[:len(str(value))]:
            msg = (f"--upstream-{key} {value}, but the source holds {key} {found} ({'; '.join(derived.how)}); "
                   f"leave --upstream-{key} out to take the source's")
            raise UsageError(msg)
    new_build = derived.build if derived.build is not None else build
    new_commit = derived.commit or commit
    upstream = doc.setdefault("upstream", {})
    moved = old_source != dict(src)
    git = resolved.git
    if git is not None and git.build is None:
        # a fork's, a branch's or an untagged commit: no build the source vouches for, whatever its tags say
        lines.append(f"{git.kind}: {git.why}")
        if build is None and (moved or upstream.get("build") is None):
            based = f" (it descends from the build tag {git.nearest})" if git.nearest else ""
            where = f"{git.repository} @ {str(resolved.source.get('commit', ''))[:12]}"  # never this host's path
            msg = (f"{where} is a {git.kind}, not an upstream release: {git.why}. It carries no "
                   f"upstream build, so say which upstream build it holds with --upstream-build N{based}; it is "
                   "recorded as given. Or pin upstream's own release tag instead.")
            raise UsageError(msg)
    if git is not None and git.repository and str(upstream.get("repository") or "") != git.repository:
        _set(upstream, "repository", git.repository)  # where the commit really comes from: a fork's is the fork's
        lines.append(f"repository {git.repository}: the git source's ({git.kind})")
    if new_build is not None:
        _set(upstream, "build", int(new_build))
        if derived.build is None:
            lines.append(f"build {new_build}: given (--upstream-build)")
    elif moved and "build" in upstream:
        msg = (f"{path}: the new source does not carry the upstream build, and keeping {upstream['build']} (the old "
               "pin's) would be wrong: give it with --upstream-build N")
        raise UsageError(msg)
    if new_commit:
        _set(upstream, "commit", str(new_commit))
        if not derived.commit:
            lines.append(f"commit {new_commit}: given (--upstream-commit)")
    elif moved:
        _set(upstream, "commit", UNKNOWN)
        lines.append("commit unknown: the source does not carry it and --upstream-commit was not given (reports say "
                     "so; the build stamps 'unknown')")
    problems = disagreements(dict(upstream), derived)
    if problems:  # cannot happen after the writes above, unless the source contradicts itself
        raise ConfigError("; ".join(problems))
    changed = moved or dict(upstream) != old_upstream
    if not changed:
        after = before
    else:
        _set(doc, "pinned_on", (today or datetime.date.today()).isoformat())
        out = io.StringIO()
        y.dump(doc, out)
        after = out.getvalue()
    _validate(after, path)
    unknown_why = ("the source does not carry it and --upstream-build was not given" if new_build is None else "")
    move = direction(old_upstream, dict(upstream), new_why=unknown_why,
                     sideways_why=(f"a {git.kind} of it" if git is not None and git.build is None else
                                   "another source" if moved else "nothing moved"))
    return PinPlan(engine=engine_dir.name, path=path, before=before, after=after, old=old_source,
                   new=dict(src), upstream=dict(upstream), provenance=tuple(lines), direction=move, git=git)


def _validate(text: str, path: Path) -> None:
    """``text`` loads as the descriptor at ``path`` would (schema, confinement, its paths): else a
    :class:`ConfigError`, and nothing is written."""
    from harness.core.datafile import load_yaml
    from harness.core.errors import HarnessError
    from harness.engine.descriptor import engine_from_data

    try:
        engine_from_data(load_yaml(text, where=path), path)
    except HarnessError as e:
        msg = (f"the new {path.name} would not load as the engine's descriptor, so nothing was written:\n{e}\n"
               "Fix SOURCE or the options that set the failing field (see `harness pin --help`).")
        raise ConfigError(msg) from None


def write(p: PinPlan) -> None:
    """Write the descriptor atomically (a reader never sees half of it)."""
    tmp = p.path.with_name(f".{p.path.name}.pin-tmp")
    tmp.write_text(p.after)
    tmp.replace(p.path)


def describe(source: dict[str, Any]) -> str:
    """One line naming a descriptor's source: ``xllamacpp 2026.10.11549`` / ``git URL@commit``."""
    kind = source.get("kind")
    if kind == "pypi-sdist":
        return f"{source.get('package')} {source.get('version')}"
    if kind == "git":
        from harness.engine.locations import shown

        return f"{shown(str(source.get('url')))} @ {str(source.get('commit'))[:12]}"
    return f"{kind} {Path(str(source.get('path', ''))).name} (sha256 {str(source.get('sha256'))[:12]})"


def digest_label(source: dict[str, Any], digest: str) -> str:
    """A fetched tree's digest as reports name it: a git tree by its commit (a sparse one says so), an archive
    by its sha256."""
    if source.get("kind") == "git":
        commit, _, sparse = digest.partition("-sparse-")
        return f"commit {commit[:12]}" + (f", sparse checkout {sparse}" if sparse else "")
    return f"sha256 {digest[:12]}"


def source_arg(source: dict[str, Any]) -> str:
    """The ``harness pin`` SOURCE that writes ``source`` (what a report's "reproduce" line says)."""
    kind = source.get("kind")
    sub = f"#{source['subdir']}" if source.get("subdir") else ""
    if kind == "pypi-sdist":
        return f"pypi:{source.get('package')}=={source.get('version')}{sub}"
    if kind == "git":
        return f"git:{source.get('url')}@{source.get('commit')}{sub}"
    sub = f"&subdir={source['subdir']}" if source.get("subdir") else ""
    url = f"&url={source['url']}" if source.get("url") else ""
    return f"archive:{source.get('path')}#sha256={source.get('sha256')}{sub}{url}"
