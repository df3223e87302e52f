"""Engine descriptors: ``engines/<name>/engine.yaml``, validated by a JSON Schema."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness import paths
from harness.errors import ConfigError, UnknownNameError
from harness.types import EngineSpec, SourceSpec

DESCRIPTOR = "engine.yaml"


@functools.cache
def engine_schema() -> dict[str, Any]:
    text = resources.files("harness").joinpath("schemas/engine.schema.json").read_text()
    return dict(json.loads(text))


def engines_dir() -> Path:
    return paths.project_root() / "engines"


def engine_names() -> list[str]:
    return sorted(p.parent.name for p in engines_dir().glob(f"*/{DESCRIPTOR}"))


def _expand(value: str, upstream: dict[str, Any]) -> str:
    """Replace ``{upstream.key}`` placeholders so the pin is written once."""

    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in upstream:
            msg = f"placeholder {{upstream.{key}}} has no value in upstream:"
            raise ConfigError(msg)
        return str(upstream[key])

    return re.sub(r"\{upstream\.(\w+)\}", sub, value)


def load_engine(name: str) -> EngineSpec:
    """Load and validate one engine descriptor; unknown names get a 'did you mean'."""
    path = engines_dir() / name / DESCRIPTOR
    if not path.is_file():
        raise UnknownNameError("engine", name, engine_names())
    return parse_engine(path)


def parse_engine(path: Path) -> EngineSpec:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        msg = f"{path}: not valid YAML: {e}"
        raise ConfigError(msg) from e
    errors = sorted(jsonschema.Draft202012Validator(engine_schema()).iter_errors(data), key=str)
    if errors:
        lines = [f"{path}: {'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
        msg = "invalid engine descriptor:\n" + "\n".join(lines)
        raise ConfigError(msg)
    if data["name"] != path.parent.name:
        msg = f"{path}: name {data['name']!r} must match its folder {path.parent.name!r}"
        raise ConfigError(msg)
    upstream = dict(data["upstream"])
    cmake = dict(data["cmake"])
    cmake["base"] = {k: _expand(str(v), upstream) for k, v in cmake["base"].items()}
    return EngineSpec(
        name=data["name"],
        root=path.parent,
        source=SourceSpec(**data["source"]),
        upstream=upstream,
        cmake=cmake,
        targets=tuple(data["targets"]),
        artifacts={k: tuple(v) for k, v in data["artifacts"].items()},
        abi=dict(data["abi"]),
        pinned_on=str(data.get("pinned_on", "")),
        variants=tuple(data.get("variants", ())),
        raw=data,
    )
