"""Compare two ABI surfaces: one line per difference, and a Markdown report for pull requests.

Targets are diffed one by one and identical messages are folded: a change seen
on every target is reported once, one seen on some targets only ends with
``on <triple>, ...`` (``llama_model_params: size 72 -> 80 on arm64-apple-darwin``).

When the engine declares an ABI version macro (``abi.version_macro`` in its descriptor), a
change of that macro is reported first, as "the engine's declared ABI version moved from
3 to 4", not among the ordinary constants.

Before even that comes each version constant that goes DOWN (a name with ``VERSION`` in it whose
integer value is lower on the new side, the declared macro included: ``GGML_BACKEND_API_VERSION 3 -> 2
(goes DOWN)``): the new headers are older than the old ones, which a move backwards means and a
move forward never should.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.abi.surface import Flat, split

#: The group of the version constants that go down: listed before every other change.
VERSIONS_DOWN = "versions_down"
GROUPS: tuple[tuple[str, str], ...] = (
    (VERSIONS_DOWN, "Versions going DOWN (the new headers are older)"),
    ("abi_version", "Declared ABI version"),
    ("targets", "Targets"),
    ("functions", "Functions"),
    ("structs", "Structs"),
    ("enums", "Enums"),
    ("typedefs", "Typedefs"),
    ("constants", "Constants"),
)
#: Lists longer than this fold into <details> in Markdown, to keep PR pages readable.
FOLD_AT = 15


@dataclass(frozen=True, kw_only=True)
class Change:
    """One difference: ``group`` (functions, structs, ...), ``kind`` (added/removed/changed)."""

    group: str
    kind: str
    message: str
    targets: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.message} on {', '.join(self.targets)}" if self.targets else self.message


def fmt(value: Any) -> str:
    """Constants as a C programmer reads them: magics in hex, strings quoted."""
    if isinstance(value, bool) or not isinstance(value, int):
        return json.dumps(value) if isinstance(value, str) else str(value)
    return hex(value) if abs(value) >= 0x10000 else str(value)


# --------------------------------------------------------------------------- per category

_Out = list[tuple[str, str]]  # (kind, message)


def _param(p: Mapping[str, str]) -> str:
    return f"{p['type']} {p['name']}" if p["name"] else p["type"]


def _params(name: str, pa: Sequence[Mapping[str, str]], pb: Sequence[Mapping[str, str]], out: _Out) -> None:
    """Align parameters by name first, so one inserted parameter is reported once, not as a cascade."""
    sm = difflib.SequenceMatcher(a=[p["name"] for p in pa], b=[p["name"] for p in pb], autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op in ("equal", "replace"):
            for i, j in zip(range(i1, i2), range(j1, j2), strict=False):
                if pa[i]["type"] != pb[j]["type"]:
                    out.append(("changed", f"{name}: parameter {j + 1} {pa[i]['type']} -> {pb[j]['type']}"))
                elif pa[i]["name"] != pb[j]["name"]:
                    out.append(("changed", f"{name}: parameter {j + 1} renamed "
                                           f"{pa[i]['name'] or '(unnamed)'} -> {pb[j]['name'] or '(unnamed)'}"))
            i1, j1 = i1 + min(i2 - i1, j2 - j1), j1 + min(i2 - i1, j2 - j1)
        for i in range(i1, i2):
            out.append(("changed", f"{name}: parameter {i + 1} removed ({_param(pa[i])})"))
        for j in range(j1, j2):
            out.append(("changed", f"{name}: parameter {j + 1} added ({_param(pb[j])})"))


def _functions(a: Mapping[str, Any], b: Mapping[str, Any], out: _Out) -> None:
    for name in sorted(a.keys() - b.keys()):
        out.append(("removed", f"{name}: removed"))
    for name in sorted(b.keys() - a.keys()):
        out.append(("added", f"{name}: added"))
    for name in sorted(a.keys() & b.keys()):
        fa, fb = a[name], b[name]
        if fa["return"] != fb["return"]:
            out.append(("changed", f"{name}: return {fa['return']} -> {fb['return']}"))
        _params(name, fa["params"], fb["params"], out)
        if fa.get("variadic") != fb.get("variadic"):
            out.append(("changed", f"{name}: {'now' if fb.get('variadic') else 'no longer'} variadic"))
        if bool(fa.get("deprecated")) != bool(fb.get("deprecated")):
            out.append(("changed", f"{name}: {'deprecated' if fb.get('deprecated') else 'no longer deprecated'}"))


def _span(xs: Sequence[str], ys: Sequence[str]) -> tuple[list[str], list[str]]:
    """The part of two orders of the same names between the first and last difference."""
    lo = next(i for i in range(len(xs)) if xs[i] != ys[i])
    hi = max(i for i in range(len(xs)) if xs[i] != ys[i])
    return list(xs[lo:hi + 1]), list(ys[lo:hi + 1])


def _struct(name: str, sa: Mapping[str, Any], sb: Mapping[str, Any], out: _Out) -> None:
    if sa.get("kind") != sb.get("kind"):
        out.append(("changed", f"{name}: {sa.get('kind')} -> {sb.get('kind')}"))
    if sa["size"] != sb["size"]:
        out.append(("changed", f"{name}: size {sa['size']} -> {sb['size']}"))
    if sa["align"] != sb["align"]:
        out.append(("changed", f"{name}: alignment {sa['align']} -> {sb['align']}"))
    fa = {f["name"]: f for f in sa["fields"]}
    fb = {f["name"]: f for f in sb["fields"]}
    removed = [n for n in fa if n not in fb]
    added = [n for n in fb if n not in fa]

    def same_slot(x: Mapping[str, Any], y: Mapping[str, Any]) -> bool:
        return all(x.get(k) == y.get(k) for k in ("type", "offset", "bits", "bit_offset"))

    # Same offset and type under another name: a rename, not a remove + add.
    for old in list(removed):
        new = next((n for n in added if same_slot(fa[old], fb[n])), None)
        if new is not None:
            removed.remove(old)
            added.remove(new)
            out.append(("changed", f"{name}.{old}: renamed to {new}"))
    for n in removed:
        out.append(("changed", f"{name}.{n}: removed"))
    for n in added:
        f = fb[n]
        bits = f" : {f['bits']}" if "bits" in f else ""
        out.append(("changed", f"{name}.{n}: added at offset {f['offset']} ({f['type']}{bits})"))
    common_a = [n for n in fa if n in fb]
    common_b = [n for n in fb if n in fa]
    if common_a != common_b:
        xs, ys = _span(common_a, common_b)
        at = f" at unchanged size {sb['size']}" if sa["size"] == sb["size"] else ""
        out.append(("changed", f"{name}: fields reordered{at} ({', '.join(xs)} -> {', '.join(ys)})"))
    for n in common_a:
        x, y = fa[n], fb[n]
        if x["type"] != y["type"]:
            out.append(("changed", f"{name}.{n}: type {x['type']} -> {y['type']}"))
        if x["offset"] != y["offset"]:
            out.append(("changed", f"{name}.{n}: offset {x['offset']} -> {y['offset']}"))
        if x.get("bits") != y.get("bits"):
            out.append(("changed", f"{name}.{n}: bit width {x.get('bits', '-')} -> {y.get('bits', '-')}"))
        elif x.get("bit_offset") != y.get("bit_offset") and x["offset"] == y["offset"]:
            out.append(("changed", f"{name}.{n}: bit offset {x.get('bit_offset')} -> {y.get('bit_offset')}"))


def _structs(a: Mapping[str, Any], b: Mapping[str, Any], out: _Out) -> None:
    for name in sorted(a.keys() - b.keys()):
        out.append(("removed", f"{a[name].get('kind', 'struct')} {name}: removed"))
    for name in sorted(b.keys() - a.keys()):
        out.append(("added", f"{b[name].get('kind', 'struct')} {name}: added (size {b[name]['size']})"))
    for name in sorted(a.keys() & b.keys()):
        _struct(name, a[name], b[name], out)


def _enums(a: Mapping[str, Any], b: Mapping[str, Any], out: _Out) -> None:
    for name in sorted(a.keys() - b.keys()):
        out.append(("removed", f"enum {name}: removed"))
    for name in sorted(b.keys() - a.keys()):
        out.append(("added", f"enum {name}: added"))
    for name in sorted(a.keys() & b.keys()):
        ea, eb = a[name], b[name]
        if ea.get("type") != eb.get("type"):
            out.append(("changed", f"enum {name}: underlying type {ea.get('type')} -> {eb.get('type')}"))
        ca, cb = ea["constants"], eb["constants"]
        for c in ca:
            if c not in cb:
                out.append(("changed", f"enum {name}: {c} removed (was {ca[c]})"))
            elif ca[c] != cb[c]:
                out.append(("changed", f"enum {name}: {c} {ca[c]} -> {cb[c]}"))
        for c in cb:
            if c not in ca:
                out.append(("changed", f"enum {name}: {c} added ({cb[c]})"))


def _typedefs(a: Mapping[str, Any], b: Mapping[str, Any], out: _Out) -> None:
    for name in sorted(a.keys() - b.keys()):
        out.append(("removed", f"typedef {name}: removed"))
    for name in sorted(b.keys() - a.keys()):
        out.append(("added", f"typedef {name}: added ({b[name]})"))
    for name in sorted(a.keys() & b.keys()):
        if a[name] != b[name]:
            out.append(("changed", f"typedef {name}: {a[name]} -> {b[name]}"))


def goes_down(name: str, a: Any, b: Any) -> bool:
    """Whether constant ``name`` is a version (``VERSION`` in its name) whose value went down from ``a`` to ``b``."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b))
    return ints and "VERSION" in name.upper() and b < a


def _constants(a: Mapping[str, Any], b: Mapping[str, Any], out: _Out) -> None:
    for name in sorted(a.keys() | b.keys()):
        if name not in b:
            out.append(("removed", f"{name}: removed (was {fmt(a[name])})"))
        elif name not in a:
            out.append(("added", f"{name}: added ({fmt(b[name])})"))
        elif goes_down(name, a[name], b[name]):
            out.append((VERSIONS_DOWN, f"{name} {fmt(a[name])} -> {fmt(b[name])} (goes DOWN)"))
        elif a[name] != b[name]:
            out.append(("changed", f"{name} {fmt(a[name])} -> {fmt(b[name])}"))


_DIFFERS = {
    "functions": _functions, "structs": _structs, "enums": _enums,
    "typedefs": _typedefs, "constants": _constants,
}


def diff_flat(a: Flat, b: Flat) -> list[tuple[str, str, str]]:
    """Differences between two single-target surfaces as ``(group, kind, message)``."""
    result: list[tuple[str, str, str]] = []
    for group, differ in _DIFFERS.items():
        out: _Out = []
        differ(a.get(group, {}), b.get(group, {}), out)
        # a version going down is its own group (listed first), a change all the same
        result.extend((VERSIONS_DOWN, "changed", msg) if kind == VERSIONS_DOWN else (group, kind, msg)
                      for kind, msg in out)
    return result


def _values(flats: Mapping[str, Flat], macro: str) -> list[Any]:
    """The macro's distinct values across targets (absent: None), in target order."""
    out: list[Any] = []
    for flat in flats.values():
        v = flat.get("constants", {}).pop(macro, None)
        if v not in out:
            out.append(v)
    return out


def declared_version_change(a: Mapping[str, Flat], b: Mapping[str, Flat], macro: str) -> Change | None:
    """How the declared ABI version ``macro`` moved from ``a`` to ``b`` (None: it did not).

    Removes the macro from the flats' constants: it is reported here, not as a constant.
    """
    va, vb = _values(a, macro), _values(b, macro)
    if va == vb:
        return None

    def show(vs: list[Any]) -> str:
        return " / ".join("(none)" if v is None else fmt(v) for v in vs)

    if va == [None]:
        message = f"the engine's declared ABI version {macro} appeared ({show(vb)})"
    elif vb == [None]:
        message = f"the engine's declared ABI version {macro} is gone from the headers (was {show(va)})"
    elif len(va) == len(vb) == 1 and goes_down("VERSION", va[0], vb[0]):  # declared: a version whatever its name
        return Change(group=VERSIONS_DOWN, kind="changed", message=f"the engine's declared ABI version goes DOWN "
                      f"from {show(va)} to {show(vb)} ({macro})")
    else:
        message = f"the engine's declared ABI version moved from {show(va)} to {show(vb)} ({macro})"
    return Change(group="abi_version", kind="changed", message=message)


def diff(a: Mapping[str, Any], b: Mapping[str, Any], *, version_macro: str | None = None) -> list[Change]:
    """All differences from surface ``a`` to ``b`` (merged form), folded across targets.

    ``version_macro``: the engine's declared ABI version macro; its change comes first.
    """
    fa, fb = split(a), split(b)
    changes: list[Change] = []
    if version_macro:
        moved = declared_version_change(fa, fb, version_macro)
        if moved is not None:
            changes.append(moved)
    for t in fa:
        if t not in fb:
            changes.append(Change(group="targets", kind="removed", message=f"target {t}: removed"))
    for t in fb:
        if t not in fa:
            changes.append(Change(group="targets", kind="added", message=f"target {t}: added"))
    common = [t for t in fa if t in fb]
    seen: dict[tuple[str, str, str], list[str]] = {}
    for t in common:
        for key in diff_flat(fa[t], fb[t]):
            seen.setdefault(key, []).append(t)
    for (group, kind, msg), ts in seen.items():
        only = () if len(ts) == len(common) else tuple(ts)
        changes.append(Change(group=group, kind=kind, message=msg, targets=only))
    return sorted(changes, key=lambda c: c.group != VERSIONS_DOWN)  # stable: the rest keep their order


def versions_down(changes: Sequence[Change]) -> list[Change]:
    """The changes that are a version going down (what a pin move's report lists first)."""
    return [c for c in changes if c.group == VERSIONS_DOWN]


def render_versions_down(changes: Sequence[Change]) -> str:
    """A Markdown block naming each version that goes down, for the top of a report ("" when none)."""
    down = versions_down(changes)
    if not down:
        return ""
    return "\n".join([f"### {dict(GROUPS)[VERSIONS_DOWN]}", "", *(f"- **`{c}`**" for c in down), "", ""])


def diff_surfaces(a: Mapping[str, Any], b: Mapping[str, Any], *, version_macro: str | None = None) -> list[str]:
    """One line per difference, e.g. ``llama_batch_init: parameter 2 int32_t -> int64_t``."""
    return [str(c) for c in diff(a, b, version_macro=version_macro)]


# --------------------------------------------------------------------------- markdown


def _bullets(lines: Sequence[str]) -> list[str]:
    items = [f"- `{line}`" for line in lines]
    if len(items) <= FOLD_AT:
        return items
    return ["<details><summary>show all</summary>", "", *items, "", "</details>"]


def render_markdown(
    changes: Sequence[Change], *, old: str, new: str, footer: str = "", title: str = "ABI/API changes"
) -> str:
    """A report for a release engineer's pull request, grouped by what changed."""
    lines = [f"## {title}: {old} -> {new}", ""]
    if not changes:
        return "\n".join([*lines, "No differences.", *([footer] if footer else []), ""])
    counts = [f"{sum(c.group == g for c in changes)} {label.lower()}" for g, label in GROUPS
              if any(c.group == g for c in changes)]
    lines += [f"{len(changes)} differences: {', '.join(counts)}.", ""]
    for group, label in GROUPS:
        mine = [c for c in changes if c.group == group]
        if not mine:
            continue
        lines += [f"### {label}", ""]
        for kind in ("removed", "changed", "added"):
            sub = [str(c) for c in mine if c.kind == kind]
            if sub:
                lines += [f"**{kind.capitalize()} ({len(sub)})**", "", *_bullets(sub), ""]
    if footer:
        lines += [footer, ""]
    return "\n".join(lines)
