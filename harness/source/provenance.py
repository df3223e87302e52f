"""Which upstream build and commit a pinned source holds, from what the source itself carries.

A descriptor's ``upstream.build`` and ``upstream.commit`` say which upstream tree the pin is; the build
stamps them into the artifact (llama.cpp: ``LLAMA_BUILD_NUMBER``, ``LLAMA_BUILD_COMMIT``) and every report
names them. Written by hand they drift (a pin move once left the old pin's commit beside the new build),
so they are derived where the source carries them and checked against it at every fetch:

- a ``git`` source carries its commit (``source.commit``), and a build only where a build tag of the
  repository that numbers builds is that commit (``provenance.build_tags``; :mod:`harness.source.gitbuild`:
  a fork's, a branch's or an untagged commit has none the source vouches for, and the build is given);
- a ``local-archive`` source records the upstream commit it was made from (``source.commit``);
- a ``pypi-sdist`` source carries a build where the package's version encodes it: the engine's
  descriptor says how, per package (``provenance.build_from_version``: a regex with a ``build`` group;
  xllamacpp ``2026.10.11549`` is llama.cpp b11549). llama-cpp-python's versions do not, and no sdist
  carries the vendored tree's commit (a depth-1 copy without ``.git``): those are given
  (``harness pin --upstream-build/--upstream-commit``) or, for a commit nobody knows, written ``unknown``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError
from harness.engine.confine import recipe_regex

if TYPE_CHECKING:
    from harness.core.types import EngineSpec

UNKNOWN = "unknown"


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """What a source says of its upstream; None where it says nothing."""

    build: int | None = None
    commit: str | None = None
    how: tuple[str, ...] = ()
    """One line per derived value: where it came from."""


def from_source(source: Mapping[str, Any], rules: Mapping[str, Any]) -> Provenance:
    """Derive from a descriptor's ``source:`` mapping and its ``provenance:`` rules (no network, no tree)."""
    kind = str(source.get("kind", ""))
    if kind in ("git", "local-archive") and source.get("commit"):
        commit = str(source["commit"])
        return Provenance(commit=commit, how=(f"commit {commit[:12]}: the {kind} source's own commit",))
    if kind == "pypi-sdist":
        package, version = str(source.get("package", "")), str(source.get("version", ""))
        schemes = dict(rules.get("build_from_version") or {})
        pattern = schemes.get(package) or schemes.get(package.lower().replace("_", "-"))
        if pattern:
            m = recipe_regex(str(pattern), where=f"provenance.build_from_version.{package}").fullmatch(version)
            if m and m.groupdict().get("build"):
                build = int(m.group("build"))
                return Provenance(build=build, how=(f"build {build}: {package}'s version {version} encodes it "
                                                    f"(provenance.build_from_version: {pattern})",))
    return Provenance()


def derive(spec: EngineSpec) -> Provenance:
    return from_source(spec.raw.get("source") or {}, spec.raw.get("provenance") or {})


def _same_commit(a: str, b: str) -> bool:
    n = min(len(a), len(b))
    return n >= 7 and a[:n] == b[:n]


def disagreements(upstream: Mapping[str, Any], found: Provenance) -> list[str]:
    """Lines naming each upstream field the source contradicts."""
    lines = []
    if found.build is not None and upstream.get("build") is not None and int(upstream["build"]) != found.build:
        lines.append(f"upstream.build: {upstream['build']}, but the source holds build {found.build} ({found.how[0]})")
    commit = str(upstream.get("commit") or "")
    if found.commit and commit and commit != UNKNOWN and not _same_commit(commit, found.commit):
        lines.append(f"upstream.commit: {commit}, but the source holds commit {found.commit}")
    return lines


def git_disagreement(spec: EngineSpec) -> str | None:
    """The line naming a git source's ``upstream.build`` that the repository's build tags contradict: the commit
    is upstream's build tag for another build. A fork's, branch's or untagged commit says nothing against a
    build the user gave; a repository out of reach now (offline, a cached tree) says nothing either."""
    from harness.source.gitbuild import recorded, tag_rule

    rule = tag_rule(spec.raw.get("provenance") or {})
    given = spec.upstream.get("build")
    if spec.source.kind != "git" or rule is None or given is None or not spec.source.url or not spec.source.commit:
        return None
    found = recorded(spec.source.url, spec.source.commit, rule, where=f"the {spec.name} engine's source.url")
    if found is None or found.build is None or int(given) == found.build:
        return None
    return f"upstream.build: {given}, but the source holds build {found.build} ({found.why})"


def check(spec: EngineSpec) -> Provenance:
    """:class:`ConfigError` when the descriptor's upstream fields disagree with what its source carries."""
    found = derive(spec)
    lines = disagreements(spec.upstream, found)
    tagged = git_disagreement(spec)
    if tagged:
        lines.append(tagged)
    if lines:
        where = spec.root / "engine.yaml"
        msg = "\n".join([f"{where}: the upstream fields disagree with the pinned source:", *(f"  {x}" for x in lines),
                         f"Move pins with `harness pin {spec.name} SOURCE`, which derives them; or correct the "
                         "fields by hand to what the source holds (a commit nobody knows is written `unknown`)."])
        raise ConfigError(msg)
    return found
