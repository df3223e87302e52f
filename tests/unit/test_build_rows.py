"""Engine-neutral matrix rows: a row states intent, each engine's descriptor spells it.

``data/effective_defines.json`` was computed with the harness *before* rows became intent
(rows held GGML_* defines): per host scenario, engine and row, the defines beyond the engine's
``cmake.base`` and the build key. The build dir (and so ccache) is keyed by the effective
defines: they must not move for llama.cpp and stable-diffusion.cpp. The engine's base and pin
are taken from the file, so moving a pin does not touch this test; changing a row's intent
mapping on purpose does (then regenerate the file and say why in the commit).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import harness_plugins.variant_cuda as vc
import harness_plugins.variant_vulkan as vk
from harness.build import cmake as build_mod
from harness.build.cmake import build_key, effective_defines, smoke_cpu_level
from harness.build.matrix import (
    buildability,
    engine_support,
    get_variant,
    intent_defines,
    load_matrix,
    row_defines,
)
from harness.build.pipeline import rows_for
from harness.core.errors import ConfigError, UsageError
from harness.core.types import EngineSpec, HostInfo, PatchedTree, SourceSpec, ToolInfo, Variant
from harness.engine.descriptor import load_engine
from harness.engine.plugin import make_manager

PINNED = json.loads((Path(__file__).parent / "data" / "effective_defines.json").read_text())
VK_INCLUDE = "/cache/toolchains/vulkan-headers-1.4.309-8d329d465e16/include"


def _tools(**extra: str) -> dict[str, ToolInfo]:
    versions = {"cmake": "3.31.0", "ninja": "1.12.1", "cc": "12.2.0", "c++": "12.2.0", **extra}
    return {n: ToolInfo(name=n, path=f"/usr/bin/{n}", version=v) for n, v in versions.items()}


def _scenario(name: str, wheel: Path) -> dict[str, Any]:
    """The hosts and toolkit states the pinned file was computed for."""
    if name == "linux-x86_64":
        return {"host": HostInfo(os="linux", arch="x86_64", cpu_model="f", microarch="zen4", simd=(), cores=2,
                                 memory_bytes=1, tools=_tools(ccache="4.8", nvcc="13.0", glslc="2023.8"),
                                 vulkan_headers="1.4.309"),
                "stub": False, "cublas": True, "wheel": None}
    if name == "linux-old-vulkan-cublas-wheel":
        return {"host": HostInfo(os="linux", arch="aarch64", cpu_model="f", microarch="x", simd=(), cores=2,
                                 memory_bytes=1, tools=_tools(ccache="4.8", nvcc="13.0"), vulkan_headers="1.3.239"),
                "stub": True, "cublas": False, "wheel": wheel}
    assert name == "darwin-arm64"
    return {"host": HostInfo(os="darwin", arch="arm64", cpu_model="f", microarch="m1", simd=(), cores=2,
                             memory_bytes=1, tools=_tools(xcrun="16")),
            "stub": False, "cublas": False, "wheel": None}


def _cublas_wheel(root: Path) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "include").mkdir()
    for n in ("libcublas.so.13", "libcublasLt.so.13"):
        (root / "lib" / n).write_text("")
    return root


def _as_pinned(engine: EngineSpec, pinned: dict[str, Any]) -> EngineSpec:
    """``engine`` with the pin and base options it had when the file was written."""
    source = dataclasses.replace(engine.source, version=pinned["pin"], sha256=pinned["source"])
    return dataclasses.replace(engine, source=source, cmake={**engine.cmake, "base": dict(pinned["base"])})


CASES = [(s, e, r) for s, engines in sorted(PINNED["scenarios"].items())
         for e, rows in sorted(engines.items()) for r in sorted(rows)]


@pytest.mark.parametrize(("scenario", "engine_name", "row"), CASES)
def test_effective_defines_and_build_keys_did_not_move(scenario: str, engine_name: str, row: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _cublas_wheel(tmp_path / "wheel")
    s = _scenario(scenario, wheel)
    monkeypatch.setattr(vc, "toolkit_has_driver_stub", lambda nvcc: s["stub"])
    monkeypatch.setattr(vc, "toolkit_has_cublas", lambda nvcc: s["cublas"])
    monkeypatch.setattr(vc, "cublas_wheel_root", lambda: s["wheel"])
    monkeypatch.setattr(vk, "ensure_headers", lambda *a, **k: Path(VK_INCLUDE))
    pinned = PINNED["scenarios"][scenario][engine_name][row]
    engine = _as_pinned(load_engine(engine_name), PINNED["engines"][engine_name])
    variant = get_variant(row)
    defines = effective_defines(make_manager(autoload=False), engine, variant, s["host"], {})
    shown = {k: v.replace(str(wheel), "<wheel>") for k, v in defines.items()}
    base = engine.cmake["base"]
    assert {k: v for k, v in shown.items() if base.get(k) != v} == pinned["defines"]
    assert list(defines) == sorted(defines)
    tree = PatchedTree(engine=engine_name, pin=engine.pin, path=Path("/t"), series_hash="s" * 64, patches=(),
                       applied=False)
    unwheeled = {k: v.replace(str(wheel), "<wheel>") for k, v in defines.items()}
    assert build_key(engine, tree, variant, unwheeled) == pinned["build_key"]


def test_rows_state_intent_not_defines() -> None:
    rows = {r.name: r for r in load_matrix()}
    assert rows["cpu"].intent == {"cpu_levels": "runtime"}
    assert rows["cpu-native"].intent == {"cpu_levels": "native"}
    assert rows["cuda"].intent == {"gpu": "cuda", "cpu_levels": "runtime"}
    text = (Path(__file__).parents[2] / "matrix" / "variants.yaml").read_text()
    assert "GGML_" not in text


def _engine(tmp_path: Path, *, intents: dict[str, Any] | None = None, variants: tuple[str, ...] = (),
            smoke: dict[str, Any] | None = None) -> EngineSpec:
    return EngineSpec(name="tiny", root=tmp_path / "engines" / "tiny", source=SourceSpec(kind="git"), upstream={},
                      cmake={"base": {"CMAKE_BUILD_TYPE": "Release"}}, targets=("tiny",),
                      artifacts={"lib": ("lib*.so*",), "include": ()}, abi={},
                      intents=intents if intents is not None else {"cpu_levels": {"runtime": {}}},
                      variants=variants, smoke=smoke or {})


def test_an_unmapped_intent_is_not_supported_with_the_reason(tmp_path: Path) -> None:
    tiny = _engine(tmp_path)
    assert engine_support(tiny, get_variant("cpu")) is None
    assert row_defines(tiny, get_variant("cpu")) == {}
    reason = engine_support(tiny, get_variant("cuda"))
    assert reason is not None and reason.startswith("not supported by tiny: its descriptor does not map the "
                                                    "row's intent gpu: cuda (cmake.intents in ")
    assert "cpu_levels: native" in str(engine_support(tiny, get_variant("cpu-native")))
    with pytest.raises(UsageError, match="variant cuda is not supported by tiny"):
        row_defines(tiny, get_variant("cuda"))
    # An empty mapping is a mapping; a missing value is not.
    assert intent_defines(tiny, "cpu_levels", "runtime") == {}
    assert intent_defines(tiny, "cpu_levels", "native") is None
    assert intent_defines(tiny, "gpu", "none") is None


def test_the_descriptor_variants_list_limits_rows(tmp_path: Path) -> None:
    tiny = _engine(tmp_path, intents={"cpu_levels": {"runtime": {}, "native": {"X": "ON"}}}, variants=("cpu",))
    assert engine_support(tiny, get_variant("cpu")) is None
    assert "its descriptor builds only cpu (variants: in" in str(engine_support(tiny, get_variant("cpu-native")))
    sd = load_engine("sdcpp")
    assert engine_support(sd, get_variant("cpu")) is None
    assert engine_support(sd, get_variant("vulkan")) is not None


def _linux() -> HostInfo:
    return HostInfo(os="linux", arch="x86_64", cpu_model="f", microarch="zen4", simd=(), cores=2, memory_bytes=1,
                    tools=_tools())


def test_buildability_names_the_engine_that_does_not_build_a_row(tmp_path: Path) -> None:
    pm = make_manager(autoload=False)
    tiny = _engine(tmp_path)
    b = buildability(pm, get_variant("cpu-native"), _linux(), tiny)
    assert not b.buildable and b.reasons[0].startswith("not supported by tiny")
    assert buildability(pm, get_variant("cpu"), _linux(), tiny).buildable
    # `harness matrix` (no engine): the row stays buildable, a note names each engine that does not build it.
    b = buildability(pm, get_variant("cpu-native"), _linux())
    assert b.buildable
    assert any(n.startswith("not supported by sdcpp: its descriptor builds only cpu") for n in b.notes)
    assert not any("llamacpp" in n for n in b.notes)


def test_cpu_plugin_keys_on_intent(tmp_path: Path) -> None:
    import harness_plugins.variant_cpu as vcpu

    mac = HostInfo(os="darwin", arch="arm64", cpu_model="f", microarch="m1", simd=(), cores=2, memory_bytes=1,
                   tools=_tools())
    native = Variant(name="mine", platform="cpu", intent={"cpu_levels": "native"})
    b = vcpu.harness_variant_requirements(variant=native, host=_linux())
    assert b is not None and "tuned for this host (zen4); not portable" in b.notes
    portable = Variant(name="mine", platform="cpu", intent={"cpu_levels": "runtime"})
    b = vcpu.harness_variant_requirements(variant=portable, host=_linux())
    assert b is not None and not any("tuned" in n for n in b.notes)
    # On macOS a CPU row also intends gpu: none, spelled by the engine (or nothing when it has no GPU to switch off).
    metal = _engine(tmp_path, intents={"cpu_levels": {"runtime": {}}, "gpu": {"none": {"FOO_METAL": "OFF"}}})
    assert vcpu.harness_variant_configure(engine=metal, variant=portable, host=mac) == {"FOO_METAL": "OFF"}
    assert vcpu.harness_variant_configure(engine=_engine(tmp_path), variant=portable, host=mac) == {}
    assert vcpu.harness_variant_configure(engine=metal, variant=portable, host=_linux()) == {}


def test_cuda_plugin_asks_the_engine_how_to_spell_no_vmm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vc, "toolkit_has_driver_stub", lambda nvcc: False)
    monkeypatch.setattr(vc, "cublas_wheel_root", lambda: None)
    cuda = get_variant("cuda")
    host = HostInfo(os="linux", arch="x86_64", cpu_model="f", microarch="zen4", simd=(), cores=2, memory_bytes=1,
                    tools=_tools(nvcc="13.0"))
    eng = _engine(tmp_path, intents={"gpu": {"cuda": {}}, "cpu_levels": {"runtime": {}},
                                     "cuda_vmm": {"off": {"TINY_NO_VMM": "1"}}})
    out = vc.harness_variant_configure(engine=eng, variant=cuda, host=host)
    assert out is not None and out["TINY_NO_VMM"] == "1" and "GGML_CUDA_NO_VMM" not in out
    out = vc.harness_variant_configure(engine=_engine(tmp_path), variant=cuda, host=host)
    assert out is not None and not any("VMM" in k for k in out)
    monkeypatch.setattr(vc, "toolkit_has_driver_stub", lambda nvcc: True)
    out = vc.harness_variant_configure(engine=eng, variant=cuda, host=host)
    assert out is not None and "TINY_NO_VMM" not in out


def test_no_variant_plugin_sets_a_ggml_define() -> None:
    """A define name as a string of its own (a dict key, a ``.get`` argument) means the plugin spells it."""
    import ast
    import re

    plugins = Path(__file__).parents[2] / "plugins"
    for name in ("variant_cpu.py", "variant_cuda.py", "variant_metal.py", "variant_mlx.py", "variant_vulkan.py"):
        tree = ast.parse((plugins / name).read_text())
        names = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and re.fullmatch(r"GGML_\w+", n.value)]
        assert names == [], (name, names)


def test_build_refuses_a_row_the_engine_does_not_build(tmp_path: Path) -> None:
    tiny = _engine(tmp_path)
    tree = PatchedTree(engine="tiny", pin="x", path=tmp_path, series_hash="s", patches=(), applied=False)
    with pytest.raises(UsageError, match="variant cuda is not supported by tiny"):
        build_mod.build(make_manager(autoload=False), tiny, get_variant("cuda"), tree, _linux())


def test_harness_build_refuses_named_rows_and_skips_wildcard_ones(tmp_path: Path) -> None:
    tiny = _engine(tmp_path)
    rows, skipped = rows_for(tiny, "cpu*", strict=True)
    assert [r.name for r in rows] == ["cpu", "cpu-aarch64"]  # the cross row has the same intent
    assert [(v.name, r.split(":")[0]) for v, r in skipped] == [("cpu-native", "not supported by tiny")]
    with pytest.raises(UsageError, match="variant cpu-native is not supported by tiny"):
        rows_for(tiny, "cpu,cpu-native", strict=True)
    with pytest.raises(UsageError, match="no variant matching 'cu\\*' is built by tiny"):
        rows_for(tiny, "cu*", strict=True)
    sd = load_engine("sdcpp")
    with pytest.raises(UsageError, match="its descriptor builds only cpu"):
        rows_for(sd, "vulkan", strict=True)


def test_smoke_command_is_engine_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_TRUST", "tiny")  # an untrusted recipe's smoke check does not run
    art = tmp_path / "artifact"
    (art / "bin").mkdir(parents=True)
    tool = art / "bin" / "probe"
    tool.write_text("#!/bin/sh\necho \"loaded CPU backend from /x/libfoo-cpu-zen4.so\" >&2\n")
    tool.chmod(0o755)
    smoke = {"when": {"cpu_levels": "runtime"}, "argv": ["bin/probe", "--list"],
             "cpu_level": r"loaded CPU backend from \S*libfoo-cpu-(\w+)\.so"}
    tiny = _engine(tmp_path, smoke=smoke)
    assert smoke_cpu_level(tiny, get_variant("cpu"), art) == "zen4"
    assert smoke_cpu_level(tiny, get_variant("cpu-native"), art) is None  # `when` does not match
    assert smoke_cpu_level(_engine(tmp_path), get_variant("cpu"), art) is None  # no smoke: in the descriptor
    tool.unlink()
    assert smoke_cpu_level(tiny, get_variant("cpu"), art) is None  # the artifact lacks the program
    assert load_engine("llamacpp").smoke["argv"][0] == "bin/llama-bench"
    assert load_engine("sdcpp").smoke == {}


def test_descriptor_schema_refuses_an_unknown_intent_key(tmp_path: Path) -> None:
    from harness.engine.descriptor import parse_engine

    text = (Path(__file__).parents[2] / "engines" / "llamacpp" / "engine.yaml").read_text()
    bad = tmp_path / "engines" / "llamacpp" / "engine.yaml"
    bad.parent.mkdir(parents=True)
    bad.write_text(text.replace("    cuda_vmm:\n", "    cuda_vm:\n"))
    with pytest.raises(ConfigError, match="cuda_vm"):
        parse_engine(bad)


def test_matrix_schema_refuses_defines_and_unknown_intents(tmp_path: Path) -> None:
    row = "rows:\n  - name: x\n    platform: cpu\n"
    (tmp_path / "a.yaml").write_text(row + "    defines: {GGML_NATIVE: 'ON'}\n    intent: {cpu_levels: native}\n")
    with pytest.raises(ConfigError, match="defines"):
        load_matrix(tmp_path)
    (tmp_path / "a.yaml").write_text(row + "    intent: {cpu_levels: turbo}\n")
    with pytest.raises(ConfigError, match="turbo"):
        load_matrix(tmp_path)
    (tmp_path / "a.yaml").write_text(row + "    intent: {cpu_levels: native}\n")
    assert load_matrix(tmp_path)[0].intent == {"cpu_levels": "native"}


def test_a_recipe_from_history_without_intents_uses_the_working_trees(tmp_path: Path) -> None:
    """``harness build --pin OLD``: the old descriptor predates cmake.intents; the rows it builds and
    their defines are the working tree's, as when rows carried the defines themselves."""
    current = load_engine("llamacpp")
    old = dataclasses.replace(current, intents={}, smoke={}, recipe_commit="a" * 40)
    host = HostInfo(os="linux", arch="x86_64", cpu_model="f", microarch="zen4", simd=(), cores=2, memory_bytes=1,
                    tools=_tools())
    pm = make_manager(autoload=False)
    for row in ("cpu", "cpu-native", "vulkan"):
        v = get_variant(row)
        assert engine_support(old, v) is None
        assert effective_defines(pm, old, v, host, {}) == effective_defines(pm, current, v, host, {})
    assert build_mod.with_current_build_data(old).smoke == current.smoke
    # Not from history: an engine without intents maps nothing.
    assert engine_support(dataclasses.replace(current, intents={}), get_variant("cpu")) is not None


def test_a_row_may_name_its_engines(tmp_path: Path) -> None:
    only = dataclasses.replace(get_variant("cpu"), engines=("other",))
    assert "the row is for other only" in str(engine_support(_engine(tmp_path), only))
    assert engine_support(_engine(tmp_path), dataclasses.replace(only, engines=("tiny",))) is None
