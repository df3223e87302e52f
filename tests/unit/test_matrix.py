from __future__ import annotations

import pytest

from harness.build.matrix import buildability, load_matrix, select
from harness.core.errors import UnknownNameError
from harness.core.types import GpuInfo, HostInfo, ToolInfo
from harness.engine.plugin import make_manager
from harness_plugins.variant_cuda import arch_satisfies


def fake_host(**kw: object) -> HostInfo:
    tools = {n: ToolInfo(name=n, path=f"/usr/bin/{n}", version=v)
             for n, v in {"cmake": "3.31.0", "ninja": "1.12.1", "cc": "12.2.0"}.items()}
    tools.update(kw.pop("tools", {}))  # type: ignore[arg-type]
    base: dict[str, object] = dict(os="linux", arch="x86_64", cpu_model="fake", microarch="haswell",
                                   simd=("avx2",), cores=4, memory_bytes=8 << 30, tools=tools)
    base.update(kw)
    return HostInfo(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def rows():  # type: ignore[no-untyped-def]
    return load_matrix()


def _b(rows, name, host):  # type: ignore[no-untyped-def]
    pm = make_manager(autoload=False)
    return buildability(pm, select(rows, name)[0], host)


def test_every_design_row_exists(rows) -> None:  # type: ignore[no-untyped-def]
    assert {r.name for r in rows} >= {"cpu", "cpu-native", "cuda", "vulkan", "metal", "mlx"}
    cpu = select(rows, "cpu")[0]
    assert cpu.intent == {"cpu_levels": "runtime"}


def test_cpu_builds_on_linux(rows) -> None:  # type: ignore[no-untyped-def]
    assert _b(rows, "cpu", fake_host()).buildable


def test_metal_reason_names_the_host(rows) -> None:  # type: ignore[no-untyped-def]
    b = _b(rows, "metal", fake_host())
    assert not b.buildable
    assert "needs macOS arm64, host is linux x86_64" in b.reasons


def test_metal_on_a_mac(rows) -> None:  # type: ignore[no-untyped-def]
    mac = fake_host(os="darwin", arch="arm64", tools={"xcrun": ToolInfo(name="xcrun", path="/usr/bin/xcrun", version="70")})
    assert _b(rows, "metal", mac).buildable


def test_cuda_without_nvcc(rows) -> None:  # type: ignore[no-untyped-def]
    b = _b(rows, "cuda", fake_host())
    assert not b.buildable and any("nvcc not found" in r for r in b.reasons)


def test_cuda_old_toolkit_is_refused(rows) -> None:  # type: ignore[no-untyped-def]
    b = _b(rows, "cuda", fake_host(tools={"nvcc": ToolInfo(name="nvcc", path="/x/nvcc", version="12.4")}))
    assert any("nvcc 12.4 found, need >= 13.0" in r for r in b.reasons)


def test_cuda_without_gpu_is_compile_only(rows, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import harness_plugins.variant_cuda as vc

    monkeypatch.setattr(vc, "toolkit_has_cublas", lambda nvcc: True)
    b = _b(rows, "cuda", fake_host(tools={"nvcc": ToolInfo(name="nvcc", path="/x/nvcc", version="13.0")}))
    assert b.buildable and not b.runnable
    assert "nvcc 13.0 found; no GPU: compile-only" in b.notes


def test_cuda_gpu_not_covered_by_archs(rows, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import harness_plugins.variant_cuda as vc

    monkeypatch.setattr(vc, "toolkit_has_cublas", lambda nvcc: True)
    host = fake_host(tools={"nvcc": ToolInfo(name="nvcc", path="/x/nvcc", version="13.0")},
                     gpus=(GpuInfo(api="cuda", name="GTX 1080", compute_capability="6.1"),))
    b = _b(rows, "cuda", host)
    assert b.buildable and not b.runnable


@pytest.mark.parametrize(("archs", "cc", "ok"), [
    (["86-real"], "8.9", True),
    (["86-real"], "9.0", False),
    (["90-virtual"], "12.0", True),
    (["120a-real"], "12.0", True),
    (["120a-real"], "12.1", False),
    (["75-virtual"], "6.1", False),
])
def test_arch_satisfies(archs: list[str], cc: str, ok: bool) -> None:
    assert arch_satisfies(archs, cc) is ok


def test_a_cuda_artifact_is_usable_where_the_cuda_plugin_says() -> None:
    """The core asks the plugin manager (harness_artifact_usable); the CUDA plugin answers with its arch check."""
    from harness.build.artifacts import usable_on

    pm = make_manager(autoload=False)
    manifest = {"platform": "cuda", "host": {"os": "linux"}, "cuda_archs": ["86-real"]}
    assert usable_on(manifest, fake_host(), pm) == (False, ["no CUDA GPU on this host"])
    ada = fake_host(gpus=(GpuInfo(api="cuda", name="L4", compute_capability="8.9"),))
    assert usable_on(manifest, ada, pm) == (True, [])
    hopper = fake_host(gpus=(GpuInfo(api="cuda", name="H200", compute_capability="9.0"),))
    assert usable_on(manifest, hopper, pm) == (False, ["H200 is sm_9.0; artifact has 86-real"])
    assert usable_on({**manifest, "cuda_archs": ["90-real"]}, hopper, pm) == (True, [])
    # a CPU artifact: no plugin objects, and no CUDA GPU is needed
    assert usable_on({"platform": "cpu", "host": {"os": "linux"}}, fake_host(), pm) == (True, [])


def test_unknown_variant_did_you_mean(rows) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnknownNameError, match="did you mean 'vulkan'"):
        select(rows, "vulcan")


def test_pattern_selection(rows) -> None:  # type: ignore[no-untyped-def]
    assert [r.name for r in select(rows, "cpu*")] == ["cpu", "cpu-aarch64", "cpu-native"]
    assert [r.name for r in select(rows, "cpu-a*")] == ["cpu-aarch64"]


def test_a_cross_row_carries_its_target_triple(rows) -> None:  # type: ignore[no-untyped-def]
    by = {r.name: r for r in rows}
    assert by["cpu-aarch64"].target == "aarch64-linux-gnu" and by["cpu-aarch64"].arch == ("x86_64",)
    assert by["cpu"].target == ""
