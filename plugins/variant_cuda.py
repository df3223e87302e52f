"""Variant platform ``cuda``: nvcc builds for the row's arch list; compile-only without a GPU.

Without the toolkit's libcuda stub the build must not link the driver: the plugin then asks the
engine's descriptor how it spells ``cuda_vmm: off`` (ggml: ``GGML_CUDA_NO_VMM=ON``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from harness.core.types import Buildability, EngineSpec, HostInfo, Variant
from harness.engine.plugin import hookimpl


def cublas_wheel_root() -> Path | None:
    """The ``nvidia-cublas`` wheel's root (it supplies cuBLAS when the toolkit lacks it)."""
    spec = importlib.util.find_spec("nvidia")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13", "cublas"):
            root = Path(loc, sub)
            if (root / "include" / "cublas_v2.h").exists():
                return root
    return None


def toolkit_root(nvcc: str | None) -> Path | None:
    """The CUDA toolkit directory (nvcc is often a wrapper script on PATH)."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if c and Path(c, "bin", "nvcc").is_file() and Path(c, "include", "cuda_runtime.h").is_file():
            return Path(c).resolve()
    return None


def _lib_dirs(root: Path) -> list[Path]:
    return [root / "lib64", root / "lib", *sorted(root.glob("targets/*/lib"))]


def toolkit_has_cublas(nvcc: str | None) -> bool:
    root = toolkit_root(nvcc)
    return root is not None and any(any(d.glob("libcublas.so*")) for d in _lib_dirs(root))


def toolkit_has_driver_stub(nvcc: str | None) -> bool:
    root = toolkit_root(nvcc)
    return root is not None and any((d / "stubs" / "libcuda.so").exists() for d in _lib_dirs(root))


def arch_satisfies(archs: tuple[str, ...] | list[str], compute_capability: str) -> bool:
    """Whether a build for ``archs`` runs on a GPU of ``compute_capability`` (e.g. ``8.9``).

    A ``-real`` arch needs the same major and a minor <= the GPU's; a ``-virtual``
    (PTX) arch JIT-compiles for any GPU >= it. Arch-specific ``a`` builds run only
    on that exact capability.
    """
    major, minor = (int(x) for x in compute_capability.split("."))
    cc = major * 10 + minor
    for a in archs:
        base, _, kind = a.partition("-")
        specific = base.endswith(("a", "f"))
        num = int(base.rstrip("af"))
        if kind == "virtual" and cc >= num:
            return True
        if specific and cc == num:
            return True
        if not specific and kind in ("real", "") and num // 10 == major and num <= cc:
            return True
    return False


@hookimpl
def harness_variant_requirements(variant: Variant, host: HostInfo) -> Buildability | None:
    from harness.build.matrix import generic_reasons
    if variant.platform != "cuda":
        return None
    reasons = generic_reasons(variant, host)
    notes = []
    nvcc = host.tool("nvcc")
    if nvcc.found:
        if not toolkit_has_cublas(nvcc.path) and cublas_wheel_root() is None:
            reasons.append(f"nvcc {nvcc.version} found but the toolkit has no cuBLAS: "
                           "pip install nvidia-cublas (13.x) to supply it")
        if not toolkit_has_driver_stub(nvcc.path):
            notes.append("no libcuda stub in the toolkit: building without CUDA virtual memory management "
                         "(cuda_vmm: off; no driver link)")
    gpus = [g for g in host.gpus if g.api == "cuda"]
    runnable = bool(gpus)
    if nvcc.found and not gpus:
        notes.append(f"nvcc {nvcc.version} found; no GPU: compile-only")
    for g in gpus:
        if g.compute_capability and not arch_satisfies(variant.cuda_archs, g.compute_capability):
            runnable = False
            notes.append(f"{g.name} (sm_{g.compute_capability}) is not covered by {','.join(variant.cuda_archs)}")
    return Buildability(variant=variant.name, buildable=not reasons, runnable=runnable and not reasons,
                        reasons=tuple(reasons), notes=tuple(notes))


@hookimpl
def harness_artifact_usable(manifest: dict[str, Any], host: HostInfo) -> tuple[bool, list[str]] | None:
    if manifest.get("platform") != "cuda":
        return None
    gpus = [g for g in host.gpus if g.api == "cuda"]
    if not gpus:
        return False, ["no CUDA GPU on this host"]
    archs = manifest.get("cuda_archs", [])
    for g in gpus:
        if g.compute_capability and not arch_satisfies(archs, g.compute_capability):
            return False, [f"{g.name} is sm_{g.compute_capability}; artifact has {','.join(archs)}"]
    return True, []


@hookimpl
def harness_variant_configure(engine: EngineSpec, variant: Variant, host: HostInfo) -> dict[str, str] | None:
    from harness.build.matrix import intent_defines
    if variant.platform != "cuda":
        return None
    defines = {"CMAKE_CUDA_ARCHITECTURES": ";".join(variant.cuda_archs)}
    nvcc = host.tool("nvcc")
    if nvcc.path:
        defines["CMAKE_CUDA_COMPILER"] = nvcc.path
    if not toolkit_has_driver_stub(nvcc.path):
        defines.update(intent_defines(engine, "cuda_vmm", "off") or {})
    root = cublas_wheel_root()
    if root is not None and not toolkit_has_cublas(nvcc.path):
        # Point FindCUDAToolkit's cublas lookup at the wheel.
        lib = next(iter(sorted((root / "lib").glob("libcublas.so*"))), None)
        lt = next(iter(sorted((root / "lib").glob("libcublasLt.so*"))), None)
        if lib and lt:
            defines["CUDA_cublas_LIBRARY"] = str(lib)
            defines["CUDA_cublasLt_LIBRARY"] = str(lt)
            defines["CMAKE_CUDA_FLAGS"] = f"-I{root / 'include'}"
            defines["CMAKE_CXX_FLAGS"] = f"-I{root / 'include'}"
    return defines
