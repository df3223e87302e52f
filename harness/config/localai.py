"""LocalAI's model-config vocabulary and backend names (``localai.yaml``), read once.

The data says, for every key LocalAI's loader accepts, whether the harness uses it
(and which parameter it feeds) or accepts it without using it; which backend names
LocalAI has; which model references are remote URIs LocalAI downloads itself. The code
here only answers questions about that table. Which harness engine serves a LocalAI
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
#: not loaded); core/config/model_config.go at 8f5f7d6ca9f8523bc524bd6501993fcb7a69a601.
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


@functools.cache
def vocabulary() -> Vocabulary:
    """The vocabulary shipped with the harness."""
    raw = load_yaml(resources.files("harness.config").joinpath(DATA_FILE).read_text(encoding="utf-8"))
    keys = {section: {name: Key(name=name, use=spec.get("use"), unused=spec.get("unused"))
                      for name, spec in raw["keys"][section].items()}
            for section in SECTIONS}
    index = load_yaml(resources.files("harness.config").joinpath(INDEX_FILE).read_text(encoding="utf-8"))
    cases = {str(k): tuple(v or ()) for k, v in index["backends"].items()}
    generated = {str(section): {str(k): (str(v[0]), str(v[1])) for k, v in keys.items()}
                 for section, keys in (index.get("keys") or {}).items()}
    # Keys LocalAI's struct tags have that this table does not map: accepted, not used (typed as Go decodes).
    for section, found in generated.items():
        if section in keys:
            for name, (kind, _) in found.items():
                keys[section].setdefault(name, Key(name=name, unused=kind))
    parsed = {str(name): {str(k): str(v) for k, v in (opts or {}).items()}
              for name, opts in (index.get("backend_options") or {}).items()}
    backends = {
        name: Backend(name=name, alias_of=spec.get("alias_of"), options=frozenset(spec.get("options") or ()),
                      speculative=spec.get("speculative"), video_family=spec.get("video_family"),
                      usecases=cases.get(name, ()), model_optional=str(spec.get("model_optional") or ""),
                      open_options=str(spec.get("open_options") or ""))
        for name, spec in raw["backends"].items()
    }
    for name, usecases in cases.items():  # the index's names this table has nothing more about
        backends.setdefault(name, Backend(name=name, usecases=usecases))
    # A backend whose own options parser the index read takes every option it parses beside the table's own.
    for name, opts in parsed.items():
        entry = backends.get(name) or Backend(name=name)
        backends[name] = dataclasses.replace(entry, options=entry.options | frozenset(opts))
    return Vocabulary(
        source=dict(raw["source"]), keys=keys,
        harness_keys={k: frozenset(v) for k, v in (raw.get("harness") or {}).items()},
        # GetAllModelConfigUsecases()'s names (generated), lower-cased as this harness spells them
        usecases=tuple(str(k).removeprefix("FLAG_").lower() for k in index.get("usecases") or ()),
        remote_schemes=tuple(raw["remote_schemes"]), backends=backends,
        speculative_spellings=dict(raw.get("speculative_spellings") or {}),
        index_source=dict(index["source"]),
        guess_usecases={str(k): tuple(str(b) for b in v) for k, v in (raw.get("guess_usecases") or {}).items()},
        gallery_metadata=frozenset(str(k) for k in raw.get("gallery_metadata") or ()),
        anchors={str(k): str(v) for k, v in (index.get("anchors") or {}).items()},
        usecase_flags={str(k): str(v) for k, v in (index.get("usecases") or {}).items()},
        backend_options=parsed, generated_keys=generated,
        refusals=tuple((str(w), str(m)) for w, m in index.get("refusals") or ()),
    )


def remote_scheme(ref: str) -> str | None:
    """The URI scheme of a model reference LocalAI downloads itself (``huggingface://``), else None."""
    low = ref.strip().lower()
    return next((s for s in vocabulary().remote_schemes if low.startswith(s)), None)


@dataclass(frozen=True, kw_only=True)
class BackendVerdict:
    """What a config's ``backend:`` means here."""

    name: str
    kind: Literal["engine", "localai", "unknown", "refused"]
    """engine: a registered engine serves it; localai: a LocalAI backend this harness does not
    build; unknown: neither (LocalAI loads the config and looks the name up in its galleries);
    refused: a name LocalAI's Validate() refuses."""
    engine: str | None = None
    message: str = ""


def served_by() -> dict[str, str]:
    """LocalAI backend name -> the registered engine that serves it (the engines' ``localai_backends``)."""
    from harness.engine import registry

    try:
        found = registry.engines()
    except Exception:  # a broken plugin: no engine serves a LocalAI name
        return {}
    return {backend: impl.name for impl in found.values() for backend in impl.localai_backends}


def resolve_backend(name: str, engines: Collection[str]) -> BackendVerdict:
    """Resolve a ``backend:`` value against the known ``engines`` and LocalAI's names.

    A name that is itself a known engine is that engine; a LocalAI name (or alias) that a
    registered engine serves is that engine's (when it is in ``engines``); another LocalAI name
    is valid for LocalAI but not built here; anything else is unknown (with a did-you-mean).
    """
    if name in engines:
        return BackendVerdict(name=name, kind="engine", engine=name)
    v = vocabulary()
    entry = v.backend(name)
    engine = served_by().get(entry.name) if entry is not None else None
    if engine is not None and engine in engines:
        return BackendVerdict(name=name, kind="engine", engine=engine)
    if entry is not None:
        return BackendVerdict(name=name, kind="localai", message=(
            f"backend {name!r} is a LocalAI backend this harness does not build "
            "(only LocalAI's shared rules are checked)"))
    known = sorted(engines)
    candidates = [*known, *v.backends]
    if not BACKEND_NAME.match(name):
        return BackendVerdict(name=name, kind="refused", message=(
            f"backend {name!r}: LocalAI refuses a backend name with characters other than letters, "
            f"digits, '-' and '_' (ModelConfig.Validate){did_you_mean(name, candidates)}"))
    commit = str(v.index_source.get("commit", ""))[:12]
    return BackendVerdict(name=name, kind="unknown", message=(
        f"backend {name!r} is neither an engine here nor in LocalAI's backend index (at {commit})"
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
