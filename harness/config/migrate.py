"""``harness config migrate``: rewrite a model config written for an older LocalAI for the pinned one.

Only mechanical changes, each one LocalAI's own history or its decoder makes certain:

- a legacy backend name LocalAI still maps (pkg/model's Aliases) becomes the name it maps to, with the
  model ``type:`` the alias set (TypeAlias) when the config gives none;
- a key LocalAI reads at the top level but the config gives under ``parameters:`` (``context_size``,
  ``threads``, ``f16`` ...) moves to the top level, and a ``parameters:`` key given at the top level
  moves under ``parameters:`` (yaml.v3 drops either where it is);
- ``download_files`` given as URL strings (a type error: LocalAI decodes ``[]File``) becomes
  ``{filename, uri}`` entries.

What has no mechanical successor is left for a person, with the reason: a backend LocalAI removed (its
models were that backend's format: which current backend loads them is a choice), a moved key whose
destination already holds another value, an old backend's asset directory where the new backend loads
one model file. The text is edited with ruamel.yaml's round trip: comments, key order and quoting stay.
"""

from __future__ import annotations

import difflib
import io
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from harness.config.localai import localai_label, remote_scheme, removal_text, served_by, vocabulary


@dataclass(frozen=True, kw_only=True)
class Left:
    """A change with no mechanical successor, left for a person."""

    line: int
    what: str
    why: str


@dataclass(frozen=True, kw_only=True)
class Migration:
    """One file's migration: its text before and after, what changed and what is left."""

    file: str
    before: str
    after: str
    changes: tuple[str, ...] = ()
    left: tuple[Left, ...] = ()

    @property
    def changed(self) -> bool:
        return self.after != self.before

    def diff(self) -> str:
        """The unified diff from ``before`` to ``after`` ("" when nothing changed)."""
        return "".join(difflib.unified_diff(self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
                                            self.file, f"{self.file} (migrated)"))


@dataclass(kw_only=True)
class _Edit:
    changes: list[str] = field(default_factory=list)
    left: list[Left] = field(default_factory=list)


def _yaml(text: str) -> Any:
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096
    # keep the file's list style: "key:\n  - item" (indented) or "key:\n- item"
    if re.search(r"^( *)[^\s#-][^\n]*:\s*\n\1  - ", text, re.M):
        y.indent(mapping=2, sequence=4, offset=2)
    else:
        y.indent(mapping=2, sequence=2, offset=0)
    return y


def _line(node: Any, key: Any) -> int:
    try:
        return int(node.lc.key(key)[0]) + 1
    except (AttributeError, KeyError, TypeError):
        return 1


def _configs(data: Any) -> Iterator[Any]:
    from ruamel.yaml.comments import CommentedMap

    if isinstance(data, CommentedMap):
        yield data
    elif isinstance(data, list):
        yield from (item for item in data if isinstance(item, CommentedMap))


def _insert_after(mapping: Any, after: str, key: str, value: Any) -> None:
    keys = list(mapping)
    mapping.insert(keys.index(after) + 1 if after in keys else len(keys), key, value)


def _renamed(config: Any, edit: _Edit) -> None:
    name = config.get("backend")
    if not isinstance(name, str) or not name:
        return
    v = vocabulary()
    entry = v.backends.get(name)
    if entry is not None and entry.alias_of:
        if _asset_directory(config, name, entry.alias_of, edit):
            return  # renamed, the config would hide that its model is the old backend's (LAI027 says so)
        config["backend"] = entry.alias_of
        edit.changes.append(f"backend: {name} -> {entry.alias_of} (a legacy alias {localai_label()} maps)")
        if entry.alias_type and "type" not in config:
            _insert_after(config, "backend", "type", entry.alias_type)
            edit.changes.append(f"type: {entry.alias_type} (what the alias {name!r} selected)")
        return
    span = v.history.removal(name)
    if span is not None:
        edit.left.append(Left(line=_line(config, "backend"), what=f"backend {name!r}",
                              why=f"{removal_text(name, span)}; no mechanical successor: its models were that "
                                  "backend's format, and which current backend loads them is a choice"))


def _asset_directory(config: Any, old: str, new: str, edit: _Edit) -> bool:
    """The config's model is the old backend's (no model file for ``new``): left for a person, True."""
    params = config.get("parameters")
    model = params.get("model") if isinstance(params, dict) else None
    was = vocabulary().history.was_backend(old)
    if was is None or served_by().get(new) is None or not isinstance(model, str) or not model \
            or remote_scheme(model) or posixpath.splitext(model.rstrip("/"))[1]:
        return False
    edit.left.append(Left(line=_line(params, "model"), what=f"parameters.model {model!r} (and backend {old!r})",
                          why=f"{old!r} was a backend of its own until {was.commit[:12]} ({was.subject!r}); "
                              f"{new!r} loads one model file, and this names none (the old backend's model or "
                              f"asset directory?): name the file it should load, then write backend: {new}"))
    return True


def _move(source: Any, target: Any, key: str, where: str, edit: _Edit, after: str = "parameters") -> None:
    """Move ``key`` from ``source`` to ``target`` (the mapping LocalAI reads it in; at the top level,
    after the key ``after``)."""
    line = _line(source, key)
    value = source[key]
    if key in target and target[key] != value:
        edit.left.append(Left(line=line, what=f"{key!r}", why=f"LocalAI reads it {where}, which already "
                                                              f"sets it to {target[key]!r}: keep one"))
        return
    comment = source.ca.items.pop(key, None)  # its end-of-line comment moves with it
    del source[key]
    if key not in target:
        if target is not source.get("parameters") and after in target:
            _insert_after(target, after, key, value)  # beside the block it came from
        else:
            target[key] = value
        if comment is not None:
            target.ca.items[key] = comment
    edit.changes.append(f"{key}: moved {where} (LocalAI ignores it where it was)")


def _misplaced(config: Any, edit: _Edit) -> None:
    from ruamel.yaml.comments import CommentedMap

    keys = vocabulary().keys
    top, params = keys["config"], keys["parameters"]
    section = config.get("parameters")
    if isinstance(section, dict):
        after = "parameters"
        for key in [k for k in section if k in top and k not in params]:
            _move(section, config, key, "to the top level", edit, after)
            after = key if key in config else after
    for key in [k for k in config if k in params and k not in top]:
        if not isinstance(config.get("parameters"), dict):
            config["parameters"] = CommentedMap()
        _move(config, config["parameters"], key, "under parameters:", edit)


def _download_files(config: Any, edit: _Edit) -> None:
    from ruamel.yaml.comments import CommentedMap

    files = config.get("download_files")
    if not isinstance(files, list):
        return
    for i, item in enumerate(files):
        if not isinstance(item, str):
            continue
        name = posixpath.basename(urlsplit(item).path) if "://" in item else ""
        if not name:
            edit.left.append(Left(line=_line(config, "download_files"), what=f"download_files[{i}] {item!r}",
                                  why="a string where LocalAI decodes {filename, uri}, with no file name to take "
                                      "from it: write the entry"))
            continue
        entry = CommentedMap()
        entry["filename"] = name
        entry["uri"] = item
        files[i] = entry
        edit.changes.append(f"download_files[{i}]: {item!r} -> {{filename: {name}, uri: ...}} (LocalAI decodes "
                            "[]File, a string is refused)")


def migrate_text(text: str, file: str = "<string>") -> Migration:
    """The migration of one config file's text (a config, or a list of configs)."""
    from ruamel.yaml.error import YAMLError

    y = _yaml(text)
    try:
        data = y.load(text)
    except YAMLError as e:
        return Migration(file=file, before=text, after=text,
                         left=(Left(line=1, what="the file", why=f"not YAML ruamel.yaml can read: {e}"),))
    edit = _Edit()
    for config in _configs(data):
        _renamed(config, edit)
        _misplaced(config, edit)
        _download_files(config, edit)
    after = text
    if edit.changes:
        out = io.StringIO()
        y.dump(data, out)
        after = out.getvalue()
    return Migration(file=file, before=text, after=after, changes=tuple(edit.changes),
                     left=tuple(sorted(edit.left, key=lambda item: item.line)))
