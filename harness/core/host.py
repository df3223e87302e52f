"""Host probe: OS, CPU (archspec), memory, toolchains, GPUs, Vulkan, Metal, ffmpeg."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import archspec.cpu
import psutil

from harness.core.errors import UsageError
from harness.core.types import GpuInfo, HostInfo, ToolInfo

#: tool -> (argv to print its version, regex capturing the version)
TOOLS: dict[str, tuple[list[str], str]] = {
    "cc": (["cc", "--version"], r"(\d+\.\d+(?:\.\d+)?)"),
    "c++": (["c++", "--version"], r"(\d+\.\d+(?:\.\d+)?)"),
    "gcc": (["gcc", "-dumpfullversion"], r"(\d+\.\d+(?:\.\d+)?)"),
    "clang": (["clang", "--version"], r"version (\d+\.\d+(?:\.\d+)?)"),
    "cmake": (["cmake", "--version"], r"version (\d+\.\d+(?:\.\d+)?)"),
    "ninja": (["ninja", "--version"], r"(\d+\.\d+(?:\.\d+)?)"),
    "ccache": (["ccache", "--version"], r"version (\d+\.\d+(?:\.\d+)?)"),
    "git": (["git", "--version"], r"(\d+\.\d+(?:\.\d+)?)"),
    "nvcc": (["nvcc", "--version"], r"release (\d+\.\d+)"),
    "nvidia-smi": (["nvidia-smi", "--version"], r"DRIVER version\s*:\s*([\d.]+)"),
    "glslc": (["glslc", "--version"], r"shaderc v?(\d+\.\d+)"),
    "vulkaninfo": (["vulkaninfo", "--summary"], r"Vulkan Instance Version: (\d+\.\d+\.\d+)"),
    "xcrun": (["xcrun", "--version"], r"version (\d+(?:\.\d+)*)"),
    "ffmpeg": (["ffmpeg", "-hide_banner", "-version"], r"ffmpeg version n?(\d+\.\d+(?:\.\d+)?)"),
    "nm": (["nm", "--version"], r"(\d+\.\d+(?:\.\d+)?)"),
    "patchelf": (["patchelf", "--version"], r"(\d+\.\d+(?:\.\d+)?)"),
}

CUDA_DIRS = ("/usr/local/cuda/bin", "/usr/local/cuda-13.0/bin", "/opt/cuda/bin")


def _which(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and name == "nvcc":
        found = next((str(Path(d, "nvcc")) for d in CUDA_DIRS if Path(d, "nvcc").exists()), None)
    return found


def _run(argv: list[str], timeout: float = 15) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout + r.stderr


def probe_tool(name: str) -> ToolInfo:
    argv, pattern = TOOLS[name]
    path = _which(argv[0])
    if name == "ffmpeg" and path is None:
        path = _imageio_ffmpeg()
    if path is None:
        return ToolInfo(name=name)
    out = _run([path, *argv[1:]])
    m = re.search(pattern, out)
    detail = "imageio-ffmpeg wheel" if name == "ffmpeg" and "imageio_ffmpeg" in path else ""
    return ToolInfo(name=name, path=path, version=m.group(1) if m else None, detail=detail)


def _imageio_ffmpeg() -> str | None:
    try:
        import imageio_ffmpeg

        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except Exception:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        return _run(["sysctl", "-n", "machdep.cpu.brand_string"]).strip() or platform.processor()
    return platform.processor() or "unknown"


def _cuda_gpus(smi: ToolInfo) -> list[GpuInfo]:
    if not smi.found or smi.path is None:
        return []
    out = _run([smi.path, "--query-gpu=name,compute_cap", "--format=csv,noheader"])
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and re.fullmatch(r"\d+\.\d+", parts[1]):
            gpus.append(GpuInfo(api="cuda", name=parts[0], compute_capability=parts[1]))
    return gpus


def _vulkan_devices(vi: ToolInfo) -> list[GpuInfo]:
    if not vi.found or vi.path is None:
        return []
    out = _run([vi.path, "--summary"])
    devs = []
    for block in re.split(r"\nGPU\d+:\n", out)[1:]:
        name = re.search(r"deviceName\s*=\s*(.+)", block)
        kind = re.search(r"deviceType\s*=\s*(\S+)", block)
        if name:
            devs.append(GpuInfo(api="vulkan", name=name.group(1).strip(),
                                device_type=kind.group(1) if kind else ""))
    return devs


def vulkan_header_version(include: Path) -> str | None:
    """``1.4.309`` from ``<include>/vulkan/vulkan_core.h``, or None when there is none."""
    core = include / "vulkan" / "vulkan_core.h"
    if not core.is_file():
        return None
    text = core.read_text(errors="replace")
    m = re.search(r"#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(0, (\d+), (\d+), VK_HEADER_VERSION\)", text)
    v = re.search(r"#define VK_HEADER_VERSION (\d+)", text)
    return f"{m.group(1)}.{m.group(2)}.{v.group(1)}" if m and v else None


def system_vulkan_headers() -> str | None:
    """The version of the first Vulkan headers found in the usual places ($VULKAN_SDK too)."""
    for inc in ("/usr/include", "/usr/local/include", os.environ.get("VULKAN_SDK", "") + "/include"):
        found = vulkan_header_version(Path(inc))
        if found:
            return found
    return None


def _ffmpeg_has_aac(ff: ToolInfo) -> bool | None:
    if not ff.found or ff.path is None:
        return None
    return bool(re.search(r"^\s*A\S*\s+aac\s", _run([ff.path, "-hide_banner", "-encoders"]), re.M))


def normalize_arch(machine: str) -> str:
    m = machine.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "arm64" if platform.system() == "Darwin" else "aarch64"}.get(m, m)


@functools.cache
def cpu_fingerprint() -> str:
    """What CPU-dependent verdicts are keyed by: machine, CPU model and its feature flags.

    Two hosts with the same fingerprint run the same instructions; a host that gains a
    feature (a microcode or kernel change exposing AMX, say) gets a new fingerprint.
    """
    cpu = archspec.cpu.host()
    text = "|".join([platform.machine(), _cpu_model(), cpu.name, *sorted(cpu.features)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def usable_cpus() -> int:
    """Logical CPUs this process may run on (its affinity mask; all of them where there is none)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


def physical_cores() -> int:
    """Physical cores of the host (psutil), or the logical count where it cannot tell."""
    return int(psutil.cpu_count(logical=False) or os.cpu_count() or 1)


def default_threads() -> int:
    """Compute threads an engine gets unless told otherwise: one per physical core, within the affinity mask.

    Hyper-threads share a core's execution units, so matmul-bound engines gain nothing
    from them and decode loses to the extra synchronisation; a process pinned to fewer
    CPUs than there are cores gets one thread per CPU it may use.
    """
    return max(1, min(physical_cores(), usable_cpus()))


def resolve_threads(requested: int | None) -> tuple[int, str]:
    """``(threads, where the count came from)`` for ``--threads`` (None: the host's default)."""
    if requested is not None:
        if requested < 1:
            msg = f"expected --threads >= 1, found {requested}"
            raise UsageError(msg)
        return requested, "--threads"
    cores, usable = physical_cores(), usable_cpus()
    threads = default_threads()
    why = f"{cores} physical cores" + (f", {usable} CPUs in the affinity mask" if usable < cores else "")
    return threads, why


def probe() -> HostInfo:
    """Probe the host once per process (tools are queried in parallel)."""
    with ThreadPoolExecutor(max_workers=8) as ex:
        tools = dict(zip(TOOLS, ex.map(probe_tool, TOOLS), strict=True))
    cpu = archspec.cpu.host()
    system = platform.system().lower()
    cuda = tools["nvcc"].version
    mac = platform.mac_ver()[0] or None if system == "darwin" else None
    return HostInfo(
        os=system,
        arch=normalize_arch(platform.machine()),
        cpu_model=_cpu_model(),
        microarch=cpu.name,
        simd=tuple(sorted(cpu.features)),
        cores=os.cpu_count() or 1,
        memory_bytes=psutil.virtual_memory().total,
        tools=tools,
        gpus=tuple(_cuda_gpus(tools["nvidia-smi"]) + _vulkan_devices(tools["vulkaninfo"])),
        cuda_version=cuda,
        vulkan_headers=system_vulkan_headers(),
        macos_version=mac,
        ffmpeg_aac=_ffmpeg_has_aac(tools["ffmpeg"]),
    )


def as_dict(host: HostInfo) -> dict[str, Any]:
    return dataclasses.asdict(host)
