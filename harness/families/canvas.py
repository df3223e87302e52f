"""A canvas written as ``WIDTHxHEIGHT`` (the ``video_canvas`` option): its pattern and its parse."""

from __future__ import annotations

import re

#: ``video_canvas``: WIDTHxHEIGHT.
CANVAS_PATTERN = r"^\s*[0-9]+\s*[xX]\s*[0-9]+\s*$"


def parse_canvas(text: str) -> tuple[int, int] | None:
    """``"1344x768"`` as (1344, 768); None when the text is not WIDTHxHEIGHT."""
    if not re.match(CANVAS_PATTERN, text):
        return None
    width, _, height = text.lower().partition("x")
    return int(width), int(height)
