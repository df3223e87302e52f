"""Generate the model-config JSON Schema (draft 2020-12) from the dataclasses.

Types come from the fields' type hints, descriptions from the doc string under
each field (read with :mod:`ast`, as scikit-build-core's ``settings/json_schema.py``
does), extra constraints from ``metadata={"schema": ...}``. The result is
committed as ``harness/schemas/model-config.schema.json``; a unit test fails when
the two differ. Regenerate with ``python -m harness.config.schema`` (``nox -s
generate_schema``); ``--check`` only compares.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from harness.config import model
from harness.config.documentation import field_docs
from harness.config.localai import vocabulary

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "model-config.schema.json"
SCHEMA_ID = "https://harness.invalid/model-config.schema.json"


@functools.cache
def _json_default(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value


def type_schema(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema for one type hint; dataclasses go to ``defs`` and are referenced."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in args if a is not type(None)]
        words = [w for a in rest if typing.get_origin(a) is Literal for w in typing.get_args(a)]
        numbers = [a for a in rest if typing.get_origin(a) is not Literal]
        if words and len(numbers) == 1 and numbers[0] in (int, float):
            # a number or one of some words (int | Literal["auto"]): bounds apply to the number only
            kinds = [type_schema(numbers[0], defs)["type"], "string"]
            return {"type": [*kinds, "null"] if len(rest) < len(args) else kinds,
                    "pattern": f"^({'|'.join(re.escape(str(w)) for w in words)})$"}
        if len(rest) != 1:
            parts = [type_schema(a, defs) for a in rest]
            if all(set(p) == {"type"} and isinstance(p["type"], str) for p in parts):
                kinds = [p["type"] for p in parts]
                return {"type": [*kinds, "null"] if len(rest) < len(args) else kinds}
            return {"anyOf": parts + ([{"type": "null"}] if len(rest) < len(args) else [])}
        inner = type_schema(rest[0], defs)
        # Scalars accept null (an empty YAML value means "unset"); sections do not.
        if isinstance(inner.get("type"), str) and "$ref" not in inner:
            inner["type"] = [inner["type"], "null"]
            if "enum" in inner:
                inner["enum"] = [*inner["enum"], None]
        return inner
    if origin is Literal:
        return {"type": "string", "enum": list(args)}
    if origin in (tuple, list):
        return {"type": "array", "items": type_schema(args[0], defs)}
    if origin is dict:
        return {"type": "object"}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        name = hint.__name__
        if name not in defs:
            defs[name] = {}  # placeholder against recursion
            defs[name] = dataclass_schema(hint, defs)
        return {"$ref": f"#/$defs/{name}"}
    scalar = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if hint in scalar:
        return {"type": scalar[hint]}
    if hint is Any:
        return {}
    msg = f"no JSON Schema for type {hint!r}"
    raise TypeError(msg)


def dataclass_schema(cls: type, defs: dict[str, Any], *, closed: bool = True) -> dict[str, Any]:
    """An object schema for a dataclass: one property per field, described by its doc string."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        prop = type_schema(hints[f.name], defs)
        if f.name in docs:
            prop["description"] = docs[f.name]
        prop.update(f.metadata.get("schema", {}))
        if f.metadata.get("json"):
            prop["type"] = ["object", "string", "null"]
        if f.default is not dataclasses.MISSING and f.default is not None:
            prop["default"] = _json_default(f.default)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
        props[f.name] = prop
    out: dict[str, Any] = {"type": "object"}
    if cls.__doc__:
        out["description"] = inspect.cleandoc(cls.__doc__).split("\n\n")[0]
    if closed:
        out["additionalProperties"] = False
    if required:
        out["required"] = required
    out["properties"] = props
    return out


def _engine_keys(defs: dict[str, Any]) -> dict[str, Any]:
    """``engine_args``: the known option keys typed, other keys allowed (another engine's)."""
    props: dict[str, Any] = {}
    for cls in (model.EngineOptions, model.VideoOptions):
        props.update(dataclass_schema(cls, defs)["properties"])
    for alias, key in sorted(model.OPTION_ALIASES.items()):
        props[alias] = {**props[key], "description": f"Alias of {key}."}
        props[alias].pop("default", None)
    return {"type": "object", "properties": props}


def _option_examples() -> list[str]:
    out = []
    for key, spec in model.option_specs().items():
        value = spec.default
        if spec.choices:
            value = spec.choices[0]
        elif spec.kind == "json":
            value = '{"method":"mtp","num_speculative_tokens":1}' if key.startswith("spec") else "{}"
        elif value is None:
            value = {"int": 1, "bool": "true", "float": 1.0}.get(spec.kind, "")
        elif isinstance(value, bool):
            value = str(value).lower()
        out.append(f"{key}:{value}")
    return out


#: Where LocalAI's unused keys of each vocabulary section go in the schema.
_SECTION_CLASSES = {"config": model.ModelConfig, "parameters": model.Parameters, "template": model.Template}
UNUSED_DESCRIPTION = "LocalAI key: accepted, not used by this harness."
#: The generated type of a list of Go structs (localai_index.yaml).
OBJECT_ARRAY = "array of object"


def _localai_unused(root: dict[str, Any], defs: dict[str, Any]) -> None:
    """Add LocalAI's accepted-but-unused keys (``localai.yaml``) to the object schemas."""
    vocab = vocabulary()
    for section, cls in _SECTION_CLASSES.items():
        target = root if cls is model.ModelConfig else defs[cls.__name__]
        for key, kind in sorted(vocab.unused(section).items()):
            prop: dict[str, Any] = {"description": UNUSED_DESCRIPTION}
            if kind == OBJECT_ARRAY:  # a list of structs: yaml.v3 refuses a scalar item
                prop = {"type": ["array", "null"], "items": {"type": "object"}, **prop}
            elif kind != "any":
                prop = {"type": [kind, "null"], **prop}
            target["properties"].setdefault(key, prop)


def generate() -> dict[str, Any]:
    """The model-config JSON Schema."""
    defs: dict[str, Any] = {}
    root = dataclass_schema(model.ModelConfig, defs)
    _localai_unused(root, defs)
    props = root["properties"]
    props["options"]["items"]["examples"] = _option_examples()
    props["engine_args"] = {**_engine_keys(defs), "description": props["engine_args"]["description"]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "harness model config (LocalAI-compatible YAML)",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def dumps(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def committed() -> dict[str, Any]:
    """The committed schema file, parsed."""
    data: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return data


def write(path: Path = SCHEMA_PATH) -> bool:
    """Write the generated schema; return whether the file changed."""
    text = dumps(generate())
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.config.schema", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when stale")
    parser.add_argument("--write", action="store_true", help="write the file (the default action)")
    parser.add_argument("--output", type=Path, default=SCHEMA_PATH, help="where to write")
    args = parser.parse_args(argv)
    if args.check:
        fresh = args.output.is_file() and args.output.read_text(encoding="utf-8") == dumps(generate())
        print(f"{args.output}: {'up to date' if fresh else 'stale: run nox -s generate_schema'}")
        return 0 if fresh else 1
    changed = write(args.output)
    print(f"{args.output}: {'written' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
