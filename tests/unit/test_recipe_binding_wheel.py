"""A recipe's binding wheel never acts on the harness's own Python (issue 58, classes 2 and 3).

The binding's ``CMakeLists.txt`` is code of the recipe, and its ``install()`` decides what the wheel
carries. Here the tiny engine of :mod:`tests.unit.hostile_engine` (an untrusted folder) gets a
``binding/`` whose CMake project needs no compiler, and the installed ``harness`` runs from a
virtual environment made for the test (holding pip and the build backend), inside a decoy ``$HOME``
that holds a secret and a key: the Python whose site-packages pip would install into is that venv,
and its prefix sits right under the secret.

- a wheel carrying a ``.pth`` (untrusted, and trusted with ``--trust``), a console script
  (``.data/scripts``), a top-level module or a ``sitecustomize`` is refused before install
  (BindingError, exit 15): the venv's site-packages is byte-identical, the ``.pth`` never ran (a
  ``console_scripts`` entry point, which scikit-build-core itself will not let CMake write, and a
  wheel whose RECORD does not match are refused by the check's own tests);
- an untrusted recipe's clean wheel is built but never lands in the venv's site-packages: it is
  unpacked under its binding's cache dir, for ``$HARNESS_BINDING_PATH``, and build-binding says so;
- the wheel sandbox shows the venv itself, not its parent: a CMake project reading the decoy home's
  secret and listing it finds nothing, in the wheel or the log;
- an ``engines/_shared`` (or ``binding/``) link to a directory outside the recipe is refused before
  anything is built (ConfigError, exit 3);
- every wheel is checked against its RECORD (:func:`harness.binding.contents.check_wheel`), and an
  untrusted recipe's binding dir never is a trusted one's.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.sandbox.bwrap import unavailable

from . import hostile_engine

#: The tests that build: the tiny engine's tools and a sandbox (the wheel check's own tests need neither).
builds = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("git", "cmake", "ninja", "cc")) or bool(unavailable()),
    reason=f"needs git, cmake, ninja, a C compiler and a sandbox ({unavailable() or 'bwrap runs'}): "
           "bash scripts/install-system-deps.sh")

PACKAGE = "harness_tiny_cpu"
CMAKE_HEAD = """\
cmake_minimum_required(VERSION 3.21)
project(tiny_binding LANGUAGES NONE)
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/note.txt" "tiny binding\\n")
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/note.txt" DESTINATION "${HARNESS_PACKAGE}")
"""


@dataclass(frozen=True)
class Setup:
    recipe: hostile_engine.Recipe
    venv: Path
    """The Python the harness runs from (under the decoy ``$HOME``)."""
    purelib: Path

    @property
    def marker(self) -> Path:
        """Written by the hostile ``.pth`` if it ever runs."""
        return self.recipe.scratch / "pth-ran"

    def harness(self, *argv: str, timeout: float = 300, env: Mapping[str, str] | None = None) -> hostile_engine.Run:
        r = subprocess.run([str(self.venv / "bin" / "python"), "-P", "-m", "harness", *argv],
                           env=self.recipe.env(**(env or {})), cwd=self.recipe.scratch, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
        return hostile_engine.Run(r.returncode, r.stdout)

    def binding(self, extra: str = "") -> None:
        d = self.recipe.folder / "binding"
        d.mkdir(exist_ok=True)
        (d / "CMakeLists.txt").write_text(CMAKE_HEAD + extra.replace("{marker}", str(self.marker)))

    def site_packages(self) -> dict[str, str]:
        """Every entry of the venv's site-packages, by content."""
        out = {}
        for p in sorted(self.purelib.rglob("*")):
            out[str(p.relative_to(self.purelib))] = (
                f"link:{os.readlink(p)}" if p.is_symlink() else
                hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
        return out

    def starts_clean(self) -> None:
        """A start of the venv's Python runs nothing of a binding: the hostile ``.pth`` leaves no marker."""
        subprocess.run([str(self.venv / "bin" / "python"), "-c", "pass"], check=True, timeout=60)
        assert not self.marker.exists(), "a .pth of the binding ran at interpreter start"


#: What the wheel build runs of the venv (pip, the build backend): copied into it, as a venv holds them.
BUILD_DISTS = ("pip", "scikit-build-core", "packaging", "pathspec")


def _copy_dist(name: str, purelib: Path) -> None:
    dist = importlib.metadata.distribution(name)
    for f in dist.files or ():
        src = Path(str(dist.locate_file(f)))
        if ".." in f.parts or "__pycache__" in f.parts or not src.is_file():
            continue
        (purelib / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, purelib / f)


def make_setup(scratch: Path) -> Setup:
    """The tiny engine folder, built (cpu), and a venv at ``$HOME/.venv`` holding pip and the build
    backend, and a ``.pth`` adding this test's own site-packages (where the harness is)."""
    recipe = hostile_engine.make(scratch)
    (recipe.home / ".ssh").mkdir()
    (recipe.home / ".ssh" / "id_rsa").write_text(f"-----BEGIN KEY-----\n{hostile_engine.SECRET}\n")
    venv = recipe.home / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    for name in BUILD_DISTS:
        _copy_dist(name, purelib)
    (purelib / "_harness_test_dev.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    s = Setup(recipe=recipe, venv=venv, purelib=purelib)
    run = s.harness("build", "tiny", "--variant", "cpu", "--json")
    assert run.returncode == 0, run.output
    return s


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return make_setup(tmp_path_factory.mktemp("binding-wheel"))


@pytest.fixture
def clean(setup: Setup) -> Iterator[Setup]:
    """``setup`` with its site-packages compared after the test: nothing of a binding lands there."""
    before = setup.site_packages()
    yield setup
    assert setup.site_packages() == before, "the harness's own site-packages changed"
    setup.starts_clean()


def _wheel_text(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        return "\n".join(f"{n}\n{zf.read(n).decode(errors='replace')}" for n in zf.namelist())


PTH = """\
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/zz-tiny.pth" "import pathlib; pathlib.Path(r'{marker}').write_text('ran')\\n")
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/zz-tiny.pth" DESTINATION .)
"""


@builds
@pytest.mark.parametrize("trust", [(), ("--trust", "tiny")], ids=["untrusted", "trusted"])
def test_a_wheel_carrying_a_pth_is_refused_before_install(clean: Setup, trust: tuple[str, ...]) -> None:
    """The issue's case: ``install(FILES x.pth DESTINATION .)``. build-binding used to say "built,
    installed", and every later start of that Python ran the .pth. Trusted or not, the wheel is read
    first and refused: exit 15, naming the .pth; nothing installed, nothing unpacked."""
    if trust:  # a trusted recipe's artifact is a path of its own
        run = clean.harness("build", "tiny", "--variant", "cpu", *trust)
        assert run.returncode == 0, run.output
    clean.binding(PTH)
    run = clean.harness("build-binding", "tiny", "--variant", "cpu", *trust)
    assert run.returncode == 15, run.output
    assert "zz-tiny.pth is a .pth file" in run.output and "not installed" in run.output, run.output
    assert not list((clean.recipe.cache / "binding").rglob("site")), "nothing is unpacked"


@builds
@pytest.mark.parametrize(("extra", "says"), [
    ('file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/tiny-tool" "#!/bin/sh\\necho hi\\n")\n'
     'install(PROGRAMS "${CMAKE_CURRENT_BINARY_DIR}/tiny-tool" DESTINATION "${SKBUILD_SCRIPTS_DIR}")\n',
     ".data/scripts/tiny-tool is in the wheel's .data directory"),
    ('file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/tiny_evil.py" "import pathlib\\n")\n'
     'install(FILES "${CMAKE_CURRENT_BINARY_DIR}/tiny_evil.py" DESTINATION .)\n',
     "member tiny_evil.py is outside the package harness_tiny_cpu/"),
    ('file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/sitecustomize.py" "import pathlib\\n")\n'
     'install(FILES "${CMAKE_CURRENT_BINARY_DIR}/sitecustomize.py" DESTINATION "${HARNESS_PACKAGE}")\n',
     "sitecustomize.py is a sitecustomize module"),
], ids=["console-script", "top-level-module", "sitecustomize"])
def test_a_wheel_with_a_command_or_a_module_outside_its_package_is_refused(clean: Setup, extra: str,
                                                                          says: str) -> None:
    clean.binding(extra)
    run = clean.harness("build-binding", "tiny", "--variant", "cpu")
    assert run.returncode == 15, run.output
    assert says in run.output and "not installed" in run.output, run.output
    assert not (clean.venv / "bin" / "tiny-tool").exists()


@builds
def test_an_untrusted_wheel_is_unpacked_never_installed_into_this_python(clean: Setup) -> None:
    """A clean wheel of an untrusted recipe: built in the sandbox, checked, and unpacked under its
    binding's own dir (untrusted-<hash>/) for $HARNESS_BINDING_PATH; this Python cannot import it."""
    clean.binding()
    run = clean.harness("build-binding", "tiny", "--variant", "cpu", "--json", "--force")
    assert run.returncode == 0, run.output
    r = json.loads(run.output)
    site = Path(r["site"])
    assert r["built"] and not r["installed"]
    assert site.parent.parent.name.startswith("untrusted-") and site.is_relative_to(clean.recipe.cache / "binding")
    assert json.loads((site / PACKAGE / "identity.json").read_text())["engine"] == "tiny"
    assert (site / PACKAGE / "note.txt").is_file()
    found = subprocess.run([str(clean.venv / "bin" / "python"), "-c",
                            f"import importlib.util; print(importlib.util.find_spec({PACKAGE!r}))"],
                           capture_output=True, text=True, check=True, timeout=60).stdout
    assert found.strip() == "None"
    # the words say where it went and how a run gets it; a second call builds nothing
    run = clean.harness("build-binding", "tiny", "--variant", "cpu")
    assert run.returncode == 0, run.output
    assert "wheel up to date, not installed into this Python" in run.output, run.output
    assert f"HARNESS_BINDING_PATH={site}" in run.output and "--trust tiny" in run.output, run.output


SNOOP = """\
set(loot "probe ran\\n")
foreach(p "{home}/secret" "{home}/.ssh/id_rsa" "{venv}/../secret")
  if(EXISTS "${p}")
    file(READ "${p}" s)
    string(APPEND loot "${p}: ${s}")
  endif()
endforeach()
file(GLOB listing LIST_DIRECTORIES true "{home}/*" "{home}/.*")
string(APPEND loot "listing: ${listing}\\n")
message(STATUS "${loot}")
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/loot.txt" "${loot}")
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/loot.txt" DESTINATION "${HARNESS_PACKAGE}")
"""


@builds
def test_the_wheel_sandbox_shows_a_venv_not_its_parent(clean: Setup) -> None:
    """A venv at ~/.venv used to expose all of $HOME to the wheel build (the wheel carried an id_rsa).
    The binding's CMake project reads the decoy home's secret and key, beside the venv and by name,
    and lists the home directory: it runs, and finds only the venv."""
    home = clean.recipe.home
    clean.binding(SNOOP.replace("{home}", str(home)).replace("{venv}", str(clean.venv)))
    run = clean.harness("build-binding", "tiny", "--variant", "cpu", "--json", "--force")
    assert run.returncode == 0, run.output
    wheel = Path(json.loads(run.output)["wheel"])
    text = _wheel_text(wheel)
    assert "probe ran" in text, text
    logs = "".join(p.read_text(errors="replace") for p in (clean.recipe.cache / "binding").rglob("build.log"))
    for where in (text, logs, run.output):
        assert hostile_engine.SECRET not in where and "id_rsa" not in where and f"{home}/secret" not in where, where
    with zipfile.ZipFile(wheel) as zf:
        loot = zf.read(f"{PACKAGE}/loot.txt").decode()
    assert loot == f"probe ran\nlisting: {clean.venv}\n", loot


@builds
@pytest.mark.parametrize("link", ["_shared", "binding"])
def test_a_recipe_link_to_a_directory_outside_it_is_refused(clean: Setup, link: str) -> None:
    """``engines/_shared`` linked to /etc/ssl used to show /etc to the wheel build (and ship
    /etc/shadow); the binding's own folder the same. Either link, to a directory outside the recipe
    holding a secret, is refused before anything is built: ConfigError (exit 3) naming it."""
    recipe = clean.recipe
    elsewhere = recipe.outside / "tree"
    elsewhere.mkdir(exist_ok=True)
    (elsewhere / "secret").write_text(hostile_engine.SECRET + "\n")
    (elsewhere / "CMakeLists.txt").write_text(
        CMAKE_HEAD + 'file(READ "${CMAKE_CURRENT_SOURCE_DIR}/../../_shared/secret" s)\nmessage(STATUS "${s}")\n')
    clean.binding()
    at = recipe.folder.parent / "_shared" if link == "_shared" else recipe.folder / "binding"
    if link == "binding":
        (at / "CMakeLists.txt").unlink()
        at.rmdir()
    at.symlink_to(elsewhere, target_is_directory=True)
    try:
        run = clean.harness("build-binding", "tiny", "--variant", "cpu", "--force")
    finally:
        at.unlink()
    assert run.returncode == 3, run.output
    assert str(at) in run.output and "outside the" in run.output, run.output
    assert hostile_engine.SECRET not in run.output


# --- the wheel check and the binding dir, without a build ---------------------------------------------

def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _make_wheel(path: Path, members: dict[str, bytes], *, record: str | None = None) -> Path:
    dist_info = "harness_binding_tiny_cpu-1.dist-info"
    members = {f"{PACKAGE}/__init__.py": b"", f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\n",
               f"{dist_info}/entry_points.txt": f"[harness.bindings]\ntiny-cpu = {PACKAGE}\n".encode(), **members}
    if record is None:
        record = "\n".join([*(_record_line(n, d) for n, d in members.items()), f"{dist_info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(f"{dist_info}/RECORD", record)
    return path


@pytest.mark.parametrize(("members", "record", "says"), [
    ({}, None, ""),
    ({f"{PACKAGE}/x.py": b"1"}, "", "is not in its RECORD"),
    ({"harness_binding_tiny_cpu-1.dist-info/entry_points.txt": b"[console_scripts]\nt = harness_tiny_cpu:m\n"},
     None, "entry point t in console_scripts"),
    ({"harness_binding_tiny_cpu-1.dist-info/entry_points.txt": b"[harness]\nengine-x = harness_tiny_cpu\n"},
     None, "entry point harness: engine-x"),
    ({"harness_binding_tiny_cpu-1.data/purelib/x.py": b""}, None, "in the wheel's .data directory"),
    ({f"{PACKAGE}/../evil.py": b""}, None, "'..' component"),
    ({f"{PACKAGE}/sub/x.pth": b"import os"}, None, "is a .pth file"),
], ids=["clean", "unlisted", "console-scripts", "plugin-group", "data", "climbing", "pth-in-package"])
def test_check_wheel(tmp_path: Path, members: dict[str, bytes], record: str | None, says: str) -> None:
    from harness.binding.contents import check_wheel
    from harness.core.errors import BindingError

    wheel = _make_wheel(tmp_path / "harness_binding_tiny_cpu-1-py3-none-any.whl", members, record=record)
    if not says:
        check_wheel(wheel, dist="harness-binding-tiny-cpu", package=PACKAGE)
        return
    with pytest.raises(BindingError, match="not installed") as e:
        check_wheel(wheel, dist="harness-binding-tiny-cpu", package=PACKAGE)
    assert says in str(e.value)


def test_check_wheel_compares_every_member_with_its_record_hash(tmp_path: Path) -> None:
    from harness.binding.contents import check_wheel
    from harness.core.errors import BindingError

    dist_info = "harness_binding_tiny_cpu-1.dist-info"
    record = "\n".join([_record_line(f"{PACKAGE}/__init__.py", b"print('other')"),
                        _record_line(f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\n"),
                        _record_line(f"{dist_info}/entry_points.txt", f"[harness.bindings]\ntiny-cpu = {PACKAGE}\n".encode()),
                        f"{dist_info}/RECORD,,"]) + "\n"
    wheel = _make_wheel(tmp_path / "harness_binding_tiny_cpu-1-py3-none-any.whl", {}, record=record)
    with pytest.raises(BindingError, match="RECORD"):
        check_wheel(wheel, dist="harness-binding-tiny-cpu", package=PACKAGE)
    with pytest.raises(BindingError, match="the distribution is"):
        check_wheel(wheel, dist="harness-binding-other-cpu", package=PACKAGE)


def test_an_untrusted_recipe_never_shares_a_binding_dir_with_a_trusted_one(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.binding.wheel import binding_root
    from harness.core.types import EngineSpec, SourceSpec

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HARNESS_TRUST", raising=False)

    def spec(folder: Path) -> EngineSpec:
        return EngineSpec(name="tiny", root=folder, source=SourceSpec(kind="git", version="1"), upstream={},
                          cmake={"base": {}}, targets=("tiny",), artifacts={"lib": (), "bin": (), "include": ()}, abi={})

    one, two = spec(tmp_path / "a" / "engines" / "tiny"), spec(tmp_path / "b" / "engines" / "tiny")
    untrusted = {binding_root(one, "cpu"), binding_root(two, "cpu")}
    monkeypatch.setenv("HARNESS_TRUST", "tiny")
    trusted = binding_root(one, "cpu")
    assert len(untrusted) == 2 and trusted not in untrusted
    assert trusted.name == "tiny-1-cpu" and all(p.name == "tiny-1-cpu" for p in untrusted)
