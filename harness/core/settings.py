"""Every ``HARNESS_*`` environment variable, declared once: name, default, what it does.

The README's table is generated from :data:`SETTINGS` (``nox -s generate_settings``, or
``python scripts/generate_settings_table.py``); ``tests/unit/test_settings.py`` fails on a
``HARNESS_*`` name in the sources that is not declared here, on a declaration nothing uses, and on a
README table that differs from the generated one.

``group`` says who sets a variable: ``user`` (operators and release engineers), ``tests`` (the
inputs of the e2e specs and test sessions: model paths, artifacts; ``harness models env`` prints
the model ones), ``internal`` (the harness sets it for its own child processes; documented so that
nobody reuses the name).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

GROUPS = ("user", "tests", "internal")


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One environment variable the harness reads."""

    name: str
    default: str
    """What applies when it is unset, as a reader of the table needs it."""
    doc: str
    group: str = "user"

    def get(self, environ: Mapping[str, str] | None = None) -> str | None:
        """Its value in ``environ`` (default: ``os.environ``), None when unset or empty."""
        value = (os.environ if environ is None else environ).get(self.name, "")
        return value or None


SETTINGS: tuple[Setting, ...] = (
    # -- where things are
    Setting(name="HARNESS_CACHE", default="~/.cache/harness",
            doc="caches: sources, builds, artifacts (dist/), models, toolchains, locks; never inside the checkout"),
    Setting(name="HARNESS_DIST", default="$HARNESS_CACHE/dist", doc="installed artifacts (one directory per variant)"),
    Setting(name="HARNESS_ROOT", default="the checkout the package sits in, else `<prefix>/share/harness`",
            doc="the project data root (engines/, matrix/, abi/, patches/)"),
    Setting(name="HARNESS_ENGINES_PATH", default="unset",
            doc="more engine descriptor folders, os.pathsep-separated, searched before the built-in engines/"),
    Setting(name="HARNESS_MIRRORS", default="unset",
            doc="this machine's folder of local git mirrors and source archives: a descriptor names one as "
                "$HARNESS_MIRRORS/PATH (harness pin writes that form for a path under it), never by its absolute path"),
    Setting(name="HARNESS_BINDING_PATH", default="unset",
            doc="more directories holding bindings (pybind11 modules), os.pathsep-separated"),
    Setting(name="HARNESS_MODELS_DIR", default="the config file's directory",
            doc="where model configs' model paths resolve (--models-dir wins)"),
    Setting(name="HARNESS_FFMPEG", default="ffmpeg on PATH, else the imageio-ffmpeg wheel's",
            doc="the ffmpeg binary the video path runs (the model option ffmpeg wins)"),
    # -- build
    Setting(name="HARNESS_JOBS", default="the usable CPU count", doc="parallel jobs of a CMake build"),
    Setting(name="HARNESS_PYPI_INDEX", default="unset",
            doc="deprecated: the package index for pinned sources; set PIP_INDEX_URL instead (read as it)"),
    # -- runtime
    Setting(name="HARNESS_VARIANT", default="the best variant this host accepts",
            doc="the binding variant to load (cpu, vulkan, cuda, ...); also the e2e specs' --variant"),
    Setting(name="HARNESS_CPU_LEVEL", default="the best level that passed the smoke probe",
            doc="force one CPU level of the cpu variant (haswell, skylakex, zen4, ...)"),
    Setting(name="HARNESS_BINDING_LIB_DIR", default="the artifact's lib/",
            doc="replace the artifact's ggml plugin directory (with level=NAME: run that level from it)"),
    Setting(name="HARNESS_MALLOC_HUGETLB", default="1 (on)",
            doc="0: engine processes run without glibc's malloc hugepages (the report says which)"),
    Setting(name="HARNESS_DISABLE_PLUGIN_AUTOLOAD", default="unset",
            doc="1: load no third-party plugins from the harness entry-point group (the harness distribution's own "
                "entries still load) and import no engine folder's plugin/, trusted or not"),
    Setting(name="HARNESS_TRUST", default="unset",
            doc="engine names (comma-separated) whose recipes are trusted though they come from an "
                "$HARNESS_ENGINES_PATH folder or git history (--trust NAME adds one; README: Trust model)"),
    Setting(name="HARNESS_NO_SANDBOX", default="unset",
            doc="1: builds run on the host, not in the bubblewrap sandbox (--no-sandbox); an untrusted recipe "
                "is otherwise refused where the sandbox cannot run"),
    # -- serve
    Setting(name="HARNESS_API_KEY", default="unset", doc="the API key harness serve requires (--api-key wins)"),
    Setting(name="HARNESS_SERVE_DIRECT", default="1",
            doc="0: every streamed delta goes through the server process instead of straight from the worker"),
    Setting(name="HARNESS_SERVE_LOOP", default="uvloop where installed",
            doc="asyncio: harness serve runs on asyncio's own event loop"),
    # -- output
    Setting(name="HARNESS_NO_PROGRESS", default="unset",
            doc="1: no progress bars or heartbeat lines (as -q, but info messages stay)"),
    # -- tests: models and artifacts the e2e specs and test sessions use
    Setting(name="HARNESS_MODEL", default="unset (harness models env: SmolLM2 Q4_1)",
            doc="the GGUF model of the text e2e specs, bench and agree", group="tests"),
    Setting(name="HARNESS_CHAT_MODEL", default="unset (harness models env)",
            doc="the chat-template GGUF model of the chat e2e specs", group="tests"),
    Setting(name="HARNESS_EMBED_MODEL", default="unset (harness models env)",
            doc="the embedding GGUF model (MiniLM) of the embeddings specs", group="tests"),
    Setting(name="HARNESS_EMBED_DIR", default="unset (harness models env)",
            doc="the MiniLM safetensors directory (the safetensors -> GGUF path)", group="tests"),
    Setting(name="HARNESS_TINY_MODEL", default="unset (harness models env)",
            doc="the tiny random-weight GGUF of the fast specs", group="tests"),
    Setting(name="HARNESS_BANDWIDTH_MODEL", default="unset (harness models env)",
            doc="the random 0.72B Q4_0 model whose decode is bound by memory bandwidth", group="tests"),
    Setting(name="HARNESS_VLLM_MODEL", default="unset (harness models env --engine vllmcpp)",
            doc="the model vllm.cpp's specs load (HF directory or GGUF)", group="tests"),
    Setting(name="HARNESS_VLLM_PAIR_GGUF", default="unset (harness models env --engine vllmcpp)",
            doc="HARNESS_VLLM_MODEL converted to GGUF by the default text engine's converter: the cross-engine pair", group="tests"),
    Setting(name="HARNESS_ARTIFACT", default="the built cpu artifact",
            doc="the artifact directory the e2e specs run on", group="tests"),
    Setting(name="HARNESS_VIDEO_TINY", default="unset (the video render spec skips)",
            doc="directory of the tiny video model set the video render spec writes and renders", group="tests"),
    Setting(name="HARNESS_VIDEO_MODEL", default="unset", doc="a real video DiT (.gguf/.safetensors) for the slow "
            "video spec", group="tests"),
    Setting(name="HARNESS_VIDEO_VAE", default="unset", doc="the video model's VAE for the slow video spec", group="tests"),
    Setting(name="HARNESS_VIDEO_ENCODER", default="unset (an unconditioned render)",
            doc="the umt5-xxl text encoder for the slow video spec", group="tests"),
    Setting(name="HARNESS_VIDEO_STEPS", default="4", doc="sampling steps of the slow video spec", group="tests"),
    Setting(name="HARNESS_VIDEO_THREADS", default="the engine's default",
            doc="threads of the video engine's render", group="tests"),
    Setting(name="HARNESS_LOCALAI_CORPUS", default="unset",
            doc="a directory of real LocalAI configs for nox -s localai_corpus", group="tests"),
    # -- internal: set by the harness for its own child processes
    Setting(name="HARNESS_CRASH_NOTE", default="set by the parent",
            doc="file a supervised child writes what it was running into (named in a crash report)",
            group="internal"),
    Setting(name="HARNESS_SUPERVISED", default="set by the parent",
            doc="marks a command already running under crash supervision", group="internal"),
    Setting(name="HARNESS_BENCH_ENV_PAD", default="set per worker",
            doc="random padding (0-4 KiB) of each bench worker's environment: moves the initial stack",
            group="internal"),
)

#: ``HARNESS_*`` names that are not environment variables: CMake cache entries the binding build
#: passes to its CMakeLists (``harness/binding/wheel.py``).
NOT_ENVIRONMENT = frozenset({"HARNESS_PACKAGE", "HARNESS_PIN", "HARNESS_ABI_FINGERPRINT", "HARNESS_BUILD_NUMBER"})

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    """The declared setting ``name``; a KeyError names an undeclared one (declare it in SETTINGS)."""
    return BY_NAME[name]


def markdown_table() -> str:
    """The README's table of environment variables, one row per setting, grouped as :data:`GROUPS`."""
    rows = ["| variable | default | what it does | set by |", "|---|---|---|---|"]
    for group in GROUPS:
        rows += [f"| `{s.name}` | {s.default} | {s.doc} | {group} |" for s in SETTINGS if s.group == group]
    return "\n".join(rows) + "\n"
