"""One word per concept: "backend" is LocalAI's backend name or a ggml backend, nothing else.

Our pybind11 module over an engine is the *binding* (``engines/<e>/binding/``, ``BindingError``,
``$HARNESS_BINDING_PATH``); what a variant computes on is its *platform* (``Variant.platform``).
This scans the code and data we write for "backend" in any case and spelling (``Backend``,
``backends``, ``_backend``, ``HARNESS_BACKEND_...``) and fails on every occurrence that no
pattern of :data:`ALLOWED` covers. Text quoted from upstream (engines/<e>/patches/, the LocalAI corpus, the
generated LocalAI index) is not ours to rename and is not scanned.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

from harness.core import paths

#: What is scanned, as globs relative to the project root.
SCANNED = ("harness/**", "plugins/**", "engines/*/plugin/**", "scripts/**", "noxfile.py", "engines/*/engine.yaml",
           "engines/*/binding/**", "engines/_shared/**")
#: Generated from LocalAI's own backend index (scripts/refresh_localai_index.py): LocalAI's text.
NOT_SCANNED = ("harness/config/localai_index.yaml",)
#: The LocalAI vocabulary and model-config modules: there a bare "backend(s)" is LocalAI's (a
#: config's ``backend:`` and LocalAI's backend names, their source paths ``backend/python/...``).
LOCALAI_MODULES = ("harness/config/*", "harness/video/*", "harness/families/*", "harness/schemas/model-config.schema.json",
                   "scripts/refresh_localai_index.py", "scripts/localai_history.py")

WORD = re.compile("backend", re.IGNORECASE)

#: (files it applies to, pattern, sense). An occurrence is allowed when a match of a pattern of its
#: file covers it. Patterns are case-sensitive unless they say otherwise.
ALLOWED: tuple[tuple[tuple[str, ...], str, str], ...] = (
    # ggml: its API, headers and CMake names (ggml_backend_*, ggml-backend.h, GGML_BACKEND_DL)
    (SCANNED, r"(?i)ggml[_-]backend\w*", "ggml"),
    # ggml: ggml's CMake helper that defines one CPU backend per level
    (SCANNED, r"\bggml_add_cpu_backend_variant\b", "ggml"),
    # ggml: llama.cpp's call that initializes ggml's backends
    (SCANNED, r"\bllama_backend_init\b", "ggml"),
    # ggml: prose about ggml's backends ("ggml backend plugins", "ggml's CPU backend", "ggml loads its backends")
    (SCANNED, r"\bggml(?:'s)?(?: [\w-]+){0,2} backends?\b", "ggml"),
    # ggml: its CPU backend, also as ggml logs it ("loaded CPU backend from ...")
    (SCANNED, r"\bCPU backends?\b", "ggml"),
    # ggml: the directory ggml_backend_load_all_from_path loads backends from (an engine parameter)
    (SCANNED, r"\bbackend_dir\b", "ggml"),
    # ggml: stable-diffusion.cpp's binding loads ggml's backend plugins once per directory
    (SCANNED, r"\b_?(?:load|loaded)_backends\b", "ggml"),
    # LocalAI: a model config's `backend:` key (not a Python annotation such as `backend: str`)
    (SCANNED, r"(?:\\n|\b)backend:(?!\s*(?:str|int|bool|float|Any|Path|dict|list|tuple|set|None|Optional|Backend\w*)\b)",
     "LocalAI"),
    # LocalAI: its backend names ("LocalAI backend", "LocalAI's llama-cpp backend", "LocalAI calls this backend")
    (SCANNED, r"\bLocalAI(?:'s)?(?: calls this| own| `{0,2}[\w.-]+`{0,2})? backends?\b", "LocalAI"),
    # LocalAI: the backend names an engine serves (EngineImpl.localai_backends)
    (SCANNED, r"\blocalai_backends\b", "LocalAI"),
    # LocalAI: a model config's backend (the value of its `backend:`)
    (SCANNED, r"\bconfig(?:'s| whose) backend\b|\b(?:config|eff)\.backend\b", "LocalAI"),
    # LocalAI: the vocabulary modules' own words (config.backend, Backend, resolve_backend, backend_options, ...)
    (LOCALAI_MODULES, r"\b[Bb]ackends?\b|\b(?:BackendVerdict|resolve_backend|backend_options|STORE_BACKENDS|"
     r"BACKEND_NAME|store_backend|unknown_backend|backend_name|backend_family|meta_backends|params_backend|"
     r"IsCloudProxyBackendPassthrough|EXTERNAL_GRPC_BACKENDS|was_backend)\b", "LocalAI"),
    # PEP 517: the build-backend key of the pyproject the binding stage writes for scikit-build-core
    (("harness/binding/wheel.py",), r"\bbuild-backend = ", "PEP 517"),
)


def _matches(rel: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(rel, g) for g in globs)


def violations(rel: str, text: str) -> list[str]:
    """``rel:line: text`` for every occurrence of the word in ``text`` that no allowed pattern covers."""
    patterns = [re.compile(p) for globs, p, _ in ALLOWED if _matches(rel, globs)]
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not WORD.search(line):
            continue
        covered = [m.span() for p in patterns for m in p.finditer(line)]
        for hit in WORD.finditer(line):
            if not any(start <= hit.start() and hit.end() <= end for start, end in covered):
                out.append(f"{rel}:{number}: {line.strip()}")
                break
    return out


def scanned_files(root: Path) -> list[tuple[str, Path]]:
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if (not path.is_file() or "__pycache__" in path.parts or not _matches(rel, SCANNED)
                or rel in NOT_SCANNED):
            continue
        out.append((rel, path))
    return out


def test_backend_means_localai_or_ggml_only() -> None:
    root = paths.project_root()
    found: list[str] = []
    files = scanned_files(root)
    assert len(files) > 100, f"scanned only {len(files)} files under {root}: the globs lost the tree"
    for rel, path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary (a PNG); no prose in it
        found += violations(rel, text)
    assert not found, ("'backend' is LocalAI's backend name or a ggml backend; our pybind11 module is the "
                       "binding and what a variant computes on is its platform. Rename these (or, for a new "
                       "LocalAI/ggml sense, add a narrow pattern to ALLOWED with its sense):\n" + "\n".join(found))


@pytest.mark.parametrize("line", [
    "class BackendArm:",
    "raise BackendError(msg)",
    'PATH_ENV = "HARNESS_BACKEND_PATH"',
    "def forced_only_backends(host):",
    '    if variant.backend != "cpu":',
    "    backend: str",
    '    source_dir = engine.root / "backend"',
    '"""The backend module\'s parameters."""',
])
def test_the_old_senses_are_flagged(line: str) -> None:
    assert violations("engines/llamacpp/plugin/bench.py", line)


@pytest.mark.parametrize("line", ["class BackendArm:", "raise BackendError(msg)", 'PATH_ENV = "HARNESS_BACKEND_PATH"',
                                  "def forced_only_backends(host):"])
def test_the_localai_modules_allow_only_localai_names(line: str) -> None:
    assert violations("harness/config/select.py", line)


@pytest.mark.parametrize(("rel", "line"), [
    ("engines/llamacpp/binding/src/engine.cpp", "ggml_backend_load_all_from_path(params.backend_dir.c_str());"),
    ("engines/llamacpp/plugin/emulated.py", r'_LOADED_RE = re.compile(r"loaded CPU backend from \S*libggml-cpu-")'),
    ("engines/vllmcpp/plugin/__init__.py", "Model configs with ``backend: vllm-cpp`` (LocalAI's"),
    ("engines/llamacpp/plugin/__init__.py", "LocalAI calls this backend ``llama-cpp`` (``llama``, ``llama.cpp``)."),
    ("harness/config/localai.py", "def resolve_backend(name: str, engines: Collection[str]) -> BackendVerdict:"),
])
def test_the_allowed_senses_pass(rel: str, line: str) -> None:
    assert violations(rel, line) == []
