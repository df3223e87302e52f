"""The vulkan row: pinned headers package (fetch, extract, verify), requirements, manifest facts."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from harness.build.matrix import load_matrix, select
from harness.core.errors import ChecksumError, SourceError, UnsafeArchiveError
from harness.core.types import EngineSpec, HostInfo, ToolInfo, Variant
from harness.source import index, mirrors
from harness_plugins import variant_vulkan as vk

from .test_matrix import fake_host

CORE_H = """// vulkan_core.h (test copy)
#define VK_HEADER_VERSION 309
#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 4, VK_HEADER_VERSION)
"""


def _ar(members: list[tuple[str, bytes]]) -> bytes:
    """A minimal ar archive (the container format of a .deb)."""
    out = io.BytesIO()
    out.write(b"!<arch>\n")
    for name, data in members:
        out.write(f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode())
        out.write(data + (b"\n" if len(data) % 2 else b""))
    return out.getvalue()


def make_deb(path: Path, files: dict[str, bytes]) -> str:
    """Write a .deb whose data.tar.xz holds ``files``; return its sha256."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as tf:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tf.addfile(info, io.BytesIO(content))
    control = io.BytesIO()
    with tarfile.open(fileobj=control, mode="w:xz") as tf:
        body = b"Package: libvulkan-dev\nVersion: 1.4.309.0-1\nArchitecture: amd64\n"
        info = tarfile.TarInfo("./control")
        info.size = len(body)
        tf.addfile(info, io.BytesIO(body))
    path.write_bytes(_ar([("debian-binary", b"2.0\n"), ("control.tar.xz", control.getvalue()),
                          ("data.tar.xz", data.getvalue())]))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def vulkan_row(**extra: Any) -> Variant:
    row = select(load_matrix(), "vulkan")[0]
    return dataclasses.replace(row, extra={**row.extra, **extra})


@pytest.fixture
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file: Debian mirror named in a deb822 sources file that apt (here: a fake /etc/apt) reads;
    returns the pool directory the test's .deb files go to."""
    mirror = tmp_path / "mirror" / "debian"
    pool_dir = mirror / "pool" / "main" / "v" / "vulkan-loader"
    pool_dir.mkdir(parents=True)
    etc = tmp_path / "etc-apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list.d" / "debian.sources").write_text(
        f"Types: deb\nURIs: file:{mirror}\nSuites: trixie\nComponents: main\n")
    monkeypatch.setattr(mirrors, "APT_ETC", etc)
    return pool_dir


def _pkg(deb: Path, sha: str, version: str = "1.4.309") -> dict[str, Any]:
    pool_path = deb.relative_to(next(p for p in deb.parents if p.name == "pool").parent).as_posix()
    return {"version": version, "pool_path": pool_path, "sha256": sha, "members": ["usr/include/vulkan"]}


GOOD = {"./usr/include/vulkan/vulkan_core.h": CORE_H.encode(), "./usr/include/vulkan/vulkan.hpp": b"// hpp\n",
        "./usr/lib/x86_64-linux-gnu/pkgconfig/vulkan.pc": b"prefix=/usr\n"}


def test_headers_package_extracted_once_and_only_headers(cache: Path, tmp_path: Path, pool: Path) -> None:
    deb = pool / "libvulkan-dev.deb"
    pkg = _pkg(deb, make_deb(deb, GOOD))
    include = vk.ensure_headers(pkg)
    assert sorted(p.relative_to(include).as_posix() for p in include.rglob("*") if p.is_file()) == [
        "vulkan/vulkan.hpp", "vulkan/vulkan_core.h"]
    stamp = json.loads((include.parent / vk.STAMP).read_text())
    assert stamp["sha256"] == pkg["sha256"] and stamp["files"] == 2
    # Second call: nothing fetched (the source file may even be gone).
    deb.unlink()
    assert vk.ensure_headers(pkg) == include


def test_headers_package_wrong_hash_refused(cache: Path, tmp_path: Path, pool: Path) -> None:
    deb = pool / "libvulkan-dev.deb"
    make_deb(deb, GOOD)
    with pytest.raises(ChecksumError):
        vk.ensure_headers(_pkg(deb, "0" * 64))
    assert not vk.headers_root(_pkg(deb, "0" * 64)).exists()


def test_headers_package_version_must_match_the_pin(cache: Path, tmp_path: Path, pool: Path) -> None:
    deb = pool / "libvulkan-dev.deb"
    pkg = _pkg(deb, make_deb(deb, GOOD), version="1.4.400")
    with pytest.raises(SourceError, match=r"holds Vulkan headers 1\.4\.309, the matrix row pins 1\.4\.400"):
        vk.ensure_headers(pkg)
    assert not vk.headers_root(pkg).exists()


def test_headers_package_escaping_member_refused(cache: Path, tmp_path: Path, pool: Path) -> None:
    deb = pool / "evil.deb"
    sha = make_deb(deb, {"./usr/include/vulkan/../../../../escape.h": b"x"})
    with pytest.raises(UnsafeArchiveError, match="safety filter"):
        vk.ensure_headers(_pkg(deb, sha))
    assert not list(tmp_path.rglob("escape.h"))


def test_headers_package_without_the_members(cache: Path, tmp_path: Path, pool: Path) -> None:
    deb = pool / "other.deb"
    sha = make_deb(deb, {"./usr/share/doc/x": b"x"})
    with pytest.raises(SourceError, match="holds nothing under usr/include/vulkan"):
        vk.ensure_headers(_pkg(deb, sha))


def test_not_a_deb(cache: Path, tmp_path: Path, pool: Path) -> None:
    deb = pool / "junk.deb"
    deb.write_bytes(b"not an ar archive")
    with pytest.raises(SourceError, match="as a Debian package"):
        vk.ensure_headers(_pkg(deb, hashlib.sha256(deb.read_bytes()).hexdigest()))


def test_incomplete_package_spec_is_an_error() -> None:
    with pytest.raises(SourceError, match="lacks sha256, members"):
        vk.headers_package(vulkan_row(vulkan_headers_package={"version": "1", "pool_path": "pool/x.deb"}))
    with pytest.raises(SourceError, match=r"lacks pool_path, sha256, members \(a url is no longer read"):
        vk.headers_package(vulkan_row(vulkan_headers_package={"version": "1", "url": "http://x.invalid/a.deb"}))


def test_the_committed_row_names_a_pool_path_not_a_host() -> None:
    pkg = vk.headers_package(vulkan_row())
    assert pkg is not None and pkg["pool_path"].startswith("pool/main/") and "url" not in pkg


def test_the_package_comes_from_apts_debian_mirror(cache: Path, tmp_path: Path, pool: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    deb = pool / "libvulkan-dev.deb"
    include = vk.ensure_headers(_pkg(deb, make_deb(deb, GOOD)))
    assert (include / "vulkan" / "vulkan_core.h").is_file()
    assert f"from {deb.as_uri()}" in capsys.readouterr().err.replace("\n", "")


def test_no_debian_mirror_configured(cache: Path, tmp_path: Path, pool: Path) -> None:
    deb = pool / "libvulkan-dev.deb"
    pkg = _pkg(deb, make_deb(deb, GOOD))
    (mirrors.APT_ETC / "sources.list.d" / "debian.sources").unlink()
    with pytest.raises(index.IndexConfigError, match="no mirror of the Debian archive"):
        vk.ensure_headers(pkg)
    # a package already in the downloads cache needs no mirror
    (cache / "downloads").mkdir(parents=True, exist_ok=True)
    (cache / "downloads" / deb.name).write_bytes(deb.read_bytes())
    assert (vk.ensure_headers(pkg) / "vulkan" / "vulkan_core.h").is_file()


def _host(headers: str | None) -> HostInfo:
    return fake_host(vulkan_headers=headers, tools={"glslc": ToolInfo(name="glslc", path="/g", version="2023.2")})


@pytest.fixture
def spirv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(vk, "spirv_headers_config", lambda: tmp_path)


def test_old_system_headers_use_the_pinned_package(spirv: None) -> None:
    b = vk.harness_variant_requirements(variant=vulkan_row(), host=_host("1.3.239"))
    assert b is not None and b.buildable, b.reasons
    assert any("1.3.239 < 1.3.275" in n and "pinned headers package 1.4.309" in n for n in b.notes)
    assert vk.needs_package(vulkan_row(), _host("1.3.239"))
    assert not vk.needs_package(vulkan_row(), _host("1.4.309"))


def test_old_headers_without_a_package_cannot_build(spirv: None) -> None:
    row = vulkan_row()
    row = dataclasses.replace(row, extra={"vulkan_headers_min": "1.3.275"})
    b = vk.harness_variant_requirements(variant=row, host=_host("1.3.239"))
    assert b is not None and not b.buildable
    assert any("1.3.239 found, the pinned ggml-vulkan needs >= 1.3.275" in r for r in b.reasons)


def test_missing_loader_and_spirv_headers_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vk, "spirv_headers_config", lambda: None)
    b = vk.harness_variant_requirements(variant=vulkan_row(), host=_host(None))
    assert b is not None and not b.buildable
    assert any("libvulkan-dev" in r for r in b.reasons)
    assert any("spirv-headers" in r and "install-system-deps.sh --vulkan" in r for r in b.reasons)


def test_configure_points_cmake_at_the_package(cache: Path, tmp_path: Path, pool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deb = pool / "libvulkan-dev.deb"
    row = vulkan_row(vulkan_headers_package=_pkg(deb, make_deb(deb, GOOD)))
    engine = EngineSpec(name="llamacpp", root=tmp_path, source=None, upstream={}, cmake={}, targets=(),  # type: ignore[arg-type]
                        artifacts={}, abi={})
    defines = vk.harness_variant_configure(engine=engine, variant=row, host=_host("1.3.239"))
    assert defines is not None
    assert (Path(defines["Vulkan_INCLUDE_DIR"]) / "vulkan" / "vulkan_core.h").is_file()
    assert vk.harness_variant_configure(engine=engine, variant=row, host=_host("1.4.309")) is None


LOG = """
$ cmake -S /old
-- GL_KHR_cooperative_matrix supported by glslc
$ cmake -S /src -B /b -G Ninja
-- Found Vulkan: /usr/lib/x86_64-linux-gnu/libvulkan.so (found version "1.4.309")
-- GL_KHR_cooperative_matrix not supported by glslc
-- GL_EXT_integer_dot_product supported by glslc
-- GL_EXT_bfloat16 not supported by glslc
"""


def test_glslc_features_from_the_last_configure() -> None:
    assert vk.glslc_features(LOG) == {"GL_KHR_cooperative_matrix": False, "GL_EXT_integer_dot_product": True,
                                      "GL_EXT_bfloat16": False}


def test_manifest_records_headers_and_glslc_features(cache: Path, tmp_path: Path, pool: Path) -> None:
    deb = pool / "libvulkan-dev.deb"
    include = vk.ensure_headers(_pkg(deb, make_deb(deb, GOOD)))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "build.log").write_text(LOG)
    extra = vk.harness_artifact_manifest(engine=None, variant=vulkan_row(),  # type: ignore[arg-type]
                                         manifest={"defines": {"Vulkan_INCLUDE_DIR": str(include)},
                                                   "build_dir": str(tmp_path / "b")})
    assert extra == {"vulkan": {"headers": "1.4.309", "headers_source": "pinned package",
                                "glslc_features": vk.glslc_features(LOG)}}
    assert vk.harness_artifact_manifest(engine=None, variant=select(load_matrix(), "cpu")[0],  # type: ignore[arg-type]
                                        manifest={}) is None


def test_vulkan_artifact_usability() -> None:
    from harness.build.artifacts import usable_on
    from harness.core.types import GpuInfo

    manifest = {"platform": "vulkan", "host": {"os": "linux"},
                "vulkan": {"glslc_features": {"GL_EXT_bfloat16": False, "GL_KHR_cooperative_matrix": False,
                                              "GL_EXT_integer_dot_product": True}}}
    assert usable_on(manifest, _host("1.3.239")) == (
        False, ["no Vulkan device on this host (mesa-vulkan-drivers provides lavapipe, a CPU one)"])
    lavapipe = dataclasses.replace(_host("1.3.239"), gpus=(GpuInfo(api="vulkan", name="llvmpipe", device_type="PHYSICAL_DEVICE_TYPE_CPU"),))
    ok, notes = usable_on(manifest, lavapipe)
    assert ok and notes == ["only a CPU Vulkan device (lavapipe): used when the variant is named (--variant vulkan)",
                            "built without GL_EXT_bfloat16, GL_KHR_cooperative_matrix shaders (glslc lacked them)"]
    gpu = dataclasses.replace(lavapipe, gpus=(GpuInfo(api="vulkan", name="RTX", device_type="PHYSICAL_DEVICE_TYPE_DISCRETE_GPU"),))
    assert usable_on({**manifest, "vulkan": {}}, gpu) == (True, [])
