"""Installed artifacts: listing, verification, usability on this host, combined packages."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.build.cmake import MANIFEST, file_hashes, read_manifest
from harness.core import paths
from harness.core.errors import ArtifactError
from harness.core.types import HostInfo

if TYPE_CHECKING:
    import pluggy


@dataclass(frozen=True, kw_only=True)
class ArtifactStatus:
    path: Path
    manifest: dict[str, Any]
    ok: bool
    problems: tuple[str, ...] = ()
    usable: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)


def find_artifacts(root: Path | None = None) -> list[Path]:
    root = root or paths.artifacts_dir()
    return sorted(p.parent for p in root.glob(f"*/{MANIFEST}"))


def verify(path: Path) -> list[str]:
    """Differences between the files on disk and the manifest's sha256 list."""
    try:
        manifest = read_manifest(path)
    except (OSError, json.JSONDecodeError) as e:
        return [f"unreadable manifest: {e}"]
    want: dict[str, str] = manifest.get("files", {})
    have = file_hashes(path)
    problems = [f"{f}: missing" for f in sorted(set(want) - set(have))]
    problems += [f"{f}: not in manifest" for f in sorted(set(have) - set(want))]
    problems += [f"{f}: sha256 differs" for f in sorted(set(want) & set(have)) if want[f] != have[f]]
    return problems


def usable_on(manifest: dict[str, Any], host: HostInfo,
              pm: pluggy.PluginManager | None = None) -> tuple[bool, list[str]]:
    """Whether an artifact can run here, with notes: its OS and cross target here, the rest (a
    GPU's devices) from the plugin owning its platform (``harness_artifact_usable``)."""
    from harness.engine.plugin import get_manager

    if manifest.get("host", {}).get("os") not in (None, host.os):
        return False, [f"built for {manifest['host']['os']}, host is {host.os}"]
    target = manifest.get("target")
    if target and not str(target).startswith(f"{host.arch}-"):
        return False, [f"cross-built for {target}, host is {host.arch}: runs here only under emulation "
                       "(qemu-user; harness qualify runs it so)"]
    answer = (pm or get_manager()).hook.harness_artifact_usable(manifest=manifest, host=host)
    if answer is None:
        return True, []
    usable, notes = answer
    return usable, list(notes)


def status(path: Path, host: HostInfo | None = None) -> ArtifactStatus:
    problems = verify(path)
    manifest = read_manifest(path) if (path / MANIFEST).is_file() else {}
    usable, notes = usable_on(manifest, host) if host and manifest else (True, [])
    return ArtifactStatus(path=path, manifest=manifest, ok=not problems, problems=tuple(problems),
                          usable=usable and not problems, notes=tuple(notes))


IDENTITY_KEYS = ("engine", "pin", "patch_series_hash", "abi_fingerprint")


def _refuse_link_out(link: Path, artifact: Path) -> None:
    """A package holds the artifacts' own files: a symlink of one that leads out of it is refused."""
    resolved, root = os.path.realpath(link), os.path.realpath(artifact)
    if not resolved.startswith(root + os.sep):
        msg = (f"artifact {artifact}: the symlink {link} leads to {resolved}, outside the artifact; "
               "an artifact holds only its own files: rebuild it (harness build)")
        raise ArtifactError(msg)


def package(artifacts: list[Path], dest: Path) -> dict[str, Any]:
    """One directory with a single libllama/libggml-base and several ggml backend plugins.

    Refuses artifacts whose pin, patch series or ABI fingerprint differ: ggml
    loads the plugins at run time and a mismatched one corrupts memory, not a link.
    """
    if not artifacts:
        raise ArtifactError("no artifacts to package")
    manifests = [read_manifest(a) for a in artifacts]
    for key in IDENTITY_KEYS:
        values = {m.get(key) for m in manifests}
        if len(values) > 1:
            detail = ", ".join(f"{m['variant']}={m.get(key)}" for m in manifests)
            msg = f"refusing to combine artifacts with different {key}: {detail}. Rebuild them from one pin"
            raise ArtifactError(msg)
    for a in artifacts:
        problems = verify(a)
        if problems:
            msg = f"artifact {a} fails verification: {'; '.join(problems[:5])}"
            raise ArtifactError(msg)
    staging = dest.with_name(f".{dest.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    for sub in ("lib", "bin", "include"):
        (staging / sub).mkdir(parents=True)
    for a in artifacts:
        for sub in ("lib", "bin", "include"):
            for src in sorted((a / sub).iterdir()):
                target = staging / sub / src.name
                if target.exists() or target.is_symlink():
                    continue
                if src.is_symlink():
                    _refuse_link_out(src, a)
                    target.symlink_to(os.readlink(src))
                elif src.is_dir():
                    shutil.copytree(src, target, symlinks=True)
                else:
                    shutil.copy2(src, target)
    first = manifests[0]
    manifest = {k: first.get(k) for k in (*IDENTITY_KEYS, "upstream", "patches", "toolchain", "host")}
    manifest.update({"manifest_version": first.get("manifest_version"), "variant": "+".join(m["variant"] for m in manifests),
                     "platform": "package", "variants": [m["variant"] for m in manifests],
                     "cuda_archs": sorted({a for m in manifests for a in m.get("cuda_archs", [])}),
                     "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    manifest["files"] = file_hashes(staging)
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return manifest
