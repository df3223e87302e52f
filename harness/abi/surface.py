"""The normalized ABI surface: per-target flat views, the merged file form, fingerprints.

A *flat* surface describes one target triple::

    {"functions": {name: {"return", "params": [{"name", "type"}], "variadic", ["deprecated"]}},
     "structs":   {name: {"kind", "size", "align", "fields": [{"name", "type", "offset", ...}]}},
     "enums":     {name: {"type", "constants": {NAME: value}}},
     "typedefs":  {name: underlying type},
     "constants": {NAME: int | str}}

Types are kept as *spelled* (``int64_t``, not ``long``): the spelling is what the
binding is written against and it is the same on every target, while
sizes and offsets carry the target-specific part.

The *merged* form (what ``engines/<engine>/abi/surface.json`` holds) stores each item
once; a struct's size, alignment or field offset becomes a ``{triple: value}``
map only where targets disagree, and an item that differs in any other way (or
exists on some targets only) is stored as ``{"per_target": {triple: item}}``.
Beside the categories the file holds ``schema``, ``targets``, ``fingerprint``
(overall), ``fingerprints`` (per target), ``meta`` (headers, engine: informative
only) and, once filtered, ``used`` (the names the binding uses).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.core import inputs
from harness.core.errors import AbiError

SCHEMA = 1
CATEGORIES: tuple[str, ...] = ("functions", "structs", "enums", "typedefs", "constants")
DEFAULT_TARGETS: tuple[str, ...] = ("x86_64-linux-gnu", "aarch64-linux-gnu", "arm64-apple-darwin")
_LAYOUT_KEYS = ("size", "align")
_IDENT = re.compile(r"[A-Za-z_]\w*")

Flat = dict[str, dict[str, Any]]
Surface = dict[str, Any]


def canonical(data: Any) -> str:
    """The byte-stable JSON that fingerprints are computed over."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def sha256_of(data: Any) -> str:
    return hashlib.sha256(canonical(data).encode()).hexdigest()


def empty_flat() -> Flat:
    return {c: {} for c in CATEGORIES}


# --------------------------------------------------------------------------- merge / split


def _per_target(values: Mapping[str, Any], targets: Iterable[str]) -> Any:
    """One value when every target agrees, else ``{triple: value}``."""
    vals = [values.get(t) for t in targets]
    if all(v == vals[0] for v in vals) and vals[0] is not None:
        return vals[0]
    return {t: v for t, v in values.items() if v is not None}


def _merge_struct(by_target: dict[str, dict[str, Any]], targets: list[str]) -> dict[str, Any] | None:
    """Collapse a struct whose members agree on every target; None if they do not."""
    def shape(s: dict[str, Any]) -> Any:
        return (s.get("kind"), [{k: v for k, v in f.items() if k not in ("offset", "bit_offset")}
                                for f in s["fields"]])

    first = by_target[targets[0]]
    if any(shape(by_target[t]) != shape(first) for t in targets):
        return None
    merged: dict[str, Any] = {k: v for k, v in first.items() if k not in ("fields", *_LAYOUT_KEYS)}
    for key in _LAYOUT_KEYS:
        merged[key] = _per_target({t: by_target[t][key] for t in targets}, targets)
    fields = []
    for i, f in enumerate(first["fields"]):
        mf = dict(f)
        for key in ("offset", "bit_offset"):
            if key in f:
                mf[key] = _per_target({t: by_target[t]["fields"][i][key] for t in targets}, targets)
        fields.append(mf)
    merged["fields"] = fields
    return merged


def merge(flats: Mapping[str, Flat]) -> dict[str, dict[str, Any]]:
    """Per-target flat surfaces -> the merged categories of the committed file."""
    targets = list(flats)
    out: dict[str, dict[str, Any]] = {c: {} for c in CATEGORIES}
    for cat in CATEGORIES:
        names = sorted({n for f in flats.values() for n in f.get(cat, {})})
        for name in names:
            by_target = {t: flats[t][cat][name] for t in targets if name in flats[t].get(cat, {})}
            everywhere = len(by_target) == len(targets)
            values = list(by_target.values())
            if everywhere and cat == "structs":
                merged = _merge_struct(by_target, targets)
                if merged is not None:
                    out[cat][name] = merged
                    continue
            elif everywhere and all(v == values[0] for v in values):
                out[cat][name] = copy.deepcopy(values[0])
                continue
            out[cat][name] = {"per_target": copy.deepcopy(by_target)}
    return out


def _pick(value: Any, target: str) -> Any:
    return value[target] if isinstance(value, dict) else value


def split(surface: Mapping[str, Any]) -> dict[str, Flat]:
    """The merged file form -> one flat surface per target (inverse of :func:`merge`)."""
    targets = list(surface["targets"])
    flats: dict[str, Flat] = {t: empty_flat() for t in targets}
    for cat in CATEGORIES:
        for name, item in surface.get(cat, {}).items():
            if isinstance(item, dict) and set(item) == {"per_target"}:
                for t, v in item["per_target"].items():
                    if t in flats:
                        flats[t][cat][name] = copy.deepcopy(v)
                continue
            for t in targets:
                v = copy.deepcopy(item)
                if cat == "structs":
                    for key in _LAYOUT_KEYS:
                        v[key] = _pick(v[key], t)
                    for f in v["fields"]:
                        for key in ("offset", "bit_offset"):
                            if key in f:
                                f[key] = _pick(f[key], t)
                flats[t][cat][name] = v
    return flats


# --------------------------------------------------------------------------- building


def build_surface(
    flats: Mapping[str, Flat], meta: Mapping[str, Any] | None = None, used: Iterable[str] | None = None
) -> Surface:
    """Assemble the committed form: metadata, used set, fingerprints, merged categories.

    Fingerprints cover only the ABI content (never paths or metadata), so the
    same headers give the same fingerprint on any machine.
    """
    fps = {t: sha256_of(flats[t]) for t in flats}
    surface: Surface = {"schema": SCHEMA}
    if meta:
        surface["meta"] = dict(meta)
    surface["targets"] = list(flats)
    surface["fingerprints"] = fps
    surface["fingerprint"] = sha256_of({t: flats[t] for t in sorted(flats)})
    if used is not None:
        surface["used"] = sorted(used)
    surface.update(merge(flats))
    return surface


def fingerprint(surface: Mapping[str, Any]) -> str:
    """Recompute the overall fingerprint from the content (ignores the stored one)."""
    flats = split(surface)
    return sha256_of({t: flats[t] for t in sorted(flats)})


def dumps(surface: Mapping[str, Any]) -> str:
    """Stable text for the committed file: sorted keys, one item per line, reviewable diffs."""
    return json.dumps(surface, sort_keys=True, indent=1, ensure_ascii=True) + "\n"


def write(surface: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(surface))
    tmp.replace(path)


def load(path: Path) -> Surface:
    """The surface at ``path``; :class:`AbiError` for a file that is not a regular one within the
    ``surface`` limit, ``ValueError`` for one that is not a surface."""
    data = json.loads(inputs.read_text(path, kind="surface", error=AbiError))
    if not isinstance(data, dict):
        msg = f"{path}: not an ABI surface (expected a JSON object)"
        raise ValueError(msg)
    return data


# --------------------------------------------------------------------------- filtering


def type_names(spelling: str) -> set[str]:
    """Identifiers a type spelling mentions (``const struct llama_batch *`` -> llama_batch ...)."""
    return set(_IDENT.findall(spelling))


def _refs(cat: str, item: Any) -> set[str]:
    if cat == "functions":
        names = type_names(item["return"])
        for p in item["params"]:
            names |= type_names(p["type"])
        return names
    if cat == "structs":
        return {n for f in item["fields"] for n in type_names(f["type"])}
    if cat == "typedefs":
        return type_names(str(item))
    return set()


def filter_flat(flat: Flat, used: set[str]) -> Flat:
    """Keep used functions (and used named types) plus everything they reach; all constants.

    Enum constants in ``used`` keep their enum, so sources that only spell
    ``LLAMA_VOCAB_TYPE_SPM`` still pin ``enum llama_vocab_type``.
    """
    const_owner = {c: e for e, item in flat["enums"].items() for c in item["constants"]}
    keep: dict[str, set[str]] = {c: set() for c in CATEGORIES}
    todo = [n for n in used if n in flat["functions"]]
    keep["functions"] = set(todo)
    todo = [n for n in used if n not in flat["functions"]] + [const_owner[n] for n in used if n in const_owner]
    todo += [n for f in keep["functions"] for n in _refs("functions", flat["functions"][f])]
    while todo:
        name = todo.pop()
        for cat in ("structs", "enums", "typedefs"):
            if name in flat[cat] and name not in keep[cat]:
                keep[cat].add(name)
                todo.extend(_refs(cat, flat[cat][name]))
    out = empty_flat()
    for cat in ("functions", "structs", "enums", "typedefs"):
        out[cat] = {n: copy.deepcopy(v) for n, v in flat[cat].items() if n in keep[cat]}
    out["constants"] = dict(flat["constants"])
    return out


def filter_surface(surface: Mapping[str, Any], used: set[str]) -> Surface:
    """The surface restricted to ``used`` and what it reaches; fingerprints recomputed."""
    flats = {t: filter_flat(f, used) for t, f in split(surface).items()}
    return build_surface(flats, surface.get("meta"), used & known_names(surface))


def known_names(surface: Mapping[str, Any]) -> set[str]:
    """Every function, struct, enum, enum constant and typedef name on any target."""
    names: set[str] = set()
    for flat in split(surface).values():
        for cat in ("functions", "structs", "enums", "typedefs"):
            names |= set(flat[cat])
        names |= {c for e in flat["enums"].values() for c in e["constants"]}
    return names
