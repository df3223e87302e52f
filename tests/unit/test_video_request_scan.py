"""The request file's structure scan is linear: no text makes it backtrack.

The scan removes JSON strings with a regex before it counts brackets. The old pattern failed on
an unterminated string and was tried again from every later quote: 40 KB of ``\\"`` took 13 s
and 200 KB did not finish, while the size limit lets 16 MiB through.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core.errors import VideoError
from harness.families.limits import DEFAULT_LIMITS
from harness.video.request import _JSON_STRING, parse_request_text

LIMIT = DEFAULT_LIMITS.max_request_bytes
VIDEO_CONFIG = "backend: fake\noptions:\n  - video_partition:fl2va\n  - video_width:64\n  - video_height:32\n"

ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "escaped quotes after an open string": lambda n: '{"prompt": "' + '\\"' * n,
    "escaped quotes alone": lambda n: '\\"' * n,
    "quote backslash": lambda n: '"\\' * n,
    "an escape at every end": lambda n: '"\\\\' * n,
    "strings opening brackets": lambda n: '["' * n,
    "empty strings": lambda n: '"",' * n,
    "brackets": lambda n: "[{" * n,
}


def _text(make: Callable[[int], str], size: int) -> str:
    return make(size // 2 + 1)[:size]


def _seconds(text: str) -> float:
    """The best of three runs of the whole decode (scan, then json), which must refuse ``text``."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        with pytest.raises(VideoError):
            parse_request_text(text, "r.json")
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_16_mib_of_adversarial_text_is_refused_fast_and_linearly(name: str) -> None:
    text = _text(ADVERSARIAL[name], LIMIT)
    assert len(text) == LIMIT
    small, large = _seconds(text[: LIMIT // 16]), _seconds(text)
    # well under a second on a quiet machine; the bound is loose so a busy one does not flake
    assert large < 5, large
    # 16 times the text: about 16 times the time when linear, 256 times when quadratic
    assert large < 64 * small + 0.05, (small, large)


@pytest.mark.usefixtures("fake_video_engine")
def test_a_16_mib_adversarial_request_file_is_refused_by_video_check(tmp_path: Path) -> None:
    import harness.cli

    (tmp_path / "c.yaml").write_text(VIDEO_CONFIG)
    (tmp_path / "r.json").write_text(_text(ADVERSARIAL["escaped quotes after an open string"], LIMIT))
    t0 = time.perf_counter()
    assert harness.cli.main(["video", "check", str(tmp_path / "c.yaml"), str(tmp_path / "r.json")]) == VideoError.exit_code
    assert time.perf_counter() - t0 < 10


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                     max_leaves=20)


@given(_JSON, st.booleans())
def test_the_scan_removes_exactly_the_strings_of_valid_json(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    rest = _JSON_STRING.sub("", text)
    assert '"' not in rest
    containers = text.count("[") - sum(s.count("[") for s in _strings(value))
    assert rest.count("[") == containers


def _strings(value: Any) -> list[str]:
    """Every string in ``value`` as json.dumps writes it (keys too)."""
    if isinstance(value, str):
        return [json.dumps(value)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (json.dumps(k), *_strings(v))]
    return []
