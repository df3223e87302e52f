"""A toy engine recipe outside the checkout, as a hostile user brings one: ``engines/toy/engine.yaml``
(a ``local-archive`` source beside it), ``patches/toy/`` and ``abi/toy/``, found through
``$HARNESS_ENGINES_PATH``; and a way to run the ``harness`` CLI on it as a subprocess, measuring
its wall time and peak RSS."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.engine.descriptor import ENGINES_PATH_ENV

COMMIT = "0" * 40
TOP = "toy-1.0"
#: The pristine tree: a header the artifact collects, a source, a symlink inside the tree.
FILES: dict[str, bytes] = {
    "include/toy.h": b"#pragma once\nint toy(void);\n",
    "include/toy-extra.h": b"#pragma once\n#define TOY_EXTRA 1\n",
    "toy.c": b"int toy(void) { return 1; }\n",
}
LINKS: dict[str, str] = {"include/toy-alias.h": "toy.h"}

DESCRIPTOR = """\
name: toy
source: {{kind: local-archive, path: {archive}, sha256: "{sha}", url: "https://example.invalid/toy", commit: "{commit}"}}
upstream: {{commit: "0000000"}}
cmake: {{base: {{CMAKE_BUILD_TYPE: Release}}}}
targets: [toy]
artifacts: {{lib: ["libtoy.so*"], include: ["include:*.h"]}}
abi: {{headers: [include/toy.h]}}
"""

PATCH_HEADER = b"Subject: x\nWhy: a test\nUpstream: none\nRetire-when: never\n---\n"


def archive(path: Path, files: dict[str, bytes] = FILES, links: dict[str, str] = LINKS) -> str:
    """A gzipped tarball of ``toy-1.0/`` holding ``files`` and ``links``; its sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tf:
        dirs = sorted({str(Path(TOP, rel).parent) for rel in [*files, *links]} | {TOP})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(info)
        for rel, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{TOP}/{rel}")
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
        for rel, target in sorted(links.items()):
            info = tarfile.TarInfo(f"{TOP}/{rel}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            tf.addfile(info)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Recipe:
    root: Path
    cache: Path
    archive: Path
    sha256: str

    @property
    def patches(self) -> Path:
        return self.root / "engines" / "toy" / "patches"

    def env(self) -> dict[str, str]:
        return {**os.environ, ENGINES_PATH_ENV: str(self.root / "engines"), "HARNESS_CACHE": str(self.cache),
                "HARNESS_NO_PROGRESS": "1"}

    def patch(self, name: str, diff: bytes) -> Path:
        self.patches.mkdir(parents=True, exist_ok=True)
        p = self.patches / name
        p.write_bytes(PATCH_HEADER + diff)
        return p


def make(root: Path, cache: Path) -> Recipe:
    """The toy recipe under ``root`` (its archive beside the descriptor), caching into ``cache``."""
    arch = root / "toy-1.0.tar.gz"
    sha = archive(arch)
    (root / "engines" / "toy").mkdir(parents=True)
    (root / "engines" / "toy" / "engine.yaml").write_text(DESCRIPTOR.format(archive=arch.name, sha=sha, commit=COMMIT))
    return Recipe(root=root, cache=cache, archive=arch, sha256=sha)


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str
    seconds: float
    peak_rss_mb: float


#: Runs ``python -m harness`` and, at exit, writes the process's own peak RSS (``VmHWM``: the
#: memory of this program only; ``ru_maxrss`` of a forked child starts at its parent's size).
_LAUNCH = """
import atexit, os, runpy, sys
def _hwm():
    with open("/proc/self/status") as f, open(os.environ["HARNESS_TEST_HWM"], "w") as out:
        out.write(next(ln.split()[1] for ln in f if ln.startswith("VmHWM:")))
atexit.register(_hwm)
sys.argv[0] = "harness"
runpy.run_module("harness", run_name="__main__", alter_sys=True)
"""


def harness(recipe: Recipe, *argv: str, timeout: float = 30) -> Run:
    """``harness ARGV`` in a child process, with its wall time and peak RSS; a child still running
    after ``timeout`` is killed and reported with return code -9 (a hang)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        hwm = Path(tmp) / "hwm"
        env = {**recipe.env(), "HARNESS_TEST_HWM": str(hwm)}
        t0 = time.perf_counter()
        try:
            r = subprocess.run([sys.executable, "-c", _LAUNCH, *argv], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, cwd=recipe.root, timeout=timeout, check=False)
            rc, out = r.returncode, r.stdout
        except subprocess.TimeoutExpired as e:
            rc, out = -9, e.output or b""
        seconds = time.perf_counter() - t0
        peak = int(hwm.read_text()) / 1024 if hwm.exists() else float("nan")
    return Run(returncode=rc, output=out.decode(errors="replace"), seconds=seconds, peak_rss_mb=peak)
