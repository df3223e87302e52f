"""Variant discovery: which installed bindings are usable here, and which one automatic choice picks.

A CPU-type Vulkan device (Mesa's lavapipe) runs the vulkan variant: naming the variant loads it,
while automatic choice keeps preferring the cpu build.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.core.errors import BindingError
from harness.core.types import GpuInfo, HostInfo
from harness.runtime import discovery
from tests.fakes import install_binding

PIN = "9.9.9"
FP = "ab" * 32
LAVAPIPE = GpuInfo(api="vulkan", name="llvmpipe (LLVM 15.0.6, 256 bits)", device_type="PHYSICAL_DEVICE_TYPE_CPU")
RADEON = GpuInfo(api="vulkan", name="AMD Radeon RX 7900", device_type="PHYSICAL_DEVICE_TYPE_DISCRETE_GPU")


def host(*gpus: GpuInfo) -> HostInfo:
    return HostInfo(os="linux", arch="x86_64", cpu_model="test", microarch="zen4", simd=(), cores=2,
                    memory_bytes=1 << 30, gpus=gpus)


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for variant, platform in (("cpu", "cpu"), ("vulkan", "vulkan")):
        install_binding(tmp_path, variant, {"engine": "eng", "pin": PIN, "abi_fingerprint": FP, "platform": platform})
    monkeypatch.setenv(discovery.PATH_ENV, str(tmp_path))
    monkeypatch.delenv(discovery.FORCE_ENV, raising=False)
    return tmp_path


def by_variant(h: HostInfo) -> dict[str, discovery.Candidate]:
    return {c.variant: c for c in discovery.discover("eng", PIN, FP, h)}


def test_lavapipe_admits_vulkan_only_when_forced(installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cands = by_variant(host(LAVAPIPE))
    assert cands["vulkan"].accepted and cands["vulkan"].forced_only
    assert "CPU-type Vulkan device" in cands["vulkan"].note and "llvmpipe" in cands["vulkan"].note
    assert cands["vulkan"].devices == (0,)
    assert cands["cpu"].accepted and not cands["cpu"].forced_only

    monkeypatch.setattr(discovery, "probe", lambda: host(LAVAPIPE))
    assert discovery.choose("eng", PIN, FP).variant == "cpu"
    assert discovery.choose("eng", PIN, FP, "vulkan").variant == "vulkan"
    monkeypatch.setenv(discovery.FORCE_ENV, "vulkan")
    assert discovery.choose("eng", PIN, FP).variant == "vulkan"


def test_automatic_choice_never_falls_to_a_forced_only_binding(installed: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    shutil.rmtree(installed / "harness_fake_cpu")
    monkeypatch.setattr(discovery, "probe", lambda: host(LAVAPIPE))
    with pytest.raises(BindingError, match="used when forced"):
        discovery.choose("eng", PIN, FP)


def test_a_real_gpu_is_preferred_automatically(installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cands = by_variant(host(LAVAPIPE, RADEON))
    assert cands["vulkan"].accepted and not cands["vulkan"].forced_only and not cands["vulkan"].note
    monkeypatch.setattr(discovery, "probe", lambda: host(LAVAPIPE, RADEON))
    assert discovery.choose("eng", PIN, FP).variant == "vulkan"


def test_no_vulkan_device_rejects_even_when_forced(installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cands = by_variant(host())
    assert not cands["vulkan"].accepted and "no usable device" in cands["vulkan"].reason
    monkeypatch.setattr(discovery, "probe", lambda: host())
    with pytest.raises(BindingError, match="installed but rejected: platform vulkan has no usable device"):
        discovery.choose("eng", PIN, FP, "vulkan")


def test_a_forced_vulkan_variant_makes_ggml_use_the_cpu_type_device(installed: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """ggml-vulkan skips CPU-type devices unless listed: without this, "vulkan" would run on its CPU backend."""
    from harness_plugins.llamacpp.engine import VK_VISIBLE_ENV, _admit_cpu_type_devices

    monkeypatch.delenv(VK_VISIBLE_ENV, raising=False)
    cands = by_variant(host(LAVAPIPE, LAVAPIPE))
    _admit_cpu_type_devices(cands["cpu"])
    assert VK_VISIBLE_ENV not in os.environ
    _admit_cpu_type_devices(cands["vulkan"])
    assert os.environ[VK_VISIBLE_ENV] == "0,1"
    monkeypatch.setenv(VK_VISIBLE_ENV, "1")
    _admit_cpu_type_devices(cands["vulkan"])
    assert os.environ[VK_VISIBLE_ENV] == "1"  # an explicit choice is kept


def test_the_candidate_is_imported_from_its_own_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A same-named package importable elsewhere (site-packages) must not be what loads."""
    import sys

    elsewhere = install_binding(tmp_path / "site", "shadow", {"engine": "x"})
    (elsewhere / "_core.py").write_text("WHERE = 'site-packages'\n")
    chosen = install_binding(tmp_path / "path", "shadow", {"engine": "x"})
    (chosen / "_core.py").write_text("WHERE = 'binding path'\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in ("harness_fake_shadow", "harness_fake_shadow._core"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    cand = discovery.Candidate(name="shadow", package="harness_fake_shadow", location=chosen, identity={},
                               accepted=True)
    core = discovery.import_core(cand)
    assert core.WHERE == "binding path"
    assert Path(core.__file__).parent == chosen
    assert discovery.import_core(cand) is core  # loaded once
