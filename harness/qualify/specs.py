"""What an engine's e2e spec files (``engines/<name>/e2e/test_*.py``) get: a pytest plugin.

- ``--variant`` (repeatable) and the ``variant`` parameter: the binding variants a spec runs on
  (default: every variant of the spec's engine installed and accepted on this host);
- the ``artifact`` fixture (``$HARNESS_ARTIFACT``, the built artifact);
- :func:`model_path` (a fixture model's path from its environment variable) and
  :func:`require_variant`, which skip a spec with the command that would make it run.

``harness e2e`` and qualify's e2e stage load it with ``-p harness.qualify.specs`` (so an engine
folder outside the checkout, on ``$HARNESS_ENGINES_PATH``, gets it too); the checkout's root
``conftest.py`` loads it for a plain ``pytest engines/<name>/e2e``. A spec's engine is the folder
its ``e2e/`` sits in.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: The value ``variant`` takes when no binding variant is installed (the specs that need one skip).
NONE_INSTALLED = "<none installed>"


def _env_path(name: str) -> Path:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"set {name} to run this spec (`harness models env` prints it after `harness models fetch`)")
    p = Path(value)
    if not p.exists():
        pytest.skip(f"{name}={value} does not exist")
    return p


@pytest.fixture(scope="module")
def artifact(request: pytest.FixtureRequest) -> Path:
    """The built artifact: ``$HARNESS_ARTIFACT``, or else the spec's engine's artifact of the variant
    the run names (``--variant``; the first installed one without it) where it has been built."""
    if os.environ.get("HARNESS_ARTIFACT"):
        return _env_path("HARNESS_ARTIFACT")
    engine = spec_engine(Path(str(request.path)))
    if engine is not None:
        variant = _variants(request.config, engine)[0]
        try:
            from harness.build.cmake import artifact_dir
            from harness.build.matrix import get_variant
            from harness.engine.descriptor import load_engine

            built = artifact_dir(load_engine(engine), get_variant(variant))
        except Exception:  # an engine or variant this checkout cannot name: no artifact here
            built = None
        if built is not None and (built / "manifest.json").is_file():
            return built
    pytest.skip("set HARNESS_ARTIFACT to run this spec, or build the spec's engine "
                "(`harness build ENGINE --variant V`): none is built for it here")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--variant", action="append", default=None,
                     help="binding variant(s) to run the e2e specs on (default: every installed variant)")


def spec_engine(path: Path) -> str | None:
    """The engine whose ``e2e/`` folder holds the spec file ``path``, or None outside one."""
    return path.parent.parent.name if path.parent.name == "e2e" else None


def _installed(engine: str) -> list[str]:
    """The engine's installed, accepted binding variants (a forced-only one, e.g. vulkan on
    lavapipe, runs only when named)."""
    try:
        from harness.engine.descriptor import load_engine
        from harness.runtime import discovery

        spec = load_engine(engine)
        return [c.variant for c in discovery.discover(engine, spec.pin, discovery.committed_fingerprint(engine))
                if c.accepted and not c.forced_only]
    except Exception:
        return []


def _variants(config: pytest.Config, engine: str) -> list[str]:
    chosen = config.getoption("--variant") or ([os.environ["HARNESS_VARIANT"]] if os.environ.get("HARNESS_VARIANT") else None)
    return list(chosen) if chosen else (_installed(engine) or [NONE_INSTALLED])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    engine = spec_engine(Path(str(metafunc.definition.path)))
    if engine is not None and "variant" in metafunc.fixturenames:
        metafunc.parametrize("variant", _variants(metafunc.config, engine), scope="session")


def model_path(name: str) -> Path:
    """The path in the environment variable ``name`` (a fixture model); skips when unset or missing."""
    return _env_path(name)


def require_variant(variant: str) -> None:
    if variant == NONE_INSTALLED:
        pytest.skip("no binding variant installed: harness build-binding <engine> --variant cpu")
