"""Variant platform ``vulkan``: glslc + Vulkan headers; lavapipe gives a CPU device to run on.

The Vulkan headers decide which GPU features ggml-vulkan compiles in (KHR cooperative matrix,
bfloat16, 64-bit indexing are all behind ``#if defined(VK_...)``), and the pinned ggml-vulkan
does not compile at all below ``vulkan_headers_min``. When the host's headers are older, the
row's ``vulkan_headers_package`` (a sha256-pinned package holding newer headers, named by its
path in the Debian archive) is fetched from the Debian mirror apt is configured with
(:func:`harness.source.mirrors.debian_pool_url`) into the cache, and the build points CMake's
``Vulkan_INCLUDE_DIR`` at it. Only headers come from it:
ggml-vulkan resolves every Vulkan entry point at run time through vulkan.hpp's dynamic
dispatcher, so the host's own loader (``libvulkan.so``) still links and runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from harness.core.errors import SourceError, UnsafeArchiveError
from harness.core.tarfiles import tarfile
from harness.core.types import Buildability, EngineSpec, HostInfo, Variant
from harness.engine.plugin import hookimpl

STAMP = ".harness-headers.json"
# ggml-vulkan's CMake looks for these with find_package(SPIRV-Headers CONFIG REQUIRED).
SPIRV_CONFIG_DIRS = ("share/cmake/SPIRV-Headers", "lib/cmake/SPIRV-Headers", "share/SPIRV-Headers/cmake")
# ggml-vulkan's configure-time glslc probes: "-- GL_EXT_bfloat16 not supported by glslc".
GLSLC_PROBE = re.compile(r"^-- (GL_\w+) (not )?supported by glslc$", re.MULTILINE)


def headers_package(variant: Variant) -> dict[str, Any] | None:
    """The row's pinned headers package, validated (``version``, ``pool_path``, ``sha256``, ``members``)."""
    pkg = variant.extra.get("vulkan_headers_package")
    if pkg is None:
        return None
    missing = [k for k in ("version", "pool_path", "sha256", "members") if not pkg.get(k)]
    if missing:
        why = (" (a url is no longer read: the file comes from the Debian mirror apt is configured with)"
               if "pool_path" in missing and pkg.get("url") else "")
        msg = (f"matrix row {variant.name}: vulkan_headers_package lacks {', '.join(missing)}{why} "
               "(see matrix/variants.yaml)")
        raise SourceError(msg)
    return dict(pkg)


def headers_root(pkg: dict[str, Any]) -> Path:
    """Where a headers package lands: ``<cache>/toolchains/vulkan-headers-<version>-<sha12>/``."""
    from harness.core import paths
    return paths.cache_root() / "toolchains" / f"vulkan-headers-{pkg['version']}-{str(pkg['sha256'])[:12]}"


def needs_package(variant: Variant, host: HostInfo) -> bool:
    """The host's headers are missing or older than the row's minimum, and the row pins a package."""
    from harness.build.matrix import version_at_least
    minimum = str(variant.extra.get("vulkan_headers_min", "1.3"))
    return headers_package(variant) is not None and not version_at_least(host.vulkan_headers, minimum)


def extract_deb_members(deb: Path, dest: Path, members: list[str]) -> list[str]:
    """Extract the files under ``members`` (e.g. ``usr/include/vulkan``) of a .deb into ``dest``.

    The member prefix is stripped (``usr/include/vulkan/x.h`` -> ``vulkan/x.h``); the tar's
    ``data`` filter refuses escaping paths and links. Returns the extracted names.
    """
    from debian.arfile import ArError
    from debian.debfile import DebError, DebFile

    prefixes = [PurePosixPath(m.strip("/")) for m in members]
    written: list[str] = []
    try:
        package = DebFile(str(deb))
    except (ArError, DebError, OSError, KeyError, tarfile.TarError) as e:
        msg = f"cannot read {deb} as a Debian package: {e}. Delete it and build again to re-download"
        raise SourceError(msg) from e
    try:
        data = package.data.tgz()
        for m in data.getmembers():
            name = PurePosixPath(m.name.removeprefix("./"))
            prefix = next((p for p in prefixes if p in name.parents), None)
            if prefix is None or not (m.isfile() or m.issym()):
                continue
            # Keep the last path component of the prefix: usr/include/vulkan/x.h -> vulkan/x.h
            m.name = str(name.relative_to(prefix.parent))
            try:
                data.extract(m, dest, filter="data")
            except (tarfile.FilterError, OSError) as e:
                msg = f"refusing {deb.name}: member {name} failed the safety filter: {e}"
                raise UnsafeArchiveError(msg) from e
            written.append(m.name)
    finally:
        package.close()
    if not written:
        msg = f"{deb.name} holds nothing under {', '.join(members)}: check vulkan_headers_package.members"
        raise SourceError(msg)
    return written


def ensure_headers(pkg: dict[str, Any]) -> Path:
    """Fetch and unpack a pinned headers package once (locked, stamped); return its include dir."""
    from filelock import FileLock

    from harness.core import paths, progress
    from harness.core.host import vulkan_header_version
    from harness.source import mirrors
    from harness.source.cache import download
    root = headers_root(pkg)
    include = root / "include"
    stamp = root / STAMP
    with FileLock(str(paths.locks_dir() / f"{root.name}.lock")):
        if stamp.is_file() and json.loads(stamp.read_text()).get("sha256") == pkg["sha256"]:
            return include
        pool_path = str(pkg["pool_path"])

        def url() -> str:  # asked only when the package is not in the downloads cache yet
            where = mirrors.debian_pool_url(pool_path)
            progress.info(f"fetching Vulkan headers {pkg['version']} from {where}")
            return where

        deb = download(url, paths.downloads_dir() / PurePosixPath(pool_path).name, sha256=str(pkg["sha256"]))
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".headers-", dir=root.parent))
        try:
            names = extract_deb_members(deb, tmp / "include", list(pkg["members"]))
            found = vulkan_header_version(tmp / "include")
            if found != pkg["version"]:
                msg = (f"{deb.name} holds Vulkan headers {found}, the matrix row pins {pkg['version']}: "
                       "fix vulkan_headers_package in matrix/variants.yaml")
                raise SourceError(msg)
            tmp.rename(root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        stamp.write_text(json.dumps({"version": pkg["version"], "sha256": pkg["sha256"], "pool_path": pool_path,
                                     "files": len(names)}, indent=2))
    return include


def spirv_headers_config() -> Path | None:
    """SPIRV-HeadersConfig.cmake (Debian: ``spirv-headers``), which ggml-vulkan's CMake requires."""
    prefixes = [Path(p) for p in (os.environ.get("VULKAN_SDK"), "/usr", "/usr/local", "/opt/homebrew") if p]
    prefixes += [Path(p) for p in os.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if p]
    for prefix in prefixes:
        for sub in SPIRV_CONFIG_DIRS:
            if (prefix / sub / "SPIRV-HeadersConfig.cmake").is_file():
                return prefix / sub
    return None


@hookimpl
def harness_variant_requirements(variant: Variant, host: HostInfo) -> Buildability | None:
    from harness.build.matrix import generic_reasons, version_at_least
    if variant.platform != "vulkan":
        return None
    reasons = generic_reasons(variant, host)
    notes = []
    minimum = str(variant.extra.get("vulkan_headers_min", "1.3"))
    pkg = headers_package(variant)
    if host.vulkan_headers is None:
        # The package supplies headers, not the loader: libvulkan-dev is still needed to link.
        reasons.append("Vulkan headers and loader not found (libvulkan-dev): "
                       "bash scripts/install-system-deps.sh --vulkan")
    elif not version_at_least(host.vulkan_headers, minimum):
        if pkg is None:
            reasons.append(f"Vulkan headers {host.vulkan_headers} found, the pinned ggml-vulkan needs >= {minimum}")
        else:
            notes.append(f"Vulkan headers {host.vulkan_headers} < {minimum}: building against the pinned "
                         f"headers package {pkg['version']} (sha256 {str(pkg['sha256'])[:12]}, fetched into the "
                         "cache on first build); the host's loader is used")
    if spirv_headers_config() is None:
        reasons.append("SPIRV-Headers CMake config not found (Debian: spirv-headers): "
                       "bash scripts/install-system-deps.sh --vulkan")
    devices = [g for g in host.gpus if g.api == "vulkan"]
    if not devices:
        notes.append("no Vulkan device: compile-only (mesa-vulkan-drivers provides lavapipe)")
    elif all("CPU" in g.device_type.upper() for g in devices):
        notes.append("only CPU Vulkan devices (lavapipe): runs when the variant is named (--variant vulkan)")
    return Buildability(variant=variant.name, buildable=not reasons, runnable=bool(devices) and not reasons,
                        reasons=tuple(reasons), notes=tuple(notes))


@hookimpl
def harness_variant_configure(engine: EngineSpec, variant: Variant, host: HostInfo) -> dict[str, str] | None:
    if variant.platform != "vulkan" or not needs_package(variant, host):
        return None
    pkg = headers_package(variant)
    assert pkg is not None
    # The path names the version and hash, so a new package means a new build dir.
    return {"Vulkan_INCLUDE_DIR": str(ensure_headers(pkg))}


def glslc_features(log_text: str) -> dict[str, bool]:
    """ggml-vulkan's glslc probes from the last configure in a build log (extension -> supported).

    A shader extension glslc lacks is compiled out of the artifact (e.g. no cooperative-matrix
    matmul), so the manifest records them.
    """
    last = log_text.rsplit("\n$ cmake -S", 1)[-1]
    return {m.group(1): not m.group(2) for m in GLSLC_PROBE.finditer(last)}


@hookimpl
def harness_artifact_usable(manifest: dict[str, Any], host: HostInfo) -> tuple[bool, list[str]] | None:
    if manifest.get("platform") != "vulkan":
        return None
    devices = [g for g in host.gpus if g.api == "vulkan"]
    if not devices:
        return False, ["no Vulkan device on this host (mesa-vulkan-drivers provides lavapipe, a CPU one)"]
    notes = []
    if all("CPU" in g.device_type.upper() for g in devices):
        notes.append("only a CPU Vulkan device (lavapipe): used when the variant is named (--variant vulkan)")
    missing = sorted(k for k, ok in manifest.get("vulkan", {}).get("glslc_features", {}).items() if not ok)
    if missing:
        notes.append(f"built without {', '.join(missing)} shaders (glslc lacked them)")
    return True, notes


@hookimpl
def harness_artifact_manifest(engine: EngineSpec, variant: Variant, manifest: dict[str, Any]) -> dict[str, Any] | None:
    from harness.core.host import system_vulkan_headers, vulkan_header_version
    if variant.platform != "vulkan":
        return None
    defines = manifest.get("defines", {})
    include = defines.get("Vulkan_INCLUDE_DIR")
    info: dict[str, Any] = {
        "headers": vulkan_header_version(Path(include)) if include else system_vulkan_headers(),
        "headers_source": "pinned package" if include else "system",
    }
    log = Path(manifest.get("build_dir", "")) / "build.log"
    # What the build could compile in: a missing glslc feature means no such shaders in this artifact.
    info["glslc_features"] = glslc_features(log.read_text(errors="replace")) if log.is_file() else {}
    return {"vulkan": info}
