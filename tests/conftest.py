from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated HARNESS_CACHE so unit tests never touch the real cache."""
    root = tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE", str(root))
    monkeypatch.setenv("HARNESS_NO_PROGRESS", "1")
    return root
