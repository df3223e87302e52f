"""Semantic rules every model config gets, whatever its backend (SPEC.md section 4).

The core checks what LocalAI itself would refuse for any backend: the backend name,
paths that leave the models directory, files that are not there (when a models
directory is known), non-finite numbers, draft references. Rules that belong to one
engine (which files it loads, how its options are spelled, a video family's grids and
checkpoints) are the registered engine's ``config_check``; a backend no registered
engine claims gets only these and the schema.

Each rule reads the document's plain data (it may be schema-invalid, so every access
is type-guarded) plus the resolved options, and returns diagnostics.
"""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import refs
from harness.config.kinds import config_kind
from harness.config.loader import Diagnostic, Document, Path_, dotted
from harness.config.localai import (
    BackendVerdict,
    localai_label,
    model_optional,
    remote_scheme,
    resolve_backend,
    served_by,
    usecase_flag,
    vocabulary,
)
from harness.config.model import option_specs
from harness.config.options import ResolvedOptions
from harness.core.errors import did_you_mean

DRAFT_CONFIG_KEYS = ("model", "draft_model")
REMOTE_NOTE = "fetched by LocalAI, not checked here"


@dataclass(frozen=True, kw_only=True)
class Context:
    """What rules may consult besides the document."""

    engines: frozenset[str]
    models_dir: Path | None = None
    template: bool = False
    """A gallery template body: ``name`` and ``parameters.model`` come from the gallery entry."""
    non_finite: tuple[tuple[Path_, float], ...] | None = None
    """The document's NaNs and infinities when the caller has them already (else found here)."""
    localai: str | None = None
    """The LocalAI release whose backend names judge the config (a tag of the generated history);
    None: the pinned commit's."""


@dataclass(frozen=True, kw_only=True)
class CheckContext:
    """The ``context`` of an engine's ``config_check``: locate findings with :meth:`error` / :meth:`warn`.

    ``engine`` is the registered engine the config's ``backend`` resolves to (LocalAI's
    backend names included, through ``localai.yaml``), None when the backend is unset or
    served by no registered engine: a plugin checks the configs of its own engine only.
    """

    document: Document
    options: ResolvedOptions
    engines: frozenset[str]
    models_dir: Path | None = None
    engine: str | None = None
    template: bool = False

    @property
    def data(self) -> dict[str, Any]:
        return self.document.data if isinstance(self.document.data, dict) else {}

    def error(self, path: Path_, message: str, *, key: bool = False, code: str = "HRN017") -> Diagnostic:
        """A finding of rule ``code`` (the engine's own, :func:`harness.config.refs.register`):
        reported with the rule's severity, a note when the rule has no reference."""
        return self.document.diag(path, "error", message, key=key, code=code)

    def warn(self, path: Path_, message: str, *, key: bool = False, code: str = "HRN017") -> Diagnostic:
        return self.document.diag(path, "warning", message, key=key, code=code)

    def note(self, path: Path_, message: str, *, key: bool = False, code: str = "HRN017") -> Diagnostic:
        """A finding about this harness's coverage, not about the config: never fails a run."""
        return self.document.diag(path, "note", message, key=key, code=code)

    def local_file(self, value: str) -> Path | None:
        """``value`` resolved in the models directory when it names something there, else None."""
        if self.models_dir is None or remote_scheme(value) or path_problem("x", value):
            return None
        full = self.models_dir / value
        return full if os.path.exists(full) else None  # a name too long to exist is absent, not an OSError


def path_problem(label: str, value: str) -> str | None:
    """Why a models-dir-relative path is refused (absolute, or escaping with ``..``), else None."""
    if not value.strip():
        return f"{label} is empty"
    if value.startswith(("/", "\\")) or (len(value) > 1 and value[1] == ":"):
        return (f"{label} must be relative to the models directory, found absolute path {value!r}; "
                "move the file under the models directory")
    norm = posixpath.normpath(value.replace("\\", "/"))
    if norm == ".." or norm.startswith("../"):
        return f"{label} {value!r} escapes the models directory with '..'"
    return None


def resolve_draft(ref: str, models_dir: Path) -> tuple[Path | None, list[Path]]:
    """Find a draft model: as given, models dir + last segment, models dir + full reference."""
    given = Path(ref).expanduser()
    candidates = [given, models_dir / Path(ref.rstrip("/")).name, models_dir / ref]
    looked: list[Path] = []
    for c in candidates:
        if c in looked:
            continue
        looked.append(c)
        if os.path.exists(c):  # a name too long to exist is absent, not an OSError
            return c, looked
    return None, looked


def str_at(data: Any, *keys: str) -> str | None:
    """The string at ``data[k1][k2]...``, else None (any level may be of the wrong type)."""
    cur: Any = data
    for k in keys:
        cur = cur.get(k) if isinstance(cur, dict) else None
    return cur if isinstance(cur, str) else None


def non_finite(data: Any) -> Iterator[tuple[Path_, float]]:
    """Every NaN or infinity in ``data`` (YAML's ``.nan`` / ``.inf``), with its path."""
    # Containers are walked without building a path for every value: one is made for a hit only.
    stack: list[tuple[Path_, Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                yield path, value
            continue
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for k, v in items:
            if isinstance(v, float):
                if not math.isfinite(v):
                    yield (*path, k), v
            elif isinstance(v, dict | list):
                stack.append(((*path, k), v))


class Rules:
    def __init__(self, doc: Document, opts: ResolvedOptions, ctx: Context) -> None:
        self.doc, self.opts, self.ctx = doc, opts, ctx
        self.data: dict[str, Any] = doc.data if isinstance(doc.data, dict) else {}
        self.out: list[Diagnostic] = []

    def rule(self, code: str, path: Path_, msg: str, *, key: bool = False) -> None:
        """A finding of a coded rule (:mod:`harness.config.refs`): its severity is the rule's."""
        self.out.append(self.doc.diag(path, refs.severity(code), msg, key=key, code=code))

    def run(self) -> list[Diagnostic]:
        self.numbers()
        self.backend()
        self.alias()
        self.model_path()
        self.mmproj()
        self.option_paths()
        self.draft()
        self.usecases()
        self.mcp()
        self.compression()
        self.proxy()
        self.router()
        self.templates()
        return self.out

    # -- rules ---------------------------------------------------------------

    def numbers(self) -> None:
        found = self.ctx.non_finite if self.ctx.non_finite is not None else tuple(non_finite(self.data))
        for path, value in sorted(found, key=lambda p: self.doc.where(p[0])):
            where = dotted(path)
            self.rule("HRN001", path, f"{where}: expected a finite number, found {value!r} (LocalAI passes "
                                      "it on; NaN and infinity are never valid settings here)")

    def backend(self) -> None:
        backend = str_at(self.data, "backend")
        if not backend:
            return  # Validate() checks a backend name only when one is given; "" is none
        verdict = resolve_backend(backend, self.ctx.engines, release=self.ctx.localai)
        if verdict.kind == "refused":
            if backend.startswith("/") or ".." in backend:
                # Validate() checks the backend among the file paths first: refused there
                self.rule("LAI002", ("backend",), f"backend {backend!r}: LocalAI refuses it as an invalid file "
                                                  "path (absolute or with '..')")
            else:
                self.rule("LAI003", ("backend",), verdict.message)
            return
        if verdict.kind in ("unknown", "removed") and config_kind(self.data).kind == "pattern":
            # IsPatternDetector: matched in-process, no backend is looked up or loaded
            return
        if verdict.alias_of:
            self.legacy_alias(verdict)
        code = {"localai": "HRN003", "unknown": "LAI016", "removed": "LAI025"}.get(verdict.kind)
        if code is not None:
            self.rule(code, ("backend",), verdict.message)

    def legacy_alias(self, verdict: BackendVerdict) -> None:
        """A legacy name LocalAI maps to its current one: a note naming it; a warning when the name was
        a backend of its own and the config's model is the old backend's asset directory."""
        name, target = verdict.name, str(verdict.alias_of)
        entry = vocabulary().backends.get(name)
        kind = f" and type: {entry.alias_type}" if entry is not None and entry.alias_type else ""
        self.rule("LAI026", ("backend",), f"backend {name!r} is a legacy alias {localai_label(verdict.release)} "
                                          f"maps to {target!r}: write backend: {target}{kind} "
                                          "(harness config migrate does)")
        was = vocabulary().history.was_backend(name)
        model = str_at(self.data, "parameters", "model")
        # only where an engine here loads the target (one model file): a transformers target takes a
        # Hugging Face id without a suffix, which is no old asset directory
        if was is None or served_by().get(target) is None or not model or remote_scheme(model) \
                or posixpath.splitext(model.rstrip("/"))[1]:
            return
        self.rule("LAI027", ("parameters", "model"),
                  f"parameters.model {model!r} names no model file (the asset directory of the old "
                  f"{name!r} backend?): {name!r} was a backend of its own until {was.commit[:12]} "
                  f"({was.subject!r}); LocalAI now loads {target!r} for it, which loads one model file and "
                  "fails at load on a directory")

    def alias(self) -> None:
        if config_kind(self.data).kind != "alias":
            return
        if isinstance(self.data.get("artifacts"), list) and self.data["artifacts"]:
            self.rule("LAI024", ("artifacts",), f"an alias (alias: {self.data['alias']!r}) cannot declare artifacts: "
                                                "LocalAI refuses it", key=True)
        name = self.data.get("name")
        if not isinstance(name, str) or not name:
            self.rule("LAI011", ("alias",), f"an alias (alias: {self.data['alias']!r}) without a name: "
                                            "LocalAI refuses it", key=True)
        elif name == self.data["alias"]:
            self.rule("LAI012", ("alias",), f"alias {name!r} names itself: LocalAI refuses it")
        for path in (("backend",), ("parameters", "model")):
            value = str_at(self.data, *path)
            if value:
                self.rule("LAI001", path, f"{dotted(path)} {value!r} in an alias (alias: "
                                          f"{self.data['alias']!r}): LocalAI refuses an alias that sets backend "
                                          "or parameters.model; an alias is a pure redirect, drop it")

    def usecases(self) -> None:
        cases = self.data.get("known_usecases")
        if not isinstance(cases, list):
            return
        known = [f.removeprefix("FLAG_").lower() for f in vocabulary().usecase_flags]
        for i, value in enumerate(cases):
            if isinstance(value, str) and usecase_flag(value) is None:
                self.rule("LAI005", ("known_usecases", i),
                          f"known_usecases[{i}] {value!r} is not a use case LocalAI knows: it drops it"
                          f"{did_you_mean(value.lower().removeprefix('flag_'), known)}")

    def mcp(self) -> None:
        block = self.data.get("mcp")
        if not isinstance(block, dict):
            return
        for key in ("remote", "stdio"):
            text = block.get(key)
            if isinstance(text, str) and text.strip():
                problem = mcp_problem(text)
                if problem:
                    self.rule("LAI004", ("mcp", key), f"mcp.{key}: {problem}: LocalAI refuses the config "
                                                      "(invalid MCP configuration)")

    def compression(self) -> None:
        block = self.data.get("compression")
        if not isinstance(block, dict) or block.get("enabled") is not True:
            return
        at: Path_ = ("compression",)
        proxy = self.data.get("proxy")
        mode = proxy.get("mode") if isinstance(proxy, dict) else None
        ratio, overflow = block.get("trigger_at_ratio"), block.get("on_post_compression_overflow")
        if str_at(self.data, "backend") == "cloud-proxy" and mode in (None, "", "passthrough"):
            self.rule("LAI019", at, "compression on a cloud-proxy passthrough: LocalAI refuses it (set proxy.mode "
                                    "translate)", key=True)
        elif isinstance(ratio, int | float) and not isinstance(ratio, bool) and not 0 <= ratio <= 1:
            self.rule("LAI019", (*at, "trigger_at_ratio"), f"compression.trigger_at_ratio {ratio!r} is outside "
                                                           "0..1: LocalAI refuses it")
        elif any(isinstance(block.get(k), int) and not isinstance(block.get(k), bool) and block[k] < 0
                 for k in ("keep_tail_tokens", "max_summary_tokens")):
            self.rule("LAI019", at, "compression token limits cannot be negative: LocalAI refuses it", key=True)
        elif isinstance(overflow, str) and overflow not in ("", "error", "drop_oldest_summary"):
            self.rule("LAI019", (*at, "on_post_compression_overflow"),
                      f"compression.on_post_compression_overflow {overflow!r} is not error or drop_oldest_summary: "
                      "LocalAI refuses it")

    def proxy(self) -> None:
        block = self.data.get("proxy")
        if not isinstance(block, dict):
            return
        if block.get("api_key_env") and block.get("api_key_file"):
            self.rule("LAI020", ("proxy", "api_key_file"), "proxy.api_key_env and proxy.api_key_file are mutually "
                                                           "exclusive: LocalAI refuses the config", key=True)
        mode = block.get("mode")
        if isinstance(mode, str) and mode not in ("", "passthrough", "translate"):
            self.rule("LAI021", ("proxy", "mode"), f"proxy.mode {mode!r} is not passthrough or translate: LocalAI "
                                                   f"refuses the config{did_you_mean(mode, ['passthrough', 'translate'])}")
        elif mode == "translate" and not block.get("provider"):
            self.rule("LAI022", ("proxy", "mode"), "proxy.mode translate needs proxy.provider (openai or "
                                                   "anthropic): LocalAI refuses the config")

    def router(self) -> None:
        block = self.data.get("router")
        value = block.get("score_normalization") if isinstance(block, dict) else None
        if isinstance(value, str) and value not in ("", "raw", "mean"):
            self.rule("LAI023", ("router", "score_normalization"),
                      f"router.score_normalization {value!r} is not raw or mean: LocalAI refuses the config"
                      f"{did_you_mean(value, ['raw', 'mean'])}")

    def templates(self) -> None:
        block = self.data.get("template")
        if not isinstance(block, dict) or self.ctx.models_dir is None:
            return
        for key in ("chat", "chat_message", "completion", "edit", "function", "multimodal"):
            name = block.get(key)
            if not isinstance(name, str) or not looks_like_template_file(name):
                continue
            if not os.path.isfile(self.ctx.models_dir / f"{name}.tmpl"):
                self.rule("LAI006", ("template", key),
                          f"template.{key} {name!r} names no file: {name}.tmpl is not in the models directory "
                          f"{self.ctx.models_dir}, so LocalAI renders the text {name!r} itself as the prompt")

    def _check_path(self, path: Path_, label: str, value: str) -> None:
        """Shape and existence of a models-dir path; a remote URI is only noted."""
        scheme = remote_scheme(value)
        if scheme is not None:
            self.rule("HRN004", path, f"{label} {value!r} is a remote model ({scheme}): {REMOTE_NOTE}")
            return
        if not value.strip():
            # no path Validate() checks (it skips an empty one): only a config that needs a model misses it
            if path == ("parameters", "model") and not self._model_optional(path) \
                    and config_kind(self.data).loads_model:
                self.rule("LAI008", path, f"{label} is empty: the backend is handed no model and fails at load")
            return
        problem = path_problem(label, value)
        if problem:
            self.rule("LAI002", path, problem)
        elif self.ctx.models_dir is not None and not os.path.exists(self.ctx.models_dir / value):
            self.rule("LAI017", path, f"{label} {value!r} not found in the models directory {self.ctx.models_dir}")

    def _model_optional(self, path: Path_) -> bool:
        """An empty parameters.model where the backend loads no model file (localai.yaml says which)."""
        return path == ("parameters", "model") and bool(model_optional(str_at(self.data, "backend")))

    def model_path(self) -> None:
        model = str_at(self.data, "parameters", "model")
        if model is not None:
            self._check_path(("parameters", "model"), "parameters.model", model)

    def mmproj(self) -> None:
        mmproj = str_at(self.data, "mmproj")
        if mmproj is not None:
            self._check_path(("mmproj",), "mmproj", mmproj)

    def option_paths(self) -> None:
        specs = option_specs()
        for key, s in self.opts.values.items():
            if specs[key].path and isinstance(s.value, str) and s.path is not None:
                self._check_path(s.path, key, s.value)

    def draft(self) -> None:
        refs: list[tuple[Path_, str]] = []
        # an empty draft_model is LocalAI's default (no draft model), not a reference
        top = str_at(self.data, "draft_model") or None
        if top is not None:
            refs.append((("draft_model",), top))
        spec = self.opts.values.get("speculative_config")
        if spec is not None and isinstance(spec.value, dict) and spec.path is not None:
            refs += [(spec.path, spec.value[k]) for k in DRAFT_CONFIG_KEYS if isinstance(spec.value.get(k), str)]
        kind = self.opts.values.get("spec_type")
        if kind is not None and kind.path is not None:
            if kind.value == "draft-simple" and top is None:
                self.rule("HRN012", kind.path, "spec_type draft-simple needs a draft model: set draft_model "
                                               "(or spec_type ngram-simple to draft from the sequence itself)")
            elif kind.value in ("ngram-simple", "none") and top is not None:
                self.rule("HRN018", kind.path, f"spec_type {kind.value} does not use draft_model {top!r}")
        models_dir = self.ctx.models_dir
        for path, ref in refs:
            if not ref.strip():
                self.rule("HRN012", path, "draft model reference is empty")
            elif remote_scheme(ref):
                self.rule("HRN004", path, f"draft model {ref!r} is a remote model: {REMOTE_NOTE}")
            elif models_dir is not None and resolve_draft(ref, models_dir)[0] is None:
                looked = resolve_draft(ref, models_dir)[1]
                self.rule("LAI017", path, f"draft model {ref!r} not found; looked in: "
                                          f"{', '.join(str(p) for p in looked)}")


def looks_like_template_file(value: str) -> bool:
    """A template value LocalAI looks up as ``NAME.tmpl`` first: one line, no template action."""
    return bool(value.strip()) and "{{" not in value and "\n" not in value.strip()


def mcp_problem(text: str) -> str | None:
    """Why yaml.Unmarshal cannot read an mcp block into ``{mcpServers: {NAME: {...}}}``, else None."""
    from harness.config.loader import load_text

    docs, problems = load_text(text, "<mcp>")
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        return f"not YAML or JSON ({errors[0].message}, line {errors[0].line})"
    data = docs[0].data if docs else None
    if data is None:
        return None
    if not isinstance(data, dict):
        return "not a mapping"
    servers = data.get("mcpServers")
    if servers is not None and not isinstance(servers, dict):
        return "mcpServers is not a mapping of server names"
    if isinstance(servers, dict):
        for name, server in servers.items():
            if server is not None and not isinstance(server, dict):
                return f"mcpServers.{name} is not a mapping"
    return None


def check(doc: Document, opts: ResolvedOptions, ctx: Context) -> list[Diagnostic]:
    """The core rules for one config document."""
    return Rules(doc, opts, ctx).run()

