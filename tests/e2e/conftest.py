from __future__ import annotations

import os
from pathlib import Path

import pytest


def _env_path(name: str) -> Path:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"set {name} to run this spec (nox -s tests sets it after building)")
    p = Path(value)
    if not p.exists():
        pytest.skip(f"{name}={value} does not exist")
    return p


@pytest.fixture(scope="session")
def artifact() -> Path:
    """The built cpu artifact (HARNESS_ARTIFACT)."""
    return _env_path("HARNESS_ARTIFACT")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--variant", action="append", default=None,
                     help="binding variant(s) to run the e2e specs on (default: every installed variant)")


def _variants(config: pytest.Config) -> list[str]:
    chosen = config.getoption("--variant") or ([os.environ["HARNESS_VARIANT"]] if os.environ.get("HARNESS_VARIANT") else None)
    if chosen:
        return list(chosen)
    try:
        from harness.engine.descriptor import load_engine
        from harness.runtime import discovery
        from harness_plugins.llamacpp.engine import _committed_fingerprint

        spec = load_engine("llamacpp")
        # A forced-only variant (vulkan on lavapipe) runs only when named: --variant vulkan.
        found = [c.variant for c in discovery.discover("llamacpp", spec.pin, _committed_fingerprint())
                 if c.accepted and not c.forced_only]
    except Exception:
        found = []
    return found or ["<none installed>"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "variant" in metafunc.fixturenames:
        metafunc.parametrize("variant", _variants(metafunc.config), scope="session")


def model_path(name: str) -> Path:
    return _env_path(name)


def require_variant(variant: str) -> None:
    if variant == "<none installed>":
        pytest.skip("no binding variant installed: harness build-binding llamacpp --variant cpu")
