"""Patch series and the files a recipe names are inputs like any other (issue 48, part 1).

Every reader of a file an engine recipe names (the descriptor, its patches, its committed ABI
surface, the fixtures list, matrix rows) goes through :mod:`harness.core.inputs`
(``test_inputs_walk`` finds any direct read); here each reader gets the special files a hostile
recipe can hold in its slot and must answer with its typed error, bounded in time (an alarm) and
memory. ``harness patch`` on a FIFO or ``/dev/zero`` patch (it hung, and read /dev/zero to 3.7 GB
before) is run as the CLI a user runs.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.abi import surface
from harness.abi.check import load_committed
from harness.build.matrix import matrix_files
from harness.core.errors import AbiError, ConfigError, HarnessError, PatchError
from harness.core.inputs import LIMITS
from harness.engine.descriptor import parse_engine
from harness.models.fixtures import load_fixtures
from harness.source.patches import load_series

from . import toy_recipe

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"),
                                reason="needs FIFOs and /dev/zero")

HANG_S = 20
RSS_GROWTH_MB = 256
KINDS = ("fifo", "dev-zero", "directory", "huge", "loop")


def place(kind: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":  # sparse, past every limit of these kinds
        path.touch()
        os.truncate(path, max(LIMITS[k] for k in ("patch", "surface", "descriptor")) + 1)
    elif kind == "loop":
        path.symlink_to(path.name)


#: reader -> (the file it reads under a root, the call, the typed error it must raise)
READERS: dict[str, tuple[str, Callable[[Path], object], type[HarnessError]]] = {
    "patch series": ("engines/toy/patches/0001-x.patch", lambda r: load_series(r / "engines" / "toy" / "patches"), PatchError),
    "ABI surface": ("engines/toy/abi/surface.json", lambda r: surface.load(r / "engines" / "toy" / "abi" / "surface.json"), AbiError),
    "committed surface": ("engines/toy/abi/surface.json",
                          lambda r: load_committed("toy", r / "engines" / "toy" / "abi" / "surface.json"), AbiError),
    "fixtures list": ("fixtures.yaml", lambda r: load_fixtures(r / "fixtures.yaml"), ConfigError),
    "matrix rows": ("matrix/rows.yaml", lambda r: matrix_files(r / "matrix"), ConfigError),
    "descriptor": ("engines/toy/engine.yaml", lambda r: parse_engine(r / "engines" / "toy" / "engine.yaml"),
                   ConfigError),
}


@contextmanager
def bounded(seconds: int) -> Iterator[None]:
    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"still reading after {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", sorted(READERS))
def test_each_recipe_reader_refuses_a_special_file_with_its_typed_error(tmp_path: Path, reader: str,
                                                                         kind: str) -> None:
    rel, call, error = READERS[reader]
    place(kind, tmp_path / rel)
    before = _peak_mb()
    with bounded(HANG_S), pytest.raises(error) as e:
        call(tmp_path)
    assert _peak_mb() - before < RSS_GROWTH_MB
    assert str(tmp_path / rel) in str(e.value), "the message names the file"


@pytest.fixture
def recipe(tmp_path: Path) -> toy_recipe.Recipe:
    return toy_recipe.make(tmp_path / "recipe", tmp_path / "cache")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("check", [False, True], ids=["patch", "patch --check"])
def test_harness_patch_refuses_a_special_patch_at_once(recipe: toy_recipe.Recipe, kind: str, check: bool) -> None:
    assert toy_recipe.harness(recipe, "fetch", "toy").returncode == 0
    place(kind, recipe.patches / "0001-x.patch")
    start = toy_recipe.harness(recipe, "--version")  # the interpreter's and the CLI's own start-up
    run = toy_recipe.harness(recipe, "patch", *(["--check"] if check else []), "toy", timeout=HANG_S)
    print(f"{kind} patch{' --check' if check else ''}: exit {run.returncode} in {run.seconds:.2f} s "
          f"(--version: {start.seconds:.2f} s), peak RSS {run.peak_rss_mb:.0f} MB", file=sys.stderr)
    assert run.returncode == PatchError.exit_code, run.output
    what = "a FIFO (named pipe)" if kind == "fifo" else "a character device"
    assert f"patch file {recipe.patches / '0001-x.patch'} is {what}" in run.output
    assert "Traceback" not in run.output
    # bounded work, not a timing: the read never starts (peak memory stays at start-up's) and the run
    # ends within HANG_S (a FIFO read would block for ever); the seconds are printed, not asserted
    # (a loaded 2-core host took 1.8 s against --version's 0.35 s)
    assert run.peak_rss_mb < 100
