"""The sandbox's edge (issue 58, classes 1, 2 and 5): the host never follows what a build wrote, a
sandbox shows exactly the paths it is given, and no secret of the host's environment goes in.

Each hostile case is a patch of the tiny engine (an untrusted ``$HARNESS_ENGINES_PATH`` folder)
built by the installed ``harness build`` in bubblewrap; ``recipe.outside`` and the decoy ``$HOME``
must be byte-identical afterwards, and no secret may reach the output, the log or the artifact.
Before this issue the first of them wrote build output into ``outside/evil.pth`` through a
``build.log`` symlink, the second printed a host file as "the last lines of the log", the third
wrote the init-cache script through a link left by a failed build.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from harness.core.errors import BuildError
from harness.sandbox import bwrap
from harness.sandbox.confined import ConfinementError, Tree

from . import hostile_engine
from .test_recipe_confine import pytestmark as _tools
from .test_recipe_sandbox import NO_SANDBOX, cmake_patch

pytestmark = [*_tools] if isinstance(_tools, list) else [_tools]
needs_bwrap = pytest.mark.skipif(bool(NO_SANDBOX), reason=f"no sandbox here: {NO_SANDBOX}")

#: A target the engine's library depends on that fails: the build step (not configure) fails.
FAIL_BUILD = 'add_custom_target(hostile_fail COMMAND false)\nadd_dependencies(tiny hostile_fail)\n'


@pytest.fixture
def recipe(tmp_path: Path) -> hostile_engine.Recipe:
    return hostile_engine.make(tmp_path)


def _all_output(recipe: hostile_engine.Recipe, run: hostile_engine.Run) -> str:
    logs = "".join(p.read_text(errors="replace") for p in (recipe.cache / "host").rglob("build.log"))
    arts = b"".join(p.read_bytes() for p in (recipe.cache / "dist").rglob("*") if p.is_file() and not p.is_symlink())
    return run.output + logs + arts.decode(errors="replace")


# -- class 1: the host follows what a sandbox wrote ----------------------------------------------

@needs_bwrap
def test_a_build_log_linked_into_a_venv_is_never_written_through(recipe: hostile_engine.Recipe) -> None:
    """The issue's worst case: configure replaces build.log with a link to a ``.pth``; the build step's
    output went there, and the next Python start ran it."""
    site = recipe.outside / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "keep.pth").write_text("# the user's\n")
    recipe.patch("0002-hostile.patch", cmake_patch(
        f'file(CREATE_LINK {site}/evil.pth ${{CMAKE_BINARY_DIR}}/build.log SYMBOLIC)\n'
        'message(STATUS "import os; os.system(\'touch PWNED\')")\n'))
    before = recipe.outside_state()
    run = recipe.harness("build", "tiny", "--variant", "cpu")
    assert run.returncode == 0, run.output
    assert not (site / "evil.pth").exists() and recipe.outside_state() == before


@needs_bwrap
def test_a_failed_build_s_log_tail_is_the_host_s_own_log(recipe: hostile_engine.Recipe) -> None:
    """A link (to a host secret, to /dev/zero, to a FIFO) where the log was: the error's last lines are
    the harness's own log, read boundedly, with no secret and no hang."""
    fifo = recipe.outside / "fifo"
    os.mkfifo(fifo)
    for target in (recipe.outside / "secret", Path("/dev/zero"), fifo):
        recipe.patch("0002-hostile.patch", cmake_patch(
            f'file(CREATE_LINK {target} ${{CMAKE_BINARY_DIR}}/build.log SYMBOLIC)\n' + FAIL_BUILD))
        run = recipe.harness("build", "tiny", "--variant", "cpu", "--force", timeout=120)
        assert run.returncode == BuildError.exit_code, run.output
        assert "last lines of" in run.output and hostile_engine.SECRET not in run.output
        assert "Traceback" not in run.output and "MemoryError" not in run.output


@needs_bwrap
def test_links_left_by_a_failed_build_are_not_written_through_on_the_retry(recipe: hostile_engine.Recipe) -> None:
    """The init-cache script, passwd and group, the file-API query and the ccache stats log of the
    next try: a failed build leaves links (one dangling) at each of their old places."""
    links = {"harness-init-cache.cmake": recipe.outside / "init", ".sandbox/passwd": recipe.outside / "passwd",
             ".sandbox/group": recipe.outside / "no-such-dir" / "group",
             ".cmake/api/v1/query/client-harness/codemodel-v2": recipe.outside / "query",
             "ccache-stats.log": recipe.outside / "stats"}
    made = "".join(f'file(REMOVE ${{CMAKE_BINARY_DIR}}/{name})\n'
                   f'file(CREATE_LINK {target} ${{CMAKE_BINARY_DIR}}/{name} SYMBOLIC)\n' for name, target in links.items())
    recipe.patch("0002-hostile.patch", cmake_patch('file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/.sandbox)\n' + made
                                                    + FAIL_BUILD))
    before = recipe.outside_state()
    for _ in range(2):
        run = recipe.harness("build", "tiny", "--variant", "cpu")
        assert run.returncode == BuildError.exit_code, run.output
        assert "Traceback" not in run.output
        assert recipe.outside_state() == before
    assert not any(t.exists() for t in links.values())


def test_a_file_api_reply_naming_a_host_directory_is_refused(tmp_path: Path) -> None:
    from harness.build import cmake_fileapi

    from .test_artifact_collect import write_reply

    build = tmp_path / "build"
    write_reply(build, [("tiny", "SHARED_LIBRARY", [str(Path.home() / ".ssh" / "libtiny.so")])])
    with pytest.raises(ConfinementError, match="outside the build dir"):
        cmake_fileapi.read_targets(Tree(build))
    write_reply(build, [("tiny", "SHARED_LIBRARY", ["../../../etc/libtiny.so"])])
    with pytest.raises(ConfinementError, match="outside the build dir"):
        cmake_fileapi.read_targets(Tree(build))


def test_a_cmake_cache_that_is_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    from harness.build.cmake import _clear_stale

    build, own = tmp_path / "build", tmp_path / "own"
    build.mkdir()
    own.mkdir()
    os.mkfifo(build / "CMakeCache.txt")
    t = threading.Thread(target=_clear_stale, args=(build, own, tmp_path / "src", {}), daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the host waited on a FIFO the build left"
    assert not build.exists(), "a build dir holding a special file where CMake's cache was is made again"


# -- the accessor itself ---------------------------------------------------------------------------

def test_the_accessor_follows_nothing_and_reads_boundedly(tmp_path: Path) -> None:
    root, outside = tmp_path / "tree", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text(hostile_engine.SECRET)
    (root / "ok.txt").write_text("ok")
    (root / "abs").symlink_to(outside / "secret")
    (root / "up").symlink_to("../outside/secret")
    (root / "dirlink").symlink_to(outside)
    (root / "zero").symlink_to("/dev/zero")
    (root / "in").symlink_to("d/../ok.txt")
    os.mkfifo(root / "fifo")
    os.link(outside / "secret", root / "hard")
    (root / "big").write_bytes(b"x" * 4096)
    t = Tree(root)
    assert t.read_text("ok.txt") == "ok" and t.resolve("in") == "ok.txt"
    for name, why in [("abs", "symbolic link"), ("up", "symbolic link"), ("zero", "symbolic link"),
                      ("fifo", "not a regular file"), ("hard", "hard links"), ("dirlink/secret", "link or not a dir")]:
        with pytest.raises(ConfinementError, match=why):
            t.read_bytes(name)
    with pytest.raises(ConfinementError, match="over the 100-byte limit"):
        t.read_bytes("big", limit=100)
    for name in ("abs", "up", "dirlink/secret"):
        with pytest.raises(ConfinementError):
            t.resolve(name)
    for bad in ("/etc/passwd", "../outside/secret", "d/../../outside/secret"):
        with pytest.raises(ConfinementError):
            t.read_bytes(bad)
    assert "dirlink/secret" not in t.glob("*/*"), "a linked directory was entered"
    with pytest.raises(ConfinementError, match="is a link, not a directory"):
        t.glob("dirlink/*")
    with pytest.raises(ConfinementError):
        t.touch("dirlink/x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


# -- class 2: binds are exactly the paths named -----------------------------------------------------

def _untrusted_spec(root: Path) -> object:
    from harness.core.types import EngineSpec, SourceSpec

    return EngineSpec(name="tiny", root=root, source=SourceSpec(kind="git"), upstream={}, cmake={"base": {}},
                      targets=("tiny",), artifacts={"lib": (), "bin": (), "include": ()}, abi={})


def _in_box(tmp_path: Path, shown: dict[str, str], script: str, env: dict[str, str] | None = None) -> str:
    from harness.core import host as hostmod

    root = tmp_path / "contrib" / "engines" / "tiny"
    (root / "src").mkdir(parents=True, exist_ok=True)
    base = {**os.environ, **(env or {})}
    box = bwrap.sandbox_for(_untrusted_spec(root), tree=root / "src", build_dir=tmp_path / "build",  # type: ignore[arg-type]
                            host=hostmod.probe(), env=base, plugin_defines=shown)
    argv, full = box.command(["sh", "-c", script], base)
    return subprocess.run(argv, env=full, capture_output=True, text=True, check=False, timeout=60).stdout


@needs_bwrap
def test_a_path_named_is_shown_as_itself_never_its_parent(outside_python: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A venv's site-packages under a decoy $HOME shows that directory only (not $HOME, where the
    ``id_rsa`` is); a link to a directory shows the directory it leads to, not that one's parent."""
    monkeypatch.delenv("HARNESS_TRUST", raising=False)
    home = outside_python / "home"
    site = home / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "mod.py").write_text("x = 1\n")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text(hostile_engine.SECRET)
    (home / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    etc = outside_python / "etc"
    (etc / "ssl").mkdir(parents=True)
    (etc / "ssl" / "cert.pem").write_text("cert\n")
    (etc / "shadow").write_text(hostile_engine.SECRET)
    (outside_python / "shared").symlink_to(etc / "ssl")
    out = _in_box(outside_python, {"venv": str(site), "shared": str(outside_python / "shared")},
                  f"cat {site}/mod.py {etc}/ssl/cert.pem; cat {home}/.ssh/id_rsa {etc}/shadow {home}/.venv/pyvenv.cfg; "
                  f"ls {home} {etc} 2>&1; echo end")
    assert "x = 1" in out and "cert" in out and out.rstrip().endswith("end"), out
    assert hostile_engine.SECRET not in out and "home = /usr/bin" not in out and ".ssh" not in out, out


# -- class 5: no secret enters the sandbox ---------------------------------------------------------

@needs_bwrap
def test_only_allowlisted_variables_reach_an_untrusted_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_TRUST", raising=False)
    secret = "hunter2-58"
    canaries = {"CCACHE_REMOTE_STORAGE": f"redis://user:{secret}@127.0.0.1:6379|read-only=false",
                "CCACHE_CONFIGPATH": f"/tmp/{secret}.conf", "CCACHE_SECRET_THING": secret,
                "AWS_SECRET_ACCESS_KEY": secret, "GITHUB_TOKEN": secret, "SSH_AUTH_SOCK": f"/tmp/{secret}",
                "PYTHONPATH": f"/tmp/{secret}", "LD_PRELOAD": f"/tmp/{secret}.so"}
    out = _in_box(tmp_path, {}, "env", env=canaries)
    assert secret not in out, out
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    allowed = {*bwrap.ENV_KEEP, *bwrap.CCACHE_KEEP, "HOME", "TMPDIR", "USER", "LOGNAME", "PWD", "SHLVL", "_"}
    assert {n for n in names if not n.startswith("LC_")} <= allowed, names - allowed
    assert "CCACHE_REMOTE_STORAGE=" in out  # given, empty: no ccache.conf adds a remote inside


@needs_bwrap
def test_the_remote_cache_password_never_reaches_an_untrusted_build(recipe: hostile_engine.Recipe) -> None:
    secret = "hunter2-58b"
    recipe.patch("0002-hostile.patch", cmake_patch(
        'execute_process(COMMAND sh -c "env; cat /etc/ccache.conf" OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)\n'
        'message(STATUS "ENV<<${OUT}${ERR}>>")\n'
        'file(WRITE ${CMAKE_BINARY_DIR}/libtiny-env.so "${OUT}")\n'))
    run = recipe.harness("build", "tiny", "--variant", "cpu", "--json",
                         CCACHE_REMOTE_STORAGE=f"redis://build:{secret}@127.0.0.1:6379")
    assert run.returncode == 0, run.output
    assert "ENV<<" in _all_output(recipe, run) and secret not in _all_output(recipe, run)
    manifest = json.loads((Path(json.loads(run.output)[0]["artifact"]) / "manifest.json").read_text())
    assert manifest["trusted"] is False


# -- trust is part of every key ---------------------------------------------------------------------

@needs_bwrap
def test_an_untrusted_build_never_writes_a_trusted_one_s_paths(recipe: hostile_engine.Recipe) -> None:
    untrusted = recipe.harness("build", "tiny", "--variant", "cpu", "--json")
    trusted = recipe.harness("build", "tiny", "--variant", "cpu", "--json", "--trust", "tiny")
    assert untrusted.returncode == 0 and trusted.returncode == 0, untrusted.output + trusted.output
    a, b = json.loads(untrusted.output)[0], json.loads(trusted.output)[0]
    assert a["artifact"] != b["artifact"] and "+untrusted-" in a["artifact"] and "untrusted" not in Path(b["artifact"]).name
    ma = json.loads((Path(a["artifact"]) / "manifest.json").read_text())
    mb = json.loads((Path(b["artifact"]) / "manifest.json").read_text())
    assert ma["build_dir"] != mb["build_dir"] and ma["build_log"] != mb["build_log"]


@needs_bwrap
def test_a_build_dir_configured_with_a_ninja_since_deleted_builds_again(recipe: hostile_engine.Recipe) -> None:
    """The build dirs are shared by every checkout on the host: one configured by a CI clone keeps
    that clone's ``.nox/tests/bin/ninja`` in CMakeCache.txt, and once the clone is gone the next
    configure failed ("'ninja' '--version' failed with: no such file or directory"). The ninja found
    now is what configure uses."""
    run = recipe.harness("build", "tiny", "--variant", "cpu")
    assert run.returncode == 0, run.output
    (cache,) = (recipe.cache / "work").rglob("CMakeCache.txt")
    gone = recipe.scratch / "gone-clone" / ".nox" / "tests" / "bin" / "ninja"
    text = "\n".join(f"CMAKE_MAKE_PROGRAM:FILEPATH={gone}" if ln.startswith("CMAKE_MAKE_PROGRAM:") else ln
                     for ln in cache.read_text().splitlines())
    assert str(gone) in text
    cache.write_text(text + "\n")
    run = recipe.harness("build", "tiny", "--variant", "cpu", "--force")
    assert run.returncode == 0, run.output
    assert str(gone) not in cache.read_text()
