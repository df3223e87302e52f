"""progress.info prints text as it is: an install hint's extras in brackets survive (rich markup
swallowed "[convert]" from "pip install 'harness[convert]'" in qualify's models stage)."""

from __future__ import annotations

import io

import pytest

from harness.core import progress


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    from rich.console import Console

    out = io.StringIO()
    monkeypatch.setattr(progress, "_quiet", False)
    monkeypatch.setattr(progress, "_console", lambda: Console(file=out, width=200, color_system=None))
    return out


def test_text_keeps_its_brackets(captured: io.StringIO) -> None:
    progress.info("minilm-gguf: failed: pip install 'harness[convert]' (torch==2.13.0) [bold]x[/]")
    assert captured.getvalue() == "minilm-gguf: failed: pip install 'harness[convert]' (torch==2.13.0) [bold]x[/]\n"


def test_markup_styles_only_what_is_escaped_around(captured: io.StringIO) -> None:
    progress.info(f"[yellow]skip[/] {progress.escape('models: needs harness[convert]')}", markup=True)
    assert captured.getvalue() == "skip models: needs harness[convert]\n"
