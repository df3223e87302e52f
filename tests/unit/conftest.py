from __future__ import annotations

import pytest

from .video_engines import FamilyEngine, install


@pytest.fixture
def fake_video_engine(monkeypatch: pytest.MonkeyPatch) -> FamilyEngine:
    """A video engine called ``fake`` (the minimax-h3 family), registered as a plugin registers one,
    so that ``backend: fake`` configs validate and render through the CLI."""
    engine = FamilyEngine("fake", "minimax-h3")
    install(monkeypatch, engine)
    return engine
