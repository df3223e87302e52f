"""The kinds of model config LocalAI has, each recognised from its own fields.

Only a model-backed config needs ``parameters.model`` (a config with ``artifacts:`` is handed its
primary artifact); the others are served without one, so
``parameters.model`` is no rule of theirs (an alias even must not set it). Each kind names the
LocalAI line that makes it one (an anchor of the generated ``localai_index.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from harness.config.localai import vocabulary

Kind = Literal["model", "alias", "pipeline", "cloud-proxy", "router", "pattern", "store", "no-model-backend",
               "artifacts"]
#: LocalAI backends that keep vectors and load no model file (the router's KNN store among them).
STORE_BACKENDS = ("local-store", "valkey-store")


@dataclass(frozen=True)
class ConfigKind:
    kind: Kind
    anchor: str = ""
    """The index anchor of the LocalAI line that makes it this kind."""

    @property
    def loads_model(self) -> bool:
        return self.kind == "model"


def _mapping(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def config_kind(data: Any) -> ConfigKind:
    """What ``data`` (a config mapping, maybe schema-invalid) is to LocalAI."""
    if not isinstance(data, dict):
        return ConfigKind("model")
    if isinstance(data.get("alias"), str) and data["alias"]:
        return ConfigKind("alias", "is_alias")
    pii = _mapping(data, "pii_detection")
    if pii.get("builtins") or pii.get("patterns"):
        return ConfigKind("pattern", "is_pattern_detector")
    if _mapping(data, "router").get("candidates"):
        return ConfigKind("router", "has_router")
    backend = data.get("backend") if isinstance(data.get("backend"), str) else ""
    if backend == "cloud-proxy":
        return ConfigKind("cloud-proxy", "cloud_proxy")
    entry = vocabulary().backend(backend) if backend else None
    if entry is not None and entry.name in STORE_BACKENDS:
        return ConfigKind("store", "store_backend")
    pipeline = _mapping(data, "pipeline")
    if pipeline:
        # a realtime pipeline chains the models it names; its own backend, if any, loads nothing
        return ConfigKind("pipeline", "pipeline")
    if entry is not None and entry.model_optional:
        return ConfigKind("no-model-backend")
    artifacts = data.get("artifacts")
    if isinstance(artifacts, list) and artifacts:
        # the primary artifact is the model file the backend is handed (ModelFileName)
        return ConfigKind("artifacts", "artifact_model_file")
    return ConfigKind("model")
