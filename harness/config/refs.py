"""One rule, one reference: the codes of ``harness validate``'s LocalAI rules and the line of
LocalAI that makes each true (``harness validate --explain CODE``).

A rule's severity is what LocalAI does: error, LocalAI refuses the file or the backend fails at
load; warning, LocalAI loads it but drops or changes the value. The reference is an anchor of the
generated ``localai_index.yaml`` (``nox -s refresh_localai_index``), so it moves with the pin; a
rule whose anchor the index lacks is reported as a note, never as an error it cannot back.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.loader import Severity
from harness.config.localai import anchor


@dataclass(frozen=True, kw_only=True)
class Rule:
    code: str
    severity: Severity
    summary: str
    anchor: str
    """The index anchor of the LocalAI line that makes the rule true."""


_RULES = (
    Rule(code="LAI001", severity="error", anchor="alias_no_model",
         summary="an alias (alias: set) also sets backend or parameters.model: Validate() refuses it"),
    Rule(code="LAI002", severity="error", anchor="invalid_path",
         summary="backend, parameters.model, mmproj or a download_files name is absolute or holds '..': "
                 "Validate() refuses it"),
    Rule(code="LAI003", severity="error", anchor="backend_name",
         summary="a backend name of characters other than letters, digits, '-' and '_': Validate() refuses it"),
    Rule(code="LAI004", severity="error", anchor="mcp_invalid",
         summary="mcp.remote or mcp.stdio that yaml.Unmarshal cannot read into {mcpServers: {NAME: {...}}} "
                 "(MCPConfigFromYAML): Validate() refuses the config"),
    Rule(code="LAI005", severity="warning", anchor="usecases_from_yaml",
         summary="a known_usecases value that is neither a FLAG_* name nor one in any case: "
                 "GetUsecasesFromYAML drops it"),
    Rule(code="LAI006", severity="warning", anchor="template_file",
         summary="a template that names a NAME.tmpl file the models directory lacks: LocalAI renders the "
                 "name itself as the prompt text"),
    Rule(code="LAI007", severity="warning", anchor="yaml_unmarshal",
         summary="a fractional number where LocalAI's field is an integer: yaml.v3 truncates it toward zero"),
    Rule(code="LAI008", severity="error", anchor="model_file",
         summary="a model-backed config with no parameters.model: the backend is given an empty model file "
                 "and fails at load (aliases, pipelines, cloud-proxy, routers, pattern detectors and stores "
                 "load no model file and are exempt)"),
    Rule(code="LAI009", severity="warning", anchor="yaml_unmarshal",
         summary="a key no field of ModelConfig takes: yaml.v3's Unmarshal drops it"),
)
RULES: dict[str, Rule] = {r.code: r for r in _RULES}


def reference(code: str) -> str:
    """``mudler/LocalAI@COMMIT file:line`` of the rule's anchor, "" when the index lacks it."""
    rule = RULES.get(code)
    return anchor(rule.anchor) if rule is not None else ""


def severity(code: str) -> Severity:
    """The rule's severity, a note when its reference is missing (a rule LocalAI's source does not back)."""
    rule = RULES[code]
    return rule.severity if reference(code) else "note"


def explain(code: str) -> str:
    """What ``harness validate --explain CODE`` prints."""
    rule = RULES[code.upper()]
    ref = reference(rule.code) or "none in the pinned index (reported as a note)"
    return f"{rule.code} ({severity(rule.code)}): {rule.summary}\n  LocalAI: {ref}"
