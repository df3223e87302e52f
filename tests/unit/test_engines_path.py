"""Engine descriptors outside the checkout: ``$HARNESS_ENGINES_PATH``."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.errors import UnknownNameError
from harness.engine.descriptor import ENGINES_PATH_ENV, descriptor_path, engine_names, load_engine

DESCRIPTOR = """\
name: {name}
source: {{kind: git, url: "file:///nowhere", commit: "{commit}", filter: "blob:none", sparse: [src, include]}}
upstream: {{commit: "{commit}"}}
cmake:
  base: {{CMAKE_BUILD_TYPE: Release, TINY_COMMIT: "{{upstream.commit}}"}}
  intents:
    cpu_levels:
      runtime: {{TINY_PORTABLE: "ON", TINY_COMMIT_AGAIN: "{{upstream.commit}}"}}
targets: [tiny]
artifacts: {{lib: ["libtiny.so*"], include: ["include:*.h"]}}
abi: {{headers: [include/tiny.h], version_macro: TINY_ABI_VERSION}}
"""
COMMIT = "0" * 40


def project(root: Path, name: str) -> Path:
    d = root / "engines" / name
    d.mkdir(parents=True)
    (d / "engine.yaml").write_text(DESCRIPTOR.format(name=name, commit=COMMIT))
    return root / "engines"


def test_descriptors_on_the_path_are_found_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnknownNameError):
        load_engine("tiny")
    first, second = project(tmp_path / "a", "tiny"), project(tmp_path / "b", "tiny")
    project(tmp_path / "b", "other")
    monkeypatch.setenv(ENGINES_PATH_ENV, f"{first}:{second}")
    assert descriptor_path("tiny") == first / "tiny" / "engine.yaml"
    assert {"tiny", "other", "llamacpp"} <= set(engine_names())
    tiny = load_engine("tiny")
    # patches/ and abi/ are in the engine's own folder
    assert tiny.patches_dir == first / "tiny" / "patches"
    assert tiny.surface_path == first / "tiny" / "abi" / "surface.json"
    assert tiny.source.filter == "blob:none" and tiny.source.sparse == ("src", "include")
    assert tiny.intents == {"cpu_levels": {"runtime": {"TINY_PORTABLE": "ON", "TINY_COMMIT_AGAIN": COMMIT}}}
    assert tiny.abi["version_macro"] == "TINY_ABI_VERSION"
    assert load_engine("llamacpp").root.parent.name == "engines"
