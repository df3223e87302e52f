"""The install on the machine's own python3 where its tarfile lacks extraction filters (Debian 12: 3.11.2).

A fresh venv of ``/usr/bin/python3`` (no other interpreter, no container) gets the wheel as a user
installs it; ``backports.tarfile`` comes in by its environment marker, and the source cache's
extraction runs on it: a clean archive extracts, an escaping link is refused.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.install.conftest import REPO_ROOT, check_ok, record_time, run

SYSTEM_PYTHON = Path("/usr/bin/python3")
PROBE = "import sys, tarfile, ensurepip; print(sys.version.split()[0], hasattr(tarfile, 'data_filter'))"
EXTRACT = """
import io, sys, tarfile as std
from pathlib import Path
from harness.core.errors import UnsafeArchiveError
from harness.core.tarfiles import tarfile
from harness.source.cache import safe_extract

work = Path(sys.argv[1])
def archive(name, link=None):
    with std.open(work / name, "w:gz") as tf:
        info = std.TarInfo("pkg/a.txt"); info.size = 2; tf.addfile(info, io.BytesIO(b"hi"))
        if link:
            bad = std.TarInfo("pkg/escape"); bad.type, bad.linkname = std.SYMTYPE, link; tf.addfile(bad)
    return work / name
safe_extract(archive("good.tar.gz"), work / "good")
assert (work / "good" / "pkg" / "a.txt").read_text() == "hi"
try:
    safe_extract(archive("bad.tar.gz", "/etc/passwd"), work / "bad")
except UnsafeArchiveError as e:
    print(tarfile.__name__, "refused:", e)
else:
    raise SystemExit("an escaping link was extracted")
"""


def _filterless_system_python() -> str:
    """The system python3's version when it lacks tarfile filters and can make venvs; else skip, saying why."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"no {SYSTEM_PYTHON} here")
    r = subprocess.run([SYSTEM_PYTHON, "-c", PROBE], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"{SYSTEM_PYTHON} cannot make venvs (apt install python3-venv): {r.stderr.strip()[-200:]}")
    version, has_filters = r.stdout.split()
    if has_filters == "True":
        pytest.skip(f"{SYSTEM_PYTHON} {version} has tarfile's extraction filters: no Debian-12-like interpreter here")
    return version


def test_install_on_the_system_python(dist_dir: Path, tmp_path: Path, pytestconfig: pytest.Config,
                                      user_env: Callable[[Path], dict[str, str]]) -> None:
    version = _filterless_system_python()
    (wheel,) = dist_dir.glob("*.whl")
    venv = tmp_path / "venv"
    start = time.monotonic()
    check_ok(run([SYSTEM_PYTHON, "-m", "venv", venv], cwd=tmp_path))
    check_ok(run([venv / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", wheel],
                 cwd=tmp_path, env=user_env(venv)))
    record_time(pytestconfig, f"venv + pip install harness on {SYSTEM_PYTHON} {version}", time.monotonic() - start)
    env = user_env(venv)
    assert check_ok(run([venv / "bin" / "harness", "--version"], cwd=tmp_path, env=env)).startswith("harness ")
    check_ok(run([venv / "bin" / "harness", "validate", REPO_ROOT / "examples" / "models"], cwd=tmp_path, env=env))
    out = check_ok(run([venv / "bin" / "python", "-c", EXTRACT, tmp_path], cwd=tmp_path, env=env))
    assert out.startswith("backports.tarfile refused: ") and "absolute path" in out, out
