"""LocalAI's model-config vocabulary and backend names, read once.

Two data files: ``localai_index.yaml``, LocalAI's facts generated from one LocalAI commit (keys and
their types, backend names and aliases, GuessUsecases, a gallery entry's fields, the downloader's
URI prefixes, the history of backend names across its releases); ``localai.yaml``, what the harness
does with them (which keys it reads, per backend how its engine spells speculative decoding, ...).
The code here only answers questions about that data. Which harness engine serves a LocalAI
backend is the engine's to say (``localai_backends`` on its registered object).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from harness.core.datafile import load_yaml
from harness.core.errors import did_you_mean

DATA_FILE = "localai.yaml"
#: LocalAI's backend index (backend/index.yaml) at a pinned commit: scripts/refresh_localai_index.py.
INDEX_FILE = "localai_index.yaml"
#: LocalAI's ModelConfig.Validate(): a backend name of other characters is refused (the config is
#: not loaded; the index's ``backend_name`` anchor).
BACKEND_NAME = re.compile(r"^[a-zA-Z0-9\-_]+$")
#: Sections of the vocabulary: the top level and the two nested mappings the harness types.
SECTIONS = ("config", "parameters", "template")


@dataclass(frozen=True, kw_only=True)
class Key:
    """One LocalAI key: the harness parameter it feeds (``use``) or, unused, its JSON type."""

    name: str
    use: str | None = None
    unused: str | None = None


@dataclass(frozen=True, kw_only=True)
class Backend:
    """One LocalAI backend name."""

    name: str
    alias_of: str | None = None
    """The backend LocalAI loads for this legacy name (pkg/model's Aliases)."""
    alias_type: str = ""
    """The model type the alias also sets (pkg/model's TypeAlias), "" when none."""
    options: frozenset[str] = frozenset()
    """Its own ``options:`` keys: accepted, not used by this harness."""
    speculative: str | None = None
    usecases: tuple[str, ...] = ()
    """What LocalAI's index says the backend is for (its tags, as known_usecases names)."""
    model_optional: str = ""
    """Where the backend loads without a model path, the LocalAI source that shows it (then
    parameters.model may be left out or empty); empty for a backend that loads one."""
    video_family: str | None = None
    """The video family of its configs when they declare none (``harness/families/families.yaml``)."""
    open_options: str = ""
    """The index anchor of the line where the backend passes any ``options:`` key through: no
    option key of its configs is unknown."""


@dataclass(frozen=True, kw_only=True)
class Span:
    """The releases one backend name (or alias) was in, and how it left."""

    since: str
    """The first release tag it was in (or the pinned commit's short hash, when it came after the
    last release)."""
    until: str | None = None
    """The last release it was in; None when the pinned commit still has it."""
    commit: str = ""
    """The commit that removed it (or made it an alias)."""
    subject: str = ""
    """That commit's subject: what LocalAI said when it dropped the name."""
    became_alias_of: str = ""
    added_with_it: tuple[str, ...] = ()
    """Names the same commit added (what replaced it, when anything did)."""
    target: str = ""
    """An alias's target (the backend LocalAI loads for it)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class History:
    """LocalAI's backend names across its releases (generated from its git history)."""

    releases: dict[str, str] = field(default_factory=dict)
    """Release tag -> commit, oldest first."""
    backends: dict[str, tuple[Span, ...]] = field(default_factory=dict)
    aliases: dict[str, tuple[Span, ...]] = field(default_factory=dict)

    def release(self, ref: str) -> str | None:
        """The release tag ``ref`` names (a tag, with or without its ``v``, or a commit prefix of one)."""
        if ref in self.releases:
            return ref
        if f"v{ref}" in self.releases:
            return f"v{ref}"
        low = ref.lower()
        if len(low) >= 7:
            return next((tag for tag, commit in self.releases.items() if commit.startswith(low)), None)
        return None

    def _order(self, label: str) -> int:
        tags = list(self.releases)
        return tags.index(label) if label in tags else len(tags)

    def covers(self, span: Span, tag: str) -> bool:
        """``span`` includes release ``tag``."""
        n = self._order(tag)
        return self._order(span.since) <= n and (span.until is None or n <= self._order(span.until))

    def names_at(self, tag: str) -> frozenset[str]:
        """The backend names release ``tag`` had (aliases apart)."""
        return frozenset(n for n, spans in self.backends.items() if any(self.covers(s, tag) for s in spans))

    def aliases_at(self, tag: str) -> dict[str, str]:
        """Release ``tag``'s aliases -> the backend it loaded for each."""
        return {n: s.target for n, spans in self.aliases.items() for s in spans if self.covers(s, tag)}

    def removal(self, name: str) -> Span | None:
        """How a name the pinned commit no longer has left (its last span), None when it never had it
        or still has it."""
        spans = (*self.backends.get(name, ()), *self.aliases.get(name, ()))
        if not spans or any(s.until is None for s in spans):
            return None
        return max(spans, key=lambda s: self._order(str(s.until)))

    def was_backend(self, name: str) -> Span | None:
        """The span in which ``name``, now an alias, was a backend of its own (None: it never was)."""
        return next((s for s in self.backends.get(name, ()) if s.until is not None), None)


@dataclass(frozen=True, kw_only=True, eq=False)
class Vocabulary:
    source: dict[str, Any]
    keys: dict[str, dict[str, Key]]
    harness_keys: dict[str, frozenset[str]]
    usecases: tuple[str, ...]
    remote_schemes: tuple[str, ...]
    backends: dict[str, Backend]
    speculative_spellings: dict[str, dict[str, Any]] = field(default_factory=dict)
    index_source: dict[str, Any] = field(default_factory=dict)
    guess_usecases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """LocalAI's GuessUsecases by backend name: use case -> the backend names it is guessed for."""
    gallery_metadata: frozenset[str] = frozenset()
    """A gallery entry's descriptive fields: in a model config, ignored by LocalAI and harmless."""
    anchors: dict[str, str] = field(default_factory=dict)
    """Generated: the LocalAI lines the rules cite, name -> file:line (at ``index_source``'s commit)."""
    usecase_flags: dict[str, str] = field(default_factory=dict)
    """Generated: GetAllModelConfigUsecases()'s FLAG_* names -> file:line."""
    backend_options: dict[str, dict[str, str]] = field(default_factory=dict)
    """Generated: LocalAI backend name -> the ``options:`` names its own source parses -> file:line."""
    generated_keys: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    """Generated: section -> YAML key -> (JSON type, file:line of its Go struct tag)."""
    refusals: tuple[tuple[str, str], ...] = ()
    """Generated: ModelConfig.Validate()'s refusals, (file:line, message format)."""
    history: History = field(default_factory=History)
    """Generated: LocalAI's backend names across its releases."""

    def unused(self, section: str) -> dict[str, str]:
        """Keys of ``section`` accepted and not used, with the JSON type LocalAI decodes them into."""
        return _split(self, section)[1]

    def used(self, section: str) -> dict[str, str]:
        """Keys of ``section`` the harness reads -> the parameter each feeds."""
        return _split(self, section)[0]

    def backend(self, name: str) -> Backend | None:
        """The backend entry for ``name``, aliases followed (None: not a LocalAI name)."""
        b = self.backends.get(name)
        seen: set[str] = set()
        while b is not None and b.alias_of and b.alias_of not in seen:
            seen.add(b.name)
            b = self.backends.get(b.alias_of)
        return b


@functools.cache
def _split(vocab: Vocabulary, section: str) -> tuple[dict[str, str], dict[str, str]]:
    keys = vocab.keys[section].values()
    return ({k.name: k.use for k in keys if k.use is not None},
            {k.name: k.unused for k in keys if k.unused is not None})


def _spans(raw: Any) -> tuple[Span, ...]:
    return tuple(Span(since=str(s["since"]), until=s.get("until"), commit=str(s.get("commit") or ""),
                      subject=str(s.get("subject") or ""), became_alias_of=str(s.get("became_alias_of") or ""),
                      added_with_it=tuple(map(str, s.get("added_with_it") or ())), target=str(s.get("target") or ""))
                 for s in raw or ())


def _history(raw: Any) -> History:
    raw = raw or {}
    return History(releases={str(k): str(v) for k, v in (raw.get("releases") or {}).items()},
                   backends={str(k): _spans(v) for k, v in (raw.get("backends") or {}).items()},
                   aliases={str(k): _spans(v) for k, v in (raw.get("aliases") or {}).items()})


def _read(name: str) -> Any:
    return load_yaml(resources.files("harness.config").joinpath(name).read_text(encoding="utf-8"), where=f"harness/config/{name}")


@functools.cache
def vocabulary() -> Vocabulary:
    """The vocabulary shipped with the harness."""
    raw = _read(DATA_FILE)
    index = _read(INDEX_FILE)
    keys = {section: {name: Key(name=name, use=spec.get("use"))
                      for name, spec in (raw["keys"].get(section) or {}).items()}
            for section in SECTIONS}
    generated = {str(section): {str(k): (str(v[0]), str(v[1])) for k, v in found.items()}
                 for section, found in (index.get("keys") or {}).items()}
    # Every other key of LocalAI's struct tags: accepted, not used (typed as yaml.v3 decodes it).
    for section, found in generated.items():
        if section in keys:
            for name, (kind, _) in found.items():
                keys[section].setdefault(name, Key(name=name, unused=kind))
    parsed = {str(name): {str(k): str(v) for k, v in (opts or {}).items()}
              for name, opts in (index.get("backend_options") or {}).items()}
    cases = {str(k): tuple(v or ()) for k, v in index["backends"].items()}
    backends = {name: Backend(name=name, usecases=usecases, options=frozenset(parsed.get(name, ())))
                for name, usecases in cases.items()}
    for alias, (target, kind) in (index.get("aliases") or {}).items():
        backends[str(alias)] = Backend(name=str(alias), alias_of=str(target), alias_type=str(kind or ""))
    for name, spec in (raw.get("backends") or {}).items():
        entry = backends.get(name)
        if entry is None:
            msg = f"{DATA_FILE}: backend {name!r} is not in LocalAI's generated index ({INDEX_FILE})"
            raise ValueError(msg)
        optional = spec.get("model_optional") or {}
        backends[name] = dataclasses.replace(
            entry, speculative=spec.get("speculative"), video_family=spec.get("video_family"),
            model_optional=_model_optional_text(index, optional), open_options=str(spec.get("open_options") or ""))
    return Vocabulary(
        source=dict(index["source"]), keys=keys,
        harness_keys={k: frozenset(v) for k, v in (raw.get("harness") or {}).items()},
        # GetAllModelConfigUsecases()'s names (generated), lower-cased as this harness spells them
        usecases=tuple(str(k).removeprefix("FLAG_").lower() for k in index.get("usecases") or ()),
        remote_schemes=tuple(map(str, index.get("remote_schemes") or ())), backends=backends,
        speculative_spellings=dict(raw.get("speculative_spellings") or {}),
        index_source=dict(index["source"]),
        guess_usecases={str(k): tuple(str(b) for b in v) for k, v in (index.get("guess_usecases") or {}).items()},
        gallery_metadata=frozenset(str(k) for k in index.get("gallery_metadata") or ()),
        anchors={str(k): str(v) for k, v in (index.get("anchors") or {}).items()},
        usecase_flags={str(k): str(v) for k, v in (index.get("usecases") or {}).items()},
        backend_options=parsed, generated_keys=generated,
        refusals=tuple((str(w), str(m)) for w, m in index.get("refusals") or ()),
        history=_history(index.get("history")),
    )


def _model_optional_text(index: dict[str, Any], spec: dict[str, Any]) -> str:
    """``repository@commit file:line: what it shows`` for a model_optional entry, "" when none (or
    when the index has no such anchor: the claim has nothing to back it)."""
    where = (index.get("anchors") or {}).get(str(spec.get("anchor") or ""))
    if not where:
        return ""
    source = index["source"]
    return f"{source.get('repository', 'mudler/LocalAI')}@{str(source.get('commit', ''))[:12]} {where}: {spec.get('shows', '')}"


def remote_scheme(ref: str) -> str | None:
    """The URI scheme of a model reference LocalAI downloads itself (``huggingface://``), else None."""
    low = ref.strip().lower()
    return next((s for s in vocabulary().remote_schemes if low.startswith(s)), None)


@dataclass(frozen=True, kw_only=True)
class BackendVerdict:
    """What a config's ``backend:`` means here."""

    name: str
    kind: Literal["engine", "localai", "unknown", "refused", "removed"]
    """engine: a registered engine serves it; localai: a LocalAI backend this harness does not
    build; unknown: neither (LocalAI loads the config and looks the name up in its galleries);
    refused: a name LocalAI's Validate() refuses; removed: a name LocalAI had and dropped (the
    backend fails at load)."""
    engine: str | None = None
    message: str = ""
    alias_of: str | None = None
    """The backend LocalAI loads for this legacy alias (None: not an alias)."""
    span: Span | None = None
    """removed: the span that ended with its removal."""
    release: str | None = None
    """The LocalAI release the verdict is for (None: the pinned commit)."""


def served_by() -> dict[str, str]:
    """LocalAI backend name -> the registered engine that serves it (the engines' ``localai_backends``)."""
    from harness.engine import registry

    try:
        found = registry.engines()
    except Exception:  # a broken plugin: no engine serves a LocalAI name
        return {}
    return {backend: impl.name for impl in found.values() for backend in impl.localai_backends}


def localai_label(release: str | None = None) -> str:
    """``LocalAI v2.20.0`` or, for the pinned commit, ``LocalAI 82c191afadf5``."""
    if release is not None:
        return f"LocalAI {release}"
    return f"LocalAI {str(vocabulary().index_source.get('commit', ''))[:12]}"


@functools.cache
def _names(release: str | None) -> tuple[frozenset[str], dict[str, str]]:
    """(backend names, alias -> target) of ``release`` (None: the pinned commit)."""
    v = vocabulary()
    if release is not None:
        return v.history.names_at(release), v.history.aliases_at(release)
    aliases = {b.name: b.alias_of for b in v.backends.values() if b.alias_of}
    return frozenset(b.name for b in v.backends.values() if not b.alias_of), aliases


def _removed(name: str, release: str | None) -> Span | None:
    """The span that ended with ``name``'s removal before ``release`` (None: the pinned commit)."""
    h = vocabulary().history
    if release is None:
        return h.removal(name)
    tags = list(h.releases)
    order = tags.index(release)
    ended = [s for s in (*h.backends.get(name, ()), *h.aliases.get(name, ()))
             if s.until in tags and tags.index(s.until) < order]
    return max(ended, key=lambda s: tags.index(str(s.until))) if ended else None


def removal_text(name: str, span: Span) -> str:
    """What LocalAI's history says about a dropped name: the commit, its subject, what came with it."""
    replaced = ""
    if span.became_alias_of:
        replaced = f"; it became an alias of {span.became_alias_of!r}"
    elif span.added_with_it:
        added = ", ".join(span.added_with_it[:4]) + (", ..." if len(span.added_with_it) > 4 else "")
        replaced = f"; the same commit added {added}"
    return (f"backend {name!r} was removed from LocalAI by {span.commit[:12]} ({span.subject!r}; last in "
            f"{span.until}){replaced}")


def resolve_backend(name: str, engines: Collection[str], *, release: str | None = None) -> BackendVerdict:
    """Resolve a ``backend:`` value against the known ``engines`` and LocalAI's names.

    A name that is itself a known engine is that engine; a LocalAI name (or alias) that a
    registered engine serves is that engine's (when it is in ``engines``); another LocalAI name
    is valid for LocalAI but not built here; a name LocalAI dropped is removed (its history says
    when and why); anything else is unknown (with a did-you-mean).

    :param release: judge by the backend names of this LocalAI release (a tag of the generated
        history); None: the pinned commit's.
    """
    if name in engines:
        return BackendVerdict(name=name, kind="engine", engine=name, release=release)
    names, aliases = _names(release)
    alias_of = aliases.get(name) or aliases.get(name.lower())
    target = alias_of or name
    if target in names:
        engine = served_by().get(target)
        if engine is not None and engine in engines:
            return BackendVerdict(name=name, kind="engine", engine=engine, alias_of=alias_of, release=release)
        return BackendVerdict(name=name, kind="localai", alias_of=alias_of, release=release, message=(
            f"backend {name!r} is a LocalAI backend this harness does not build "
            "(only LocalAI's shared rules are checked)"))
    known = sorted(engines)
    candidates = [*known, *sorted(names), *sorted(aliases)]
    if not BACKEND_NAME.match(name):
        return BackendVerdict(name=name, kind="refused", release=release, message=(
            f"backend {name!r}: LocalAI refuses a backend name with characters other than letters, "
            f"digits, '-' and '_' (ModelConfig.Validate){did_you_mean(name, candidates)}"))
    span = _removed(name, release)
    if span is not None:
        return BackendVerdict(name=name, kind="removed", span=span, release=release, message=(
            f"{removal_text(name, span)}: {localai_label(release)} has no backend {name!r} and fails to "
            f"load the config{did_you_mean(name, candidates)}"))
    h = vocabulary().history
    later = h.backends.get(name) or h.aliases.get(name)
    since = f" (it was added in {later[0].since})" if release is not None and later else ""
    return BackendVerdict(name=name, kind="unknown", release=release, message=(
        f"backend {name!r} is neither an engine here nor in {localai_label(release)}'s backend names{since}"
        f"{did_you_mean(name, candidates)}: LocalAI loads the config and fails only when no gallery "
        f"has that backend; engines here: {', '.join(known) or 'none'}"))


def backend_options(name: str | None) -> frozenset[str]:
    """``options:`` keys LocalAI's backend ``name`` takes (accepted, not used by this harness)."""
    if not name:
        return frozenset()
    entry = vocabulary().backend(name)
    if entry is not None:
        return entry.options
    # A harness engine's name: the options of the LocalAI backends it serves.
    out: set[str] = set()
    for backend, engine in served_by().items():
        entry = vocabulary().backends.get(backend)
        if engine == name and entry is not None:
            out |= entry.options
    return frozenset(out)


def options_parsed(backend: str | None) -> bool:
    """The generated index holds the ``options:`` names the backend's own source parses (an option
    key it does not compare with is one it ignores)."""
    if not backend:
        return False
    entry = vocabulary().backend(backend)
    if entry is not None:
        return entry.name in vocabulary().backend_options
    # a harness engine's name: the LocalAI backends it serves
    return any(engine == backend and name in vocabulary().backend_options for name, engine in served_by().items())


def model_optional(backend: str | None) -> str:
    """The LocalAI source showing that ``backend`` loads without a model path, else ""."""
    entry = vocabulary().backend(backend) if backend else None
    return entry.model_optional if entry is not None else ""


def usecase_flag(value: str) -> str | None:
    """The FLAG_* name LocalAI's GetUsecasesFromYAML makes of one known_usecases value (it looks up
    ``"FLAG_" + upper(value)``, then the value as written), None when it drops the value."""
    flags = vocabulary().usecase_flags
    for candidate in (f"FLAG_{value.upper()}", value):
        if candidate in flags:
            return candidate
    return None


def usecase_name(value: str) -> str | None:
    """The harness's (lower-case) use-case name of a known_usecases value LocalAI takes, else None."""
    flag = usecase_flag(value)
    return flag.removeprefix("FLAG_").lower() if flag is not None else None


def anchor(name: str) -> str:
    """``mudler/LocalAI@COMMIT12 file:line`` of a generated anchor, "" when the index has none."""
    where = vocabulary().anchors.get(name)
    if not where:
        return ""
    commit = str(vocabulary().index_source.get("commit", ""))[:12]
    return f"{vocabulary().index_source.get('repository', 'mudler/LocalAI')}@{commit} {where}"


def open_options(backend: str | None) -> str:
    """Where the LocalAI backend passes any option key through (its anchor's reference), else ""."""
    entry = vocabulary().backend(backend) if backend else None
    return anchor(entry.open_options) if entry is not None and entry.open_options else ""
