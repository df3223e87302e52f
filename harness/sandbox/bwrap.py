"""Builds in a sandbox: CMake's configure and build of a recipe run under bubblewrap.

A recipe is code (README "Trust model"): a patch can add ``execute_process`` or
``configure_file(/etc/passwd ...)`` to a CMakeLists.txt, and checking patch text cannot close
that. So the build must not see the host, as Nix and Bazel sandbox a build action and Debian's
sbuild builds in a chroot:

- no network (a new network namespace), except for a *trusted* recipe's build when a remote
  ccache over the network is configured (ccache, inside the build, is what talks to it);
- the host's system directories (``/usr``, ``/bin``, ``/lib*``, ``/opt``, ...) read-only; ``/home``,
  ``/root``, ``/var``, ``/run``, ``/srv``, ``/mnt``, ``/media`` and the host's ``/tmp`` absent (a fresh
  ``/tmp``); ``/etc`` reduced to what the toolchain reads (the loader's cache and config, the
  alternatives links, a synthetic ``passwd``/``group``: no shadow, no ssh keys, no host names);
- ``$HOME`` and the harness cache out of sight except the build's own dirs: the patched tree
  (read-only), the build dir (read-write), the ccache dir, and the read-only prefixes of the
  tools the host probe found (cmake, ninja, the compilers, ccache: a tool installed under
  ``$HOME``, a pyenv or a venv, is visible read-only, nothing else there);
- a clean environment: ``PATH``, the locale, the compiler and toolkit variables a build reads
  (``CC``, ``CFLAGS``, ``CUDA_PATH``, ...), ``CCACHE_*``; no tokens or keys;
- all capabilities dropped, a new session, killed with the harness.

Where bubblewrap cannot run (not installed, or user namespaces disabled), a trusted recipe
builds on the host as before (said once); an untrusted one is refused, naming ``--no-sandbox``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core import paths, progress
from harness.core.errors import HostError
from harness.core.types import EngineSpec, HostInfo

#: Set (to anything non-empty) to build on the host, never in the sandbox (``--no-sandbox``).
NO_SANDBOX_ENV = "HARNESS_NO_SANDBOX"
#: Top-level host directories the sandbox shows read-only (those that exist; a symlink stays one).
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt", "nix", "gnu", "snap")
#: ``/etc`` entries a toolchain reads (the dynamic loader, the compiler alternatives, ccache's own config).
ETC_KEEP = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ccache.conf", "os-release",
            "nsswitch.conf", "localtime")
#: Environment variables a build may read (besides ``LC_*`` and ``CCACHE_*``); everything else is dropped.
ENV_KEEP = ("PATH", "LANG", "LANGUAGE", "TZ", "SOURCE_DATE_EPOCH", "TERM", "CC", "CXX", "CFLAGS", "CXXFLAGS",
            "CPPFLAGS", "LDFLAGS", "CUDAFLAGS", "CUDACXX", "CUDAHOSTCXX", "CUDA_HOME", "CUDA_PATH",
            "CUDAToolkit_ROOT", "VULKAN_SDK", "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH", "LIBRARY_PATH", "CPATH",
            "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LD_LIBRARY_PATH", "NINJA_STATUS", "PYENV_VERSION",
            "PYENV_ROOT")
#: ccache's settings a build may read (the harness sets CCACHE_DIR, CCACHE_STATSLOG and, for a trusted build,
#: CCACHE_REMOTE_STORAGE itself: :func:`ccache_env`); no other ``CCACHE_*`` of the host's goes in.
CCACHE_KEEP = ("CCACHE_DIR", "CCACHE_BASEDIR", "CCACHE_STATSLOG", "CCACHE_REMOTE_STORAGE", "CCACHE_NOHASHDIR",
               "CCACHE_HASHDIR", "CCACHE_SLOPPINESS", "CCACHE_COMPILERCHECK", "CCACHE_MAXSIZE", "CCACHE_DEPEND",
               "CCACHE_NODEPEND", "CCACHE_DIRECT", "CCACHE_NODIRECT", "CCACHE_COMPRESS", "CCACHE_NOCOMPRESS",
               "CCACHE_COMPRESSLEVEL", "CCACHE_DISABLE", "CCACHE_NODISABLE", "CCACHE_RECACHE", "CCACHE_READONLY",
               "CCACHE_NOREADONLY", "CCACHE_NOSTATS", "CCACHE_UMASK", "CCACHE_NAMESPACE", "CCACHE_REMOTE_ONLY",
               "CCACHE_RESHARE", "CCACHE_FILE_CLONE", "CCACHE_HARDLINK", "CCACHE_NOHARDLINK")
#: Where the sandboxed build's ``$HOME`` is (inside its fresh ``/tmp``).
HOME = "/tmp/home"


class SandboxError(HostError):
    """A build that must run in the sandbox cannot: bubblewrap is missing or user namespaces are off."""


def remote_storage(env: dict[str, str] | None = None) -> str | None:
    """ccache's effective remote storage (its environment variable, else its config files), or None."""
    env = dict(os.environ if env is None else env)
    value = env.get("CCACHE_REMOTE_STORAGE")
    if value is None and shutil.which("ccache"):
        try:
            r = subprocess.run(["ccache", "--get-config", "remote_storage"], capture_output=True, text=True,
                               timeout=10, env=env, check=False)
            value = r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            value = None
    return value or None


@dataclass(frozen=True, kw_only=True)
class Sandbox:
    """How one build's commands run: :meth:`command` gives the argv and environment of each."""

    args: tuple[str, ...]
    """``bwrap`` and its mounts (empty: on the host)."""
    ccache: Mapping[str, str]
    """What ccache gets (:func:`ccache_env`), inside or out."""

    @property
    def active(self) -> bool:
        return bool(self.args)

    def command(self, argv: list[str], env: Mapping[str, str], *,
                also_keep: Iterable[str] = ()) -> tuple[list[str], dict[str, str]]:
        """``(argv, env)`` for Popen: on the host, ``argv`` with ``env`` and the ccache settings; in the
        sandbox, bwrap running ``argv`` with only the variables a build reads (:data:`ENV_KEEP`, and
        ``also_keep``: variables the harness itself set, e.g. its compiler launcher)."""
        full = {**env, **self.ccache}
        if not self.active:
            return argv, full
        names = {*ENV_KEEP, *CCACHE_KEEP, *also_keep}
        keep = {k: v for k, v in full.items() if k in names or k.startswith("LC_")}
        keep.update({"HOME": HOME, "TMPDIR": "/tmp", "USER": "build", "LOGNAME": "build"})
        setenv = [a for k, v in sorted(keep.items()) for a in ("--setenv", k, v)]
        return [*self.args, "--clearenv", *setenv, "--", *argv], {"PATH": os.environ.get("PATH", os.defpath)}


def python_paths() -> dict[str, str]:
    """What a compile of a Python extension reads of this Python, shown read-only: the interpreter, its
    headers, pybind11's headers and CMake files (those that exist)."""
    import sys
    import sysconfig

    import pybind11

    found = {"python": sys.executable, "pyinc": sysconfig.get_paths()["include"],
             "pybind11": pybind11.get_include(), "pybind11_cmake": pybind11.get_cmake_dir()}
    return {k: v for k, v in found.items() if os.path.exists(v)}


def disabled() -> bool:
    """``--no-sandbox`` / ``HARNESS_NO_SANDBOX``."""
    return bool(os.environ.get(NO_SANDBOX_ENV))


@functools.cache
def _probe(bwrap: str) -> str:
    """"" when ``bwrap`` can make a sandbox here, else why not (its own words)."""
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--cap-drop", "ALL", "true"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{bwrap} did not run: {e}"
    return "" if r.returncode == 0 else f"{bwrap} failed: {(r.stderr or r.stdout).strip()[:300]}"


def unavailable() -> str:
    """"" when the sandbox can run on this host, else why not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    return _probe(bwrap)


def _prefix_of(path: str) -> list[str]:
    """The install prefix a tool at ``path`` needs visible: the parent of its ``bin/`` (a venv, a
    pyenv root, ``/usr/local``), for the path as found and as resolved, and for a script's interpreter."""
    out: list[str] = []
    todo = [path]
    for _ in range(3):  # the tool, its interpreter, that one's (a pyenv shim: bash, then pyenv)
        if not todo:
            break
        p = todo.pop()
        for candidate in dict.fromkeys([p, os.path.realpath(p)]):
            bindir = os.path.dirname(candidate)
            out.append(os.path.dirname(bindir) if os.path.basename(bindir) in ("bin", "sbin", "shims")
                       else bindir)
        try:
            with open(os.path.realpath(p), "rb") as f:
                head = f.read(256)
        except OSError:
            continue
        if head.startswith(b"#!"):
            interp = head[2:].split(b"\n", 1)[0].split()
            if interp and os.path.isabs(interp[0].decode(errors="replace")):
                todo.append(interp[0].decode(errors="replace"))
    return out


def _visible_under(path: str, shown: Iterable[str]) -> bool:
    return any(path == s or path.startswith(s.rstrip("/") + "/") for s in shown)


def _hidden() -> list[str]:
    """What no bind may show or contain: ``$HOME`` and the harness cache (as named and resolved), and ``/``."""
    home, cache = Path.home(), paths.cache_root()
    return list(dict.fromkeys([str(home), os.path.realpath(home), str(cache), os.path.realpath(cache), "/"]))


def _holds_hidden(d: str) -> bool:
    """Whether binding ``d`` would show ``$HOME``, the cache or ``/`` (``d`` is one of them or above one)."""
    return any(h == d or h.startswith(d.rstrip("/") + "/") for h in _hidden())


def _tool_dirs(host: HostInfo, extra: Iterable[str]) -> list[str]:
    """Read-only dirs for the tools a build runs: the install prefix of each program the host probe
    found (and of each program a plugin named: a compiler, the interpreter), never ``$HOME`` or the
    harness cache as a whole (a tool sitting right in ``$HOME/bin`` gets that bin dir)."""
    system = ["/" + d for d in SYSTEM_DIRS]
    dirs: list[str] = []
    paths_ = [t.path for t in host.tools.values() if t.path] + [p for p in extra if _is_program(p)]
    for tool in paths_:
        for d in _prefix_of(tool):
            if _holds_hidden(d):
                d = os.path.dirname(tool)  # a prefix holding $HOME or the cache: only the tool's own dir
            if os.path.isdir(d) and not _holds_hidden(d) and not _visible_under(os.path.realpath(d), system):
                dirs.append(d)
    return sorted(dict.fromkeys(dirs))


def _is_program(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _exact_paths(extra: Iterable[str]) -> list[str]:
    """The paths named that are not programs (a toolchain file, a headers directory, a Python's
    site-packages), each shown as itself, never its parent, at its resolved place; one that is, or
    holds, ``$HOME``, the cache or ``/`` is not shown."""
    out = []
    for p in extra:
        if _is_program(p) or not os.path.exists(p):
            continue
        real = os.path.realpath(p)
        if not _holds_hidden(real) and not _holds_hidden(os.path.normpath(p)):
            out.append(real)
    return sorted(dict.fromkeys(out))


def _plugin_paths(defines: Mapping[str, str]) -> list[str]:
    """Existing absolute paths in the defines the plugins and the user set (a toolchain file, a
    headers package, ``-I/path`` in flags), shown read-only."""
    out = []
    for value in defines.values():
        for word in value.replace(";", " ").split():
            word = word.removeprefix("-I")
            if os.path.isabs(word) and os.path.exists(word):
                out.append(word)
    return out


def ccache_dir(env: Mapping[str, str]) -> str | None:
    """The local ccache directory the host's ccache uses (its config says), or None without ccache."""
    if env.get("CCACHE_DIR"):
        return env["CCACHE_DIR"]
    ccache = shutil.which("ccache", path=env.get("PATH"))
    if ccache is None:
        return None
    try:
        r = subprocess.run([ccache, "--get-config", "cache_dir"], capture_output=True, text=True, timeout=10,
                           env=dict(env), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def read_only_remote(setting: str) -> str:
    """A ccache remote storage setting with every storage marked ``read-only``: reads, never writes."""
    out = []
    for part in setting.split():
        url, _, attrs = part.partition("|")
        kept = [a for a in attrs.split("|") if a and not a.startswith("read-only")]
        out.append("|".join([url, *kept, "read-only=true"]))
    return " ".join(out)


def ccache_env(env: Mapping[str, str], *, trusted: bool) -> dict[str, str]:
    """What ccache gets: a trusted build the host's cache and remote storage as configured; an
    untrusted one a local cache of its own (``<cache>/ccache-untrusted``: it never writes the cache
    trusted builds read) and, of the remote storage, only the shared directories (``file:``) and
    read-only: an untrusted build has no network, and a server's URL may carry its password, which
    ``read-only=true`` does not keep from whoever holds it. The setting is then always given (empty
    when nothing is left), so no ccache configuration file adds a remote inside."""
    out: dict[str, str] = {}
    local = ccache_dir(env) if trusted else str(paths.cache_root() / "ccache-untrusted")
    if local:
        out["CCACHE_DIR"] = local
    remote = remote_storage(dict(env))
    if trusted:
        if remote:
            out["CCACHE_REMOTE_STORAGE"] = remote
        return out
    shared = " ".join(p for p in (remote or "").split() if p.startswith("file:") and "@" not in p.split("|", 1)[0])
    out["CCACHE_REMOTE_STORAGE"] = read_only_remote(shared) if shared else ""
    return out


def file_remotes(setting: str) -> list[str]:
    """The existing directories of a remote storage setting's ``file:`` storages."""
    from urllib.parse import urlsplit

    out = []
    for part in setting.split():
        url = part.split("|", 1)[0]
        if url.startswith("file:"):
            path = urlsplit(url).path
            if os.path.isdir(path):
                out.append(path)
    return out


def _network_remote(setting: str | None) -> bool:
    return bool(setting) and any(not p.startswith("file:") for p in (setting or "").split())


def _etc_files(work: Path, *, trusted: bool) -> list[str]:
    """bwrap arguments for the reduced ``/etc``: the kept entries and a synthetic passwd/group, written
    by the host in ``work`` (its own directory, outside every tree a sandbox can write). An untrusted
    build does not see ``/etc/ccache.conf`` (a remote storage's password may be written there)."""
    from harness.sandbox.confined import write_private

    uid, gid = os.getuid(), os.getgid()
    write_private(work / "passwd", f"build:x:{uid}:{gid}:harness build:{HOME}:/bin/sh\n"
                  + ("" if uid == 0 else "root:x:0:0:root:/nonexistent:/bin/false\n"))
    write_private(work / "group", f"build:x:{gid}:\n" + ("" if gid == 0 else "root:x:0:\n"))
    args = ["--dir", "/etc"]
    for name in ETC_KEEP:
        if name == "ccache.conf" and not trusted:
            continue
        if os.path.lexists(f"/etc/{name}"):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--ro-bind", str(work / "passwd"), "/etc/passwd", "--ro-bind", str(work / "group"), "/etc/group"]
    return args


def sandbox_for(engine: EngineSpec, *, tree: Path, build_dir: Path, host: HostInfo, env: Mapping[str, str],
                plugin_defines: Mapping[str, str], host_files: Path | None = None,
                shown: Iterable[str] = ()) -> Sandbox:
    """The sandbox one build of ``engine`` runs in, or the host when there is none and the recipe
    is trusted (said once); :class:`SandboxError` for an untrusted recipe without one.

    ``env`` is the environment the build would get on the host; ``plugin_defines`` the defines the
    variant plugins and the user set (their paths are shown read-only: a program with its install
    prefix, anything else exactly as itself); ``host_files`` the host's own directory for this build
    (the synthetic passwd/group go there; default: one keyed by ``build_dir`` under ``<cache>/host``);
    ``shown``: more files of the host's to show read-only at their paths (the init-cache script)."""
    from harness.engine.trust import is_trusted, origin, untrusted_hint

    trusted = is_trusted(engine)
    cc_env = ccache_env(env, trusted=trusted)
    if disabled():
        return Sandbox(args=(), ccache=cc_env)
    why = unavailable()
    if why:
        if not trusted:
            msg = (f"{origin(engine)} is not trusted, and its build must run in the sandbox, which this host "
                   f"cannot make: {why}. Install bubblewrap and allow unprivileged user namespaces "
                   "(bash scripts/install-system-deps.sh; sysctl kernel.unprivileged_userns_clone=1, or on "
                   "Ubuntu kernel.apparmor_restrict_unprivileged_userns=0), or build it on the host with "
                   f"--no-sandbox after you have read the recipe; or {untrusted_hint(engine.name)}")
            raise SandboxError(msg)
        _say_once(f"builds run on the host, not in a sandbox: {why}")
        return Sandbox(args=(), ccache=cc_env)
    import hashlib

    from harness.sandbox.confined import host_dir

    build_dir.mkdir(parents=True, exist_ok=True)
    work = (host_files or host_dir("sandbox", hashlib.sha256(str(build_dir).encode()).hexdigest()[:16])) / ".sandbox"
    work.mkdir(parents=True, exist_ok=True)
    bwrap = shutil.which("bwrap") or "bwrap"
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if trusted and _network_remote(remote_storage(dict(env))):
        args.append("--share-net")  # a trusted build's ccache talks to the remote storage
    for d in SYSTEM_DIRS:
        host_path = f"/{d}"
        if os.path.islink(host_path):
            args += ["--symlink", os.readlink(host_path), host_path]
        elif os.path.isdir(host_path):
            args += ["--ro-bind", host_path, host_path]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--dir", HOME]
    args += _etc_files(work, trusted=trusted)
    for hidden in dict.fromkeys([str(Path.home().resolve()), str(paths.cache_root())]):
        # a $HOME or cache under a directory shown read-only (HARNESS_CACHE=/opt/...) is covered again
        if _visible_under(hidden, ["/" + d for d in SYSTEM_DIRS]) and hidden not in ("/", "/usr"):
            args += ["--tmpfs", hidden]
    named = _plugin_paths(plugin_defines)
    for d in _tool_dirs(host, named):
        args += ["--ro-bind", d, d]
    for p in _exact_paths(named):
        args += ["--ro-bind", p, p]
    ccache = cc_env.get("CCACHE_DIR")
    if ccache:
        Path(ccache).mkdir(parents=True, exist_ok=True)
        args += ["--bind", ccache, ccache]
    for shared in file_remotes(cc_env.get("CCACHE_REMOTE_STORAGE", "")):
        # a file: remote storage (a shared directory): written by a trusted build only
        args += ["--bind" if trusted else "--ro-bind", shared, shared]
    args += ["--ro-bind", str(tree), str(tree), "--bind", str(build_dir), str(build_dir)]
    for f in shown:
        args += ["--ro-bind", f, f]
    args += ["--chdir", str(build_dir)]
    return Sandbox(args=tuple(args), ccache=cc_env)


@functools.cache
def _say_once(message: str) -> None:
    progress.info(message)
