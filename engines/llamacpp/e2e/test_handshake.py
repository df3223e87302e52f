"""Run-time handshake and variant discovery: stale or foreign libraries are refused, by name."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from harness.core.errors import BindingError
from harness.engine.descriptor import load_engine
from harness.qualify.specs import require_variant
from harness.runtime import discovery
from harness_plugins.llamacpp.engine import _committed_fingerprint, handshake


@pytest.fixture
def candidate(variant: str) -> discovery.Candidate:
    require_variant(variant)
    spec = load_engine("llamacpp")
    return discovery.choose("llamacpp", spec.pin, _committed_fingerprint(), variant)


def test_installed_variant_passes_the_handshake(candidate: discovery.Candidate) -> None:
    module = discovery.import_core(candidate)
    handshake(module, candidate)
    assert module.ABI_FINGERPRINT == candidate.identity["abi_fingerprint"] == _committed_fingerprint()
    assert module.library_build_number() == load_engine("llamacpp").upstream["build"]


def test_libraries_of_another_fingerprint_are_refused(candidate: discovery.Candidate, tmp_path: Path) -> None:
    module = discovery.import_core(candidate)
    stale = tmp_path / candidate.location.name
    shutil.copytree(candidate.location, stale)
    manifest = json.loads((stale / "lib" / "manifest.json").read_text())
    manifest["abi_fingerprint"] = "0" * 64
    (stale / "lib" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BindingError) as e:
        handshake(module, replace(candidate, location=stale))
    assert str(module.ABI_FINGERPRINT)[:16] in str(e.value) and "0000000000000000" in str(e.value)


def test_discovery_rejects_another_pin_and_says_why(candidate: discovery.Candidate) -> None:
    cands = discovery.discover("llamacpp", "0.0.1", _committed_fingerprint())
    mine = [c for c in cands if c.variant == candidate.variant]
    assert mine and not mine[0].accepted
    assert "built for pin" in mine[0].reason and "0.0.1" in mine[0].reason


def test_discovery_rejects_another_abi(candidate: discovery.Candidate) -> None:
    spec = load_engine("llamacpp")
    cands = discovery.discover("llamacpp", spec.pin, "f" * 64)
    mine = [c for c in cands if c.variant == candidate.variant]
    assert mine and not mine[0].accepted and "ABI fingerprint" in mine[0].reason


def test_forcing_an_absent_variant_names_the_installed_ones(candidate: discovery.Candidate,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_VARIANT", "cuda")
    spec = load_engine("llamacpp")
    with pytest.raises(BindingError, match="installed: .*" + candidate.variant):
        discovery.choose("llamacpp", spec.pin, _committed_fingerprint())
