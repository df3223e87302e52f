"""The tiny C engine as a contributor's folder brings it (issue 54), and the installed ``harness`` run on it.

:func:`make` writes ``engines/tiny/`` (the descriptor and patch of :mod:`tests.unit.test_third_engine`,
its git repository beside it, the committed ABI surface) into a scratch root found through
``$HARNESS_ENGINES_PATH``: a recipe the harness does not trust. :meth:`Recipe.harness` runs the
installed console script as a subprocess, with ``$HOME`` a scratch directory holding a secret and
the cache, ccache and outside-world canary all under the test's own directory.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.unit.test_third_engine import DESCRIPTOR, PATCH, _repo

SECRET = "issue54-secret-5d8c1e"


def harness_exe() -> list[str]:
    """The installed ``harness`` console script (beside this interpreter), else ``python -P -m harness``."""
    exe = shutil.which("harness", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-P", "-m", "harness"]


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str


@dataclass(frozen=True)
class Recipe:
    root: Path
    """Holds ``engines/tiny/``."""
    scratch: Path
    """The test's directory: everything the harness may write is under it."""

    @property
    def folder(self) -> Path:
        return self.root / "engines" / "tiny"

    @property
    def cache(self) -> Path:
        return self.scratch / "cache"

    @property
    def home(self) -> Path:
        return self.scratch / "home"

    @property
    def outside(self) -> Path:
        """A directory no build may write into or read from (it holds the secret too)."""
        return self.scratch / "outside"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("HARNESS_") or k in ("HARNESS_JOBS",)}
        return {**env, "HARNESS_ENGINES_PATH": str(self.root / "engines"), "HARNESS_CACHE": str(self.cache),
                "HARNESS_NO_PROGRESS": "1", "HOME": str(self.home), "CCACHE_DIR": str(self.scratch / "ccache"),
                **extra}

    def harness(self, *argv: str, timeout: float = 180, cwd: Path | None = None, **env: str) -> Run:
        r = subprocess.run([*harness_exe(), *argv], env=self.env(**env), cwd=cwd or self.scratch,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
        return Run(r.returncode, r.stdout)

    def edit_descriptor(self, change: Callable[[dict[str, object]], None]) -> None:
        path = self.folder / "engine.yaml"
        data = yaml.safe_load(path.read_text())
        change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    def patch(self, name: str, text: str) -> Path:
        p = self.folder / "patches" / name
        p.write_text(text)
        return p

    def outside_state(self) -> dict[str, str]:
        """Every file under the outside canary and ``$HOME``, by content: must not change."""
        out = {}
        for base in (self.outside, self.home):
            for p in sorted(base.rglob("*")):
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        return out


@functools.cache
def _surface() -> str:
    """The tiny engine's ABI surface, snapshotted once per session (a second or so)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        recipe = _write(Path(tmp))
        run = recipe.harness("abi", "snapshot", "tiny")
        assert run.returncode == 0, run.output
        return (recipe.folder / "abi" / "surface.json").read_text()


def _write(scratch: Path) -> Recipe:
    # the contributor's repository inside their project: an untrusted recipe fetches no other local one
    bare, one, _ = _repo(scratch / "contrib")
    recipe = Recipe(root=scratch / "contrib", scratch=scratch)
    (recipe.folder / "patches").mkdir(parents=True)
    (recipe.folder / "engine.yaml").write_text(DESCRIPTOR.format(url=bare.as_uri(), commit=one))
    (recipe.folder / "patches" / "0001-tiny-clamp-negative-scale.patch").write_text(PATCH)
    for d in (recipe.home, recipe.outside):
        d.mkdir()
        (d / "secret").write_text(SECRET + "\n")
    return recipe


def make(scratch: Path) -> Recipe:
    """The tiny engine folder under ``scratch/contrib/engines/tiny``, with its ABI surface committed."""
    surface = _surface()
    recipe = _write(scratch)
    (recipe.folder / "abi").mkdir()
    (recipe.folder / "abi" / "surface.json").write_text(surface)
    return recipe
