"""LocalAI gallery templates: a ``config_file:`` body checked in place.

A gallery file (LocalAI's ``gallery/<base>.yaml``) carries the model config as a YAML
string under ``config_file:``, without ``name`` or ``parameters.model``: the gallery
entry that installs it supplies both. Such a file is recognised by that key (a mapping
with a string ``config_file``); its body is parsed on its own and every mark in it is
moved to where the body is written in the file, so findings still point at file:line:col.
"""

from __future__ import annotations

from typing import Any

from harness.config.loader import Diagnostic, Document, load_text

BODY_KEY = "config_file"


def is_gallery_file(data: Any) -> bool:
    """A gallery template file: a mapping whose ``config_file`` is a string (and no config of its own)."""
    return isinstance(data, dict) and isinstance(data.get(BODY_KEY), str) and "parameters" not in data


def _body_origin(doc: Document, text: str) -> tuple[int, int, bool]:
    """(line offset, column offset, exact) of the body: a block scalar's content starts on the
    line after its ``|`` and is indented; anything else maps to the scalar's own position."""
    line, col = doc.where((BODY_KEY,))
    lines = text.splitlines()
    head = lines[line - 1] if 0 < line <= len(lines) else ""
    if head[col - 1:col] in ("|", ">"):
        for raw in lines[line:]:
            if raw.strip():
                return line, len(raw) - len(raw.lstrip(" ")), True
        return line, 0, True
    return line, col, False


def body_documents(doc: Document, text: str) -> tuple[list[Document], list[Diagnostic]]:
    """The documents of the ``config_file`` body, their marks in the gallery file's coordinates."""
    body = doc.data[BODY_KEY]
    dline, dcol, exact = _body_origin(doc, text)

    def move(mark: tuple[int, int]) -> tuple[int, int]:
        return (dline + mark[0], dcol + mark[1]) if exact else (dline, dcol)

    docs, problems = load_text(body, doc.file)
    for d in docs:
        d.values = {p: move(m) for p, m in d.values.items()}
        d.keys = {p: move(m) for p, m in d.keys.items()}
    moved = [Diagnostic(file=p.file, line=move((p.line, p.col))[0], col=move((p.line, p.col))[1],
                        severity=p.severity, message=p.message, code=p.code) for p in problems]
    if not docs and not problems:
        moved.append(doc.diag((BODY_KEY,), "error", "the config_file body is empty: the installed config "
                                                    "names no model", code="LAI008"))
    return docs, moved
