"""The binding stage: build an engine's pybind11 module against one artifact into a wheel.

One wheel per (engine, variant): distribution ``harness-binding-<engine>-<variant>``,
import package ``harness_<engine>_<variant>`` carrying the artifact's libraries in
``lib/`` and an ``identity.json`` (pin, variant, ABI fingerprint) for the handshake.
The wheel registers itself in the ``harness.bindings`` entry-point group.

The binding's ``CMakeLists.txt`` and sources are code of the recipe (README "Trust model"). Of a
binding's directory (:class:`BindingDirs`) the wheel build writes only ``build/`` (for an untrusted
recipe, the sandbox's one writable directory); the host writes the staged package, the log and the
stamp beside it, and takes the wheel out of ``build/`` through the confined accessor. Every wheel is
checked (:func:`harness.binding.contents.check_wheel`) before it is stamped, installed or unpacked;
an untrusted recipe's is never installed into this Python, only unpacked for ``$HARNESS_BINDING_PATH``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from harness.binding.contents import ENTRY_POINT_GROUP, check_wheel
from harness.build.cmake import MANIFEST, read_manifest, trust_key
from harness.core import paths, progress
from harness.core.errors import BindingError, ConfigError, SubprocessError
from harness.core.pyexec import python_argv
from harness.core.types import EngineSpec

IDENTITY = "identity.json"
#: The most one file of a binding's sources is read to hash it.
SOURCE_LIMIT = 64 << 20


@dataclass(frozen=True, kw_only=True)
class BindingBuild:
    wheel: Path
    package: str
    built: bool
    installed: bool
    seconds: float
    key: str = ""
    """What the wheel was built from (module source, artifact, Python, ABI): its identity's ``key``."""
    site: Path | None = None
    """An untrusted recipe's binding, asked to be installed: where it was unpacked instead of into this
    Python (a directory for ``$HARNESS_BINDING_PATH``)."""


@dataclass(frozen=True)
class BindingDirs:
    """Where one binding's files are (:func:`binding_root`). Only :attr:`build` is written by the wheel
    build; the rest are the host's own and never shown writable to it."""

    root: Path

    @property
    def build(self) -> Path:
        """CMake's build dir and pip's wheel output: written by the build (read through ``Tree``)."""
        return self.root / "build"

    @property
    def staging(self) -> Path:
        """The package and ``pyproject.toml`` the host stages: read-only to the build."""
        return self.root / "staging"

    @property
    def dist(self) -> Path:
        """The wheel, copied out of :attr:`build` and checked."""
        return self.root / "dist"

    @property
    def site(self) -> Path:
        """The wheel unpacked (:func:`unpacked_binding`)."""
        return self.root / "site"

    @property
    def log(self) -> Path:
        return self.root / "build.log"

    @property
    def stamp(self) -> Path:
        return self.root / "stamp.json"


def package_name(engine: str, variant: str) -> str:
    return "harness_" + re.sub(r"[^a-z0-9]+", "_", f"{engine}_{variant}".lower()).strip("_")


def dist_name(engine: str, variant: str) -> str:
    return f"harness-binding-{engine}-{variant}".replace("_", "-").replace(".", "-")


def wheel_version(pin: str) -> str:
    """The wheel's PEP 440 version for a pin: the pin itself when it is one (``0.3.36``), else a
    local version naming it (a commit pin ``d85906ae5896`` -> ``0+d85906ae5896``)."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(pin)
    except InvalidVersion:
        return "0+" + re.sub(r"[^A-Za-z0-9.]+", ".", pin).strip(".")
    return pin


def _tree_hash(root: Path) -> str:
    """The sources under ``root``: each regular file's path and sha256, each link's path and text (a
    link is never followed: the sandbox shows it as a link), every read bounded; a FIFO or device is
    refused (:class:`~harness.sandbox.confined.ConfinementError`)."""
    from harness.sandbox.confined import Tree

    tree = Tree(root, what="binding sources")
    h = hashlib.sha256()
    for rel, entry in tree.walk():
        if "__pycache__" in rel.split("/"):
            continue
        if entry.kind == "file":
            h.update(f"{rel}\0{tree.sha256(rel, limit=SOURCE_LIMIT)}\n".encode())
        elif entry.kind == "link":
            h.update(f"{rel}\0-> {tree.readlink(rel)}\n".encode())
        elif entry.kind == "other":
            tree.open_file(rel)  # refuses it, naming what it is
    return h.hexdigest()


def _pyproject(engine: EngineSpec, variant: str, package: str, source_dir: Path, build_dir: Path,
               manifest: dict[str, Any]) -> str:
    defines = {
        "HARNESS_ARTIFACT": str(Path(manifest["_path"])),
        "HARNESS_PACKAGE": package,
        "HARNESS_PIN": engine.pin,
        "HARNESS_VARIANT": variant,
        "HARNESS_ABI_FINGERPRINT": str(manifest.get("abi_fingerprint", "")),
        "HARNESS_BUILD_NUMBER": str(engine.upstream.get("build", 0)),
    }
    lines = [
        "[build-system]",
        'requires = ["scikit-build-core>=0.10", "pybind11>=2.12"]',
        'build-backend = "scikit_build_core.build"',
        "",
        "[project]",
        f'name = "{dist_name(engine.name, variant)}"',
        f'version = "{wheel_version(engine.pin)}"',
        f'description = "harness {engine.name} binding, {variant} variant"',
        'requires-python = ">=3.11"',
        "",
        f'[project.entry-points."{ENTRY_POINT_GROUP}"]',
        f'"{engine.name}-{variant}" = "{package}"',
        "",
        "[tool.scikit-build]",
        f'cmake.source-dir = "{source_dir}"',
        f'build-dir = "{build_dir}"',
        f'wheel.packages = ["{package}"]',
        'cmake.build-type = "Release"',
        "",
        "[tool.scikit-build.cmake.define]",
        *[f'{k} = "{v}"' for k, v in defines.items()],
    ]
    return "\n".join(lines) + "\n"


_INIT = '''"""harness {engine} binding, {variant} variant (generated by harness build-binding)."""

import json as _json
from pathlib import Path as _Path

IDENTITY = _json.loads((_Path(__file__).parent / "identity.json").read_text())
LIB_DIR = _Path(__file__).parent / "lib"
'''


def _copy_libs(artifact: Path, dest: Path) -> None:
    """Copy the artifact's libraries, turning symlinks into files (wheels hold no links)."""
    dest.mkdir(parents=True)
    for src in sorted((artifact / "lib").iterdir()):
        shutil.copy2(src.resolve(), dest / src.name)


def installed_identity(package: str) -> dict[str, Any] | None:
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    ident = Path(next(iter(spec.submodule_search_locations))) / IDENTITY
    return dict(json.loads(ident.read_text())) if ident.is_file() else None


def binding_source(engine: EngineSpec) -> Path:
    """``engines/<e>/binding/``: the CMake project of the engine's pybind11 module.

    A recipe from history committed before the folder had that name holds the same project under
    its earlier name: the one folder of the engine with a ``CMakeLists.txt`` (its descriptor's
    ``abi.used_from`` names the sources below it, so that recipe's ABI check reads the same files).
    """
    source = engine.root / "binding"
    if source.is_dir() or not engine.recipe_commit:
        return source
    projects = sorted(d for d in engine.root.iterdir() if (d / "CMakeLists.txt").is_file())
    return projects[0] if len(projects) == 1 else source


def _holds(outer: str, inner: str) -> bool:
    """Whether ``inner`` is ``outer`` or below it (lexically; both absolute and normalized)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _private_dirs(*more: Path) -> list[str]:
    """What no bind may show or hold: ``$HOME`` and the harness cache (as named and resolved), and ``more``."""
    found = [Path.home(), paths.cache_root(), *more]
    return list(dict.fromkeys(p for d in found for p in (os.path.normpath(d), os.path.realpath(d))))


def shared_source(engine: EngineSpec, source_dir: Path) -> Path | None:
    """``engines/_shared`` as the binding's CMake project reaches it (``../../_shared`` of its folder),
    resolved, or None when there is none. The binding's folder must resolve inside the engine's folder
    and ``_shared`` inside the recipe's project (the folder holding ``engines/``), never to ``$HOME``,
    the cache or above them: the build is shown both, and a link to ``/etc/ssl`` would show the host's
    (ConfigError)."""
    folder = os.path.realpath(engine.root)
    project = os.path.dirname(os.path.dirname(folder))
    source = os.path.realpath(source_dir)
    if not _holds(folder, source):
        msg = (f"{source_dir} leads to {source}, outside the engine's folder {folder}: a binding's CMake "
               "project lives in the recipe. Make binding/ a directory of the engine's folder")
        raise ConfigError(msg)
    shared = os.path.join(os.path.dirname(os.path.dirname(source)), "_shared")
    if not os.path.lexists(shared):
        return None
    real = os.path.realpath(shared)
    private = [p for p in _private_dirs() if _holds(real, p)]
    if not _holds(project, real) or private or not os.path.isdir(real):
        why = (f"it shows {private[0]}" if private else "not a directory" if _holds(project, real)
               else f"outside the recipe's project {project}")
        msg = (f"{shared} leads to {real} ({why}): engines/_shared is a directory of the recipe's own "
               "project. Make it a directory there (or a link to one), or remove it")
        raise ConfigError(msg)
    return Path(real)


def _exact_binds(named: list[tuple[str, str, bool]], *, private: list[str]) -> list[str]:
    """bwrap arguments showing each ``(what, path, required)`` read-only as itself: at its resolved place
    and, when it is named through a link, at the path as named, never a parent (a venv at ``~/.venv``
    shows ``~/.venv``, not ``$HOME``). A path already shown by another, or under the system dirs the
    sandbox shows anyway, is skipped. One that is, or holds, a ``private`` dir is left out, or is
    BindingError when ``required``."""
    from harness.sandbox.bwrap import SYSTEM_DIRS

    system = ["/" + d for d in SYSTEM_DIRS]
    binds: list[tuple[str, str]] = []
    for what, path, required in named:
        if not os.path.isabs(path) or not os.path.exists(path):
            continue
        real, as_named = os.path.realpath(path), os.path.normpath(path)
        held = [p for p in private for q in (real, as_named) if _holds(q, p)]
        if held and required:
            msg = (f"{what} {path} is, or holds, {held[0]}: the binding's sandbox would show all of it. Use a "
                   "Python (a virtual environment) in a folder of its own, outside the harness cache")
            raise BindingError(msg)
        for src, dest in [] if held else dict.fromkeys([(real, real), (real, as_named)]):
            if any(_holds(d, dest) for s, d in binds if s == d) or any(_holds(s, dest) for s in system):
                continue
            binds.append((src, dest))
    binds.sort(key=lambda b: (b[1].count("/"), b[1]))
    return [a for src, dest in binds for a in ("--ro-bind", src, dest)]


def _python_named() -> list[tuple[str, str, bool]]:
    """What pip and a compile of a Python extension read of this Python: its prefixes, its ``sysconfig``
    dirs (stdlib, site-packages, headers), the interpreter and pybind11's dirs (each required), and every
    other ``sys.path`` entry (a user site, a ``.pth``'s dir, ``$PYTHONPATH``)."""
    import sysconfig

    from harness.sandbox.bwrap import python_paths

    prefixes = (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)
    named = [("this Python's prefix", p, True) for p in prefixes]
    named += [(f"this Python's {k} dir", v, True) for k, v in sysconfig.get_paths().items()]
    named += [(f"this Python's {k}", v, True) for k, v in python_paths().items()]
    named += [("the sys.path entry", p, False) for p in sys.path if p]
    return named


def _in_sandbox(engine: EngineSpec, argv: list[str], env: dict[str, str], *, source_dir: Path, artifact: Path,
                root: Path) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` of the wheel build: as given for a trusted recipe; for an untrusted one, in the
    build sandbox (``harness.sandbox.bwrap``), since its ``binding/`` CMake project and sources are code.
    The build writes only ``build/`` of the binding's directory ``root``; it is shown read-only, each
    exactly as itself: the binding sources, ``engines/_shared`` (resolved inside the recipe), the staged
    package, the artifact, and this Python (its prefix and site-packages, never their parent); no
    network, nothing else of the home directory or the cache."""
    from harness.engine.trust import is_trusted

    if is_trusted(engine):
        return argv, env
    from harness.core import host as hostmod
    from harness.sandbox.bwrap import sandbox_for

    dirs = BindingDirs(root)
    dirs.build.mkdir(parents=True, exist_ok=True)
    tree = Path(os.path.realpath(source_dir))
    shared = shared_source(engine, source_dir)
    sandbox = sandbox_for(engine, tree=tree, build_dir=dirs.build, host=hostmod.probe(), env=env, plugin_defines={})
    if sandbox.active:
        named = [*_python_named(), ("the staged package", str(dirs.staging), True), ("the artifact", str(artifact), True)]
        binds = _exact_binds(named, private=_private_dirs(dirs.build))
        if shared is not None:  # where ../../_shared of the binding's folder is, showing what it resolves to
            binds += ["--ro-bind", str(shared), str(tree.parent.parent / "_shared")]
        sandbox = dataclasses.replace(sandbox, args=(*sandbox.args, *binds))
    # the launcher is the harness's choice (build_binding sets it), kept inside as it is on the host
    return sandbox.command(argv, env, also_keep=("CMAKE_CXX_COMPILER_LAUNCHER",))


def binding_root(engine: EngineSpec, variant: str) -> Path:
    """``<cache>/binding/<engine>-<pin>-<variant>``; a recipe from history adds ``@<commit12>`` (as its
    artifact does), so building it never replaces the working tree's wheel. An untrusted recipe's is
    under ``untrusted-<hash12>/`` (:func:`~harness.build.cmake.trust_key`): it never shares a path with
    a trusted recipe of the same name and pin, nor with another folder's."""
    suffix = f"@{engine.recipe_commit[:12]}" if engine.recipe_commit else ""
    return paths.cache_root() / "binding" / trust_key(engine) / f"{engine.name}-{engine.pin}-{variant}{suffix}"


def _lock(root: Path, what: str) -> FileLock:
    return FileLock(str(paths.locks_dir() / f"{what}-{root.parent.name}-{root.name}.lock"))


def _fresh_dir(path: Path) -> None:
    """An empty directory at ``path``; a link or file there (a build left it) is removed, not followed."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def _stage(engine: EngineSpec, variant: str, package: str, identity: dict[str, Any], source_dir: Path,
           artifact: Path, manifest: dict[str, Any], dirs: BindingDirs) -> None:
    """The package (``__init__.py``, identity, the artifact's libraries) and ``pyproject.toml`` pip builds."""
    _fresh_dir(dirs.staging)
    pkg = dirs.staging / package
    pkg.mkdir()
    (pkg / "__init__.py").write_text(_INIT.format(engine=engine.name, variant=variant))
    (pkg / IDENTITY).write_text(json.dumps(identity, indent=2) + "\n")
    _copy_libs(artifact, pkg / "lib")
    shutil.copy2(artifact / MANIFEST, pkg / "lib" / MANIFEST)
    source = Path(os.path.realpath(source_dir))  # where the sandbox shows it
    (dirs.staging / "pyproject.toml").write_text(
        _pyproject(engine, variant, package, source, dirs.build / "cmake-build", manifest))


def _take_wheel(dirs: BindingDirs, dist: str) -> Path:
    """Copy the one wheel of ``dist`` pip wrote into ``build/wheels`` to ``dist/``, through the confined
    accessor (no link followed, a regular file, bounded)."""
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    from harness.sandbox.confined import Tree

    def ours(name: str) -> bool:
        try:
            return parse_wheel_filename(name)[0] == canonicalize_name(dist)
        except InvalidWheelFilename:
            return False

    tree = Tree(dirs.build, what="binding build dir")
    found = [e.name for e in tree.scandir("wheels") if ours(e.name)]
    if len(found) != 1:
        msg = (f"pip wheel left {len(found)} wheels of {dist} in {dirs.build / 'wheels'} ({', '.join(found)}), "
               f"expected one; see {dirs.log}")
        raise BindingError(msg)
    _fresh_dir(dirs.dist)
    tree.copy_to(f"wheels/{found[0]}", dirs.dist / found[0])
    return dirs.dist / found[0]


def _build_wheel(engine: EngineSpec, variant: str, package: str, identity: dict[str, Any], source_dir: Path,
                 artifact: Path, manifest: dict[str, Any], dirs: BindingDirs) -> Path:
    """Stage, run ``pip wheel`` (in the sandbox for an untrusted recipe), take the wheel out."""
    from harness.sandbox.confined import write_private

    _stage(engine, variant, package, identity, source_dir, artifact, manifest, dirs)
    dirs.build.mkdir(parents=True, exist_ok=True)
    _fresh_dir(dirs.build / "wheels")
    argv = [*python_argv("-m", "pip"), "wheel", "--no-build-isolation", "--no-deps",
            "--disable-pip-version-check", "-w", str(dirs.build / "wheels"), str(dirs.staging)]
    env = dict(os.environ)
    ccache = shutil.which("ccache")
    if ccache:
        env.setdefault("CMAKE_CXX_COMPILER_LAUNCHER", ccache)
    argv, env = _in_sandbox(engine, argv, env, source_dir=source_dir, artifact=artifact, root=dirs.root)
    with FileLock(paths.compile_lock_path()), progress.spinner(f"build binding {engine.name} {variant}"):
        r = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    write_private(dirs.log, r.stdout + r.stderr)
    if r.returncode:
        raise SubprocessError(argv, r.returncode, r.stdout + r.stderr, hint=f"full log: {dirs.log}")
    return _take_wheel(dirs, dist_name(engine.name, variant))


def build_binding(engine: EngineSpec, artifact: Path, *, install: bool = True, force: bool = False) -> BindingBuild:
    """Build (once) and check the binding wheel for ``artifact``, then install it when needed: into this
    Python for a trusted recipe; an untrusted recipe's is unpacked instead (:attr:`BindingBuild.site`)."""
    from harness.engine.trust import is_trusted
    from harness.sandbox.confined import write_private

    t0 = time.perf_counter()
    if not (artifact / MANIFEST).is_file():
        msg = f"{artifact} is not an artifact (no {MANIFEST}); run harness build {engine.name} first"
        raise BindingError(msg)
    manifest = read_manifest(artifact)
    manifest["_path"] = str(artifact)
    variant = str(manifest["variant"])
    source_dir = binding_source(engine)
    if not (source_dir / "CMakeLists.txt").is_file():
        msg = f"engine {engine.name} has no binding source at {source_dir}"
        raise BindingError(msg)
    shared = shared_source(engine, source_dir)
    package = package_name(engine.name, variant)
    key = hashlib.sha256(json.dumps({"src": _tree_hash(source_dir), "shared": _tree_hash(shared) if shared else None,
                                     "artifact": manifest["build_key"], "py": sys.version_info[:2],
                                     "abi": manifest.get("abi_fingerprint")}, sort_keys=True).encode()).hexdigest()
    dirs = BindingDirs(binding_root(engine, variant))
    identity = {"engine": engine.name, "pin": engine.pin, "variant": variant, "platform": manifest.get("platform"),
                "abi_fingerprint": manifest.get("abi_fingerprint"), "build_number": engine.upstream.get("build"),
                "artifact_build_key": manifest.get("build_key"), "key": key}
    with _lock(dirs.root, "binding"):
        wheel = None
        stamp = dirs.stamp
        if stamp.is_file() and not force:
            data = json.loads(stamp.read_text())
            name = str(data.get("wheel", ""))
            if data.get("key") == key and name == Path(name).name and (dirs.dist / name).is_file():
                wheel = dirs.dist / name
        built = wheel is None
        if wheel is None:
            wheel = _build_wheel(engine, variant, package, identity, source_dir, artifact, manifest, dirs)
        check_wheel(wheel, dist=dist_name(engine.name, variant), package=package)
        if built:
            write_private(stamp, json.dumps({"key": key, "wheel": wheel.name}))
    installed, site = False, None
    if install and not is_trusted(engine):
        site = _unpack(wheel, package, key)
    elif install and (installed_identity(package) or {}).get("key") != key:
        argv = [*python_argv("-m", "pip"), "install", "--no-deps", "--force-reinstall",
                "--disable-pip-version-check", "-q", str(wheel)]
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
        if r.returncode:
            raise SubprocessError(argv, r.returncode, r.stdout + r.stderr)
        installed = True
    return BindingBuild(wheel=wheel, package=package, built=built, installed=installed,
                        seconds=time.perf_counter() - t0, key=key, site=site)


UNPACKED_STAMP = ".harness-unpacked.json"


def unpacked_binding(engine: EngineSpec, artifact: Path) -> Path:
    """The binding of ``artifact`` built from ``engine``'s recipe and unpacked, not installed: a
    directory for ``$HARNESS_BINDING_PATH`` (``<root>/site/<package>/``). How a worker process runs
    another pin's binding while this environment keeps its own installed (one package name per
    process: :func:`harness.runtime.discovery.import_core`). Unpacked once per wheel key."""
    b = build_binding(engine, artifact, install=False)
    return _unpack(b.wheel, b.package, b.key)


def _unpack(wheel: Path, package: str, key: str) -> Path:
    """``package/`` of ``wheel`` (checked by :func:`build_binding`) in the ``site/`` of its binding's dir."""
    import zipfile

    dirs = BindingDirs(wheel.parent.parent)
    site = dirs.site
    with _lock(dirs.root, "unpack"):
        stamp = site / UNPACKED_STAMP
        if stamp.is_file() and json.loads(stamp.read_text()).get("key") == key and (site / package).is_dir():
            return site
        tmp = dirs.root / ".site-staging"
        _fresh_dir(tmp)
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.startswith(f"{package}/")]
            if not members:
                msg = f"{wheel} holds no package {package}/; rebuild it (harness build-binding)"
                raise BindingError(msg)
            zf.extractall(tmp, members)
        for lib in tmp.rglob("*.so*"):
            lib.chmod(0o755)
        (tmp / UNPACKED_STAMP).write_text(json.dumps({"key": key, "wheel": str(wheel)}) + "\n")
        shutil.rmtree(site, ignore_errors=True)
        tmp.rename(site)
    return site
