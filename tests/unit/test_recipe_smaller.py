"""The smaller holes of issue 54's case 8.

- A ``local-archive`` ``source.path`` of an untrusted recipe outside its project (``/etc/shadow``)
  was hashed and its sha256 printed in the mismatch; now it is refused unopened, unless trusted.
- ``open_input`` opened a ``/dev`` path before refusing it (opening ``/dev/watchdog`` arms it); now a
  device, FIFO or socket is refused by what ``stat`` says, before any ``open``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from harness.core import inputs
from harness.core.errors import ChecksumError, ConfigError, UsageError

from . import hostile_engine, toy_recipe


def _harness(recipe: toy_recipe.Recipe, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*hostile_engine.harness_exe(), *argv], env=recipe.env(), cwd=recipe.root,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False)


def test_an_untrusted_archive_path_outside_its_project_is_not_read(tmp_path: Path) -> None:
    recipe = toy_recipe.make(tmp_path / "recipe", tmp_path / "cache")
    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_text(hostile_engine.SECRET)
    found = hashlib.sha256(secret.read_bytes()).hexdigest()
    descriptor = recipe.root / "engines" / "toy" / "engine.yaml"
    descriptor.write_text(descriptor.read_text().replace("path: toy-1.0.tar.gz", f"path: {secret}"))
    r = _harness(recipe, "fetch", "toy")
    assert r.returncode == ConfigError.exit_code, r.stdout
    assert "engine.yaml:source.path" in r.stdout and "not opened, hashed or named" in r.stdout
    assert found not in r.stdout and "Traceback" not in r.stdout
    r = _harness(recipe, "--trust", "toy", "fetch", "toy")  # the user's own recipe: read, and refused by its hash
    assert r.returncode == ChecksumError.exit_code and found in r.stdout, r.stdout


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_a_device_or_fifo_is_refused_before_it_is_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    opened: list[str] = []
    real_open = os.open

    def spy(path: str | os.PathLike[str], *args: object, **kwargs: object) -> int:
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(inputs.os, "open", spy)
    for path, what in (("/dev/null", "character device"), (str(fifo), "FIFO")):
        with pytest.raises(UsageError, match=what), inputs.open_input(path, kind="descriptor"):
            pass
    assert opened == []
