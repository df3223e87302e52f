"""One rule, one reference: the code of every finding ``harness validate`` makes and the source
line that makes it true (``harness validate --explain CODE``).

A rule's severity is what LocalAI does: error, LocalAI refuses the file or the backend fails at
load; warning, LocalAI loads it but drops or changes the value; note, coverage of this harness
only. A rule of this harness's own (``HRN``) is never an error: LocalAI loads what it finds; where
this harness's engine refuses such a config at load, the rule says so (``refused_here``) and the
commands that load a config (``video check``, ``select``, ``serve``) refuse it in the same words. Each reference is one of:

- an anchor of the generated ``localai_index.yaml`` (``nox -s refresh_localai_index``), so it moves
  with the LocalAI pin: ``LAI`` codes;
- for an engine's own check, the line of the engine's pinned source, given by the engine when it
  registers its rules (:func:`register`);
- for a check of this harness's own engine options, the function of this harness that refuses the
  value when its engine loads the config (``HRN`` codes with ``harness``).

A rule without a reference is reported as a note, never as an error it cannot back.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from harness.config.loader import Severity
from harness.config.localai import anchor


@dataclass(frozen=True, kw_only=True)
class Rule:
    code: str
    severity: Severity
    summary: str
    anchor: str = ""
    """The index anchor of the LocalAI line that makes the rule true."""
    source: str = ""
    """Or a reference given as text: an engine's pinned ``repository@commit path:line``."""
    harness: str = ""
    """Or this harness's own function that refuses the value at load (``module:function``)."""
    refused_here: bool = False
    """This harness's engine (or ``video check``, ``select``, ``serve``) refuses a config with this
    finding, though LocalAI loads it: a warning of ``harness validate``, a refusal of those commands."""


def _lai(code: str, severity: Severity, anchor: str, summary: str) -> Rule:
    return Rule(code=code, severity=severity, anchor=anchor, summary=summary)


def _hrn(code: str, severity: Severity, summary: str, harness: str = "", *, refused_here: bool = False) -> Rule:
    return Rule(code=code, severity=severity, summary=summary, harness=harness, refused_here=refused_here)


_RULES = (
    _lai("LAI001", "error", "alias_no_model",
         "an alias (alias: set) also sets backend or parameters.model: Validate() refuses it"),
    _lai("LAI002", "error", "invalid_path",
         "backend, parameters.model, mmproj or a download_files name is absolute or holds '..': "
         "Validate() refuses it"),
    _lai("LAI003", "error", "backend_name",
         "a backend name of characters other than letters, digits, '-' and '_': Validate() refuses it"),
    _lai("LAI004", "error", "mcp_invalid",
         "mcp.remote or mcp.stdio that yaml.Unmarshal cannot read into {mcpServers: {NAME: {...}}} "
         "(MCPConfigFromYAML): Validate() refuses the config"),
    _lai("LAI005", "warning", "usecases_from_yaml",
         "a known_usecases value that is neither a FLAG_* name nor one in any case: GetUsecasesFromYAML drops it"),
    _lai("LAI006", "warning", "template_file",
         "a template that names a NAME.tmpl file the models directory lacks: LocalAI renders the name itself "
         "as the prompt text"),
    _lai("LAI007", "warning", "yaml_unmarshal",
         "a fractional number where LocalAI's field is an integer: yaml.v3 truncates it toward zero"),
    _lai("LAI008", "error", "model_file",
         "a model-backed config with no parameters.model (and no artifacts): the backend is handed an empty "
         "model and fails at load (aliases, pipelines, cloud-proxy, routers, pattern detectors, stores and "
         "backends that load a default model are exempt)"),
    _lai("LAI009", "warning", "yaml_unmarshal",
         "a key no field of ModelConfig takes: yaml.v3's Unmarshal drops it"),
    _lai("LAI010", "warning", "configs_by_name",
         "a config without a name (or an empty file): Validate() accepts it and LocalAI stores it under the "
         "empty name, where no request names it and the next nameless config replaces it (a gallery body "
         "gets its name from its entry and is exempt)"),
    _lai("LAI011", "error", "alias_needs_name", "an alias without a name: Validate() refuses it"),
    _lai("LAI012", "error", "alias_self", "an alias that names itself: Validate() refuses it"),
    _lai("LAI013", "error", "unmarshal_refused",
         "YAML that yaml.v3 cannot decode into ModelConfig (a syntax error, a scalar where a mapping goes, a "
         "value of the wrong type, an integer out of range): LocalAI refuses the file"),
    _lai("LAI014", "warning", "yaml_unmarshal",
         "a second YAML document in a file: yaml.v3's Unmarshal decodes the first only and drops the rest"),
    _lai("LAI015", "warning", "configs_by_name",
         "two configs of one models directory with the same name: LocalAI keeps the one it reads last"),
    _lai("LAI016", "warning", "unknown_backend",
         "a backend in neither LocalAI's backend index nor this harness: LocalAI fails to load it unless a "
         "configured gallery has it"),
    _lai("LAI017", "error", "model_file",
         "parameters.model, mmproj or a draft model names no file of the models directory (--models-dir): "
         "the backend fails at load"),
    _lai("LAI018", "warning", "options_parser",
         "an options: key the backend's own parser does not compare with: the backend ignores it"),
    _lai("LAI019", "error", "compression_invalid",
         "compression enabled with settings Validate() refuses: on a cloud-proxy passthrough, trigger_at_ratio "
         "outside 0..1, a negative token limit, or an unknown on_post_compression_overflow"),
    _lai("LAI020", "error", "proxy_invalid", "proxy with both api_key_env and api_key_file: Validate() refuses it"),
    _lai("LAI021", "error", "proxy_mode", "proxy.mode other than passthrough or translate: Validate() refuses it"),
    _lai("LAI022", "error", "proxy_provider", "proxy.mode translate without a provider: Validate() refuses it"),
    _lai("LAI023", "error", "score_normalization",
         "router.score_normalization other than raw or mean: Validate() refuses it"),
    _lai("LAI024", "error", "alias_artifacts", "an alias that declares artifacts: Validate() refuses it"),
    _lai("LAI025", "error", "unknown_backend",
         "a backend LocalAI had and removed (its generated history names the commit and what came with it): "
         "no gallery has it any more, and the config fails to load"),
    _lai("LAI026", "note", "alias_resolved",
         "a legacy backend name LocalAI still maps (pkg/model's Aliases) to its current name"),
    _lai("LAI027", "warning", "alias_resolved",
         "a legacy name that was a backend of its own and now loads another backend, with a parameters.model "
         "written for the old one (a directory of its assets, not a model file)"),
    _hrn("HRN001", "note", "NaN or infinity: yaml.v3 decodes it and LocalAI passes it on; this harness "
                           "refuses it as a setting"),
    _hrn("HRN002", "note", "a value outside this harness's bounds or choices for a LocalAI key (LocalAI "
                           "passes it on unchanged)"),
    _hrn("HRN003", "note", "a LocalAI backend this harness does not build: only LocalAI's shared rules apply"),
    _hrn("HRN004", "note", "a remote model reference: LocalAI fetches it, this harness does not check it"),
    _hrn("HRN005", "note", "an options: key of a backend whose parser this harness has not read"),
    _hrn("HRN006", "warning", "an option of this harness's engines with a value its engine refuses at load "
                              "(LocalAI passes it on)", harness="harness.config.options:convert", refused_here=True),
    _hrn("HRN007", "warning", "an option given twice: the later value wins",
         harness="harness.config.options:_Resolver.set"),
    _hrn("HRN008", "note", "a gallery body: name and parameters.model come from its gallery entry"),
    _hrn("HRN009", "note", "LocalAI keys this harness accepts without using"),
    _hrn("HRN010", "note", "a gallery entry's descriptive field in a model config: LocalAI ignores it"),
    _hrn("HRN011", "note", "spec_type of LocalAI's that this harness's engine does not run"),
    _hrn("HRN012", "warning", "speculative decoding set up so this harness's engine refuses it at load "
                              "(LocalAI loads the config)", harness="harness.config.rules:Rules.draft", refused_here=True),
    _hrn("HRN013", "warning", "a video option this harness's video engine refuses at load (LocalAI loads the config)",
         harness="harness.config.video_rules:check_video", refused_here=True),
    _hrn("HRN014", "warning", "a video option this harness's video engine changes or does not use",
         harness="harness.config.video_rules:check_video"),
    _hrn("HRN015", "warning", "an engine's config check failed: the config was not checked by it",
         harness="harness.config.validate:Validator._plugin_checks"),
    _hrn("HRN016", "error", "a file that cannot be read (no such file, not a regular file, too large)",
         harness="harness.core.inputs:read_bytes"),
    _hrn("HRN017", "note", "an engine's finding that names no rule of its own"),
    _hrn("HRN018", "warning", "a spec_type that does not use the draft_model the config gives",
         harness="harness.config.rules:Rules.draft"),
    _hrn("HRN019", "warning", "the engine the backend names cannot render the config's video family: video check, "
                              "select and serve refuse it", harness="harness.families.table:render_refusal",
         refused_here=True),
)
RULES: dict[str, Rule] = {r.code: r for r in _RULES}


def register(*rules: Rule) -> None:
    """Add an engine's own rules (its codes, with the line of its pinned source as ``source``)."""
    added = False
    for rule in rules:
        known = RULES.get(rule.code)
        if known is not None and known != rule:
            msg = f"rule {rule.code} is registered twice, differently"
            raise ValueError(msg)
        if known is None:
            RULES[rule.code] = rule
            added = True
    if added:
        severity.cache_clear()


def all_rules() -> dict[str, Rule]:
    """Every rule: the core's and those of every registered engine (each engine's module names its
    own in ``config_rules()``, beside its ``config_check``)."""
    import sys

    from harness.engine import registry

    try:
        engines = registry.engines()
    except Exception:  # a broken plugin: the core's rules are still explained
        engines = {}
    for impl in engines.values():
        module = sys.modules.get(getattr(impl.config_check, "__module__", "") or "")
        rules = getattr(module, "config_rules", None)
        if callable(rules):
            register(*rules())
    return dict(sorted(RULES.items()))


@functools.cache
def _harness_line(target: str) -> str:
    """``path:line`` of ``module:qualname`` in this harness's source."""
    import importlib
    import inspect
    from pathlib import Path

    module_name, _, qualname = target.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    inner = inspect.unwrap(obj)  # type: ignore[arg-type]
    path = Path(inspect.getsourcefile(inner) or "")
    line = inspect.getsourcelines(inner)[1]
    root = Path(__file__).resolve().parents[2]
    return f"{path.relative_to(root) if path.is_relative_to(root) else path}:{line}"


def reference(code: str) -> str:
    """Where the rule is made true: a LocalAI ``repository@commit file:line``, an engine's pinned
    source line, or this harness's function; "" when there is none."""
    rule = RULES.get(code)
    if rule is None:
        return ""
    if rule.anchor:
        return anchor(rule.anchor)
    if rule.source:
        return rule.source
    if rule.harness:
        return f"harness {_harness_line(rule.harness)} ({rule.harness})"
    return ""


def _has_reference(rule: Rule) -> bool:
    return bool(anchor(rule.anchor)) if rule.anchor else bool(rule.source or rule.harness)


@functools.cache
def severity(code: str) -> Severity:
    """The rule's severity; a note when it has no reference (or no rule has that code)."""
    rule = RULES.get(code)
    if rule is None or not _has_reference(rule):
        return "note"
    return rule.severity


def refused_here(code: str) -> bool:
    """A finding of this rule is a refusal of this harness's commands that load the config (``video
    check``, ``select``, ``serve``), though LocalAI loads it (:attr:`Rule.refused_here`)."""
    rule = RULES.get(code)
    return rule is not None and rule.refused_here


def explain(code: str) -> str:
    """What ``harness validate --explain CODE`` prints."""
    rule = RULES[code.upper()]
    ref = reference(rule.code) or "none (coverage of this harness: reported as a note)"
    here = "; refused by video check, select and serve" if rule.refused_here else ""
    return f"{rule.code} ({severity(rule.code)}{here}): {rule.summary}\n  reference: {ref}"
