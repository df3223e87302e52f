"""The binding's whole compile surface, before any build: every translation unit compiled syntax-only.

The C surface (:mod:`harness.abi.check`) sees the engine's C headers. A binding also compiles against
C++ APIs (llama.cpp's ``common``: ``chat.h``, ``sampling.h``, ``common.h``), which change every few
weeks and are where pin moves break. This check answers "does the binding still fit?" in seconds:

1. a *stand-in artifact* is laid out from the pin's patched tree exactly as the build would collect
   it (the descriptor's ``artifacts.include`` entries, ``DIR:GLOB`` keeping paths below ``DIR``), with
   links instead of copies and no libraries;
2. the binding's own CMake project is configured against it (``HEADERS_ONLY=ON``: no library
   is looked for) with ``CMAKE_EXPORT_COMPILE_COMMANDS``, so the include dirs, defines and language
   standard are the binding's own, not a copy of them;
3. each translation unit of ``compile_commands.json`` is compiled with ``-fsyntax-only`` (in
   parallel); every error is reported with its binding file:line and the upstream declaration it met
   (the compiler's notes inside the pinned tree, else the declaration of the class it names), once
   however many units hit it (naming them), with the ``#include`` chain that led into an upstream header
   (:mod:`harness.abi.diagnostics`);
4. a unit that stops at a header missing from the stand-in artifact but present in the pinned tree is
   the descriptor's gap, not the binding's: the check names the ``artifacts.include`` entry that
   collects it, and compiles the unit again with that header's directory of the tree added to its
   include path, so the fatal error hides none of the unit's real errors.

The result is stamped by the hash of everything it read (binding sources, the collected headers,
compiler, Python and pybind11): a second run with nothing changed compiles nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.abi.diagnostics import (
    CompileProblem,
    TreeFiles,
    descriptor_hint,
    locate_missing,
    merge,
    nowhere_hint,
    parse_diagnostics,
    shown_path,
)
from harness.core import paths, progress
from harness.core.errors import (
    AbiError,
    ArtifactIncludeError,
    BindingSurfaceError,
    ConfigError,
    HostError,
    SubprocessError,
)
from harness.core.inputs import limit as input_limit
from harness.sandbox.confined import ConfinementError, Entry, Tree

if TYPE_CHECKING:
    from harness.core.types import EngineSpec

#: Bumped when what the stamp holds changes shape.
STAMP_VERSION = 2
#: How often one unit is compiled again with one more directory of the pinned tree on its include path, each time
#: it stops at a header the stand-in artifact lacks and the tree has.
MAX_RETRIES = 4


@dataclass(frozen=True, kw_only=True)
class BindingCheck:
    """What compiling the binding syntax-only against a pin's headers found."""

    engine: str
    pin: str
    units: tuple[str, ...]
    problems: tuple[CompileProblem, ...] = ()
    seconds: float = 0.0
    cached: bool = False
    compiler: str = ""
    key: str = ""
    descriptor: str = ""
    """The engine's descriptor, as messages name it (where ``artifacts.include`` is)."""
    log: tuple[str, ...] = field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def missing_from_artifact(self) -> tuple[CompileProblem, ...]:
        """The headers the pinned tree has and the stand-in artifact lacks: the descriptor's to fix."""
        return tuple(p for p in self.problems if p.artifact_include)

    @property
    def binding_errors(self) -> tuple[CompileProblem, ...]:
        """The rest: the binding's to fix."""
        return tuple(p for p in self.problems if not p.artifact_include)

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["problems"] = [asdict(p) for p in self.problems]
        d.pop("log")
        d["ok"] = self.ok
        d["seconds"] = round(self.seconds, 3)
        d["artifact_include"] = list(dict.fromkeys(p.artifact_include for p in self.missing_from_artifact))
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], **changes: Any) -> BindingCheck:
        fields = {k: v for k, v in d.items() if k not in ("ok", "artifact_include")}
        fields.update(units=tuple(d["units"]), problems=tuple(CompileProblem.from_json(p) for p in d["problems"]))
        return cls(**{**fields, **changes})


def include_members(spec: EngineSpec, tree: Path) -> Iterator[tuple[Path, Path]]:
    """``(source file, path below include/)`` for every header the descriptor's ``artifacts.include``
    puts in an artifact (``DIR:GLOB`` keeps paths below ``DIR``; a bare glob flattens). Sources that
    resolve outside the tree are skipped: the build refuses them, and the check never reads the host."""
    top = os.path.realpath(tree)
    for entry in spec.artifacts.get("include", ()):
        base, _, pattern = str(entry).rpartition(":")
        if Path(pattern).is_absolute() or ".." in Path(base).parts or ".." in Path(pattern).parts:
            msg = (f"{spec.root / 'engine.yaml'}:artifacts.include: {entry!r} must be a relative glob inside the "
                   "tree (no '..', not absolute)")
            raise ConfigError(msg)
        root = tree / base if base else tree
        for src in sorted(root.glob(pattern)):
            real = os.path.realpath(src)
            if not (real == top or real.startswith(top + os.sep)) or not os.path.isfile(real):
                continue
            yield src, (src.relative_to(root) if base else Path(src.name))


def _read_all(files: list[tuple[Tree, str, str]]) -> str:
    """The hash of ``(tree, path in it, name)`` files: each name and its bytes, in name order, read through the
    confined accessor (no link followed, regular files only, at most the source limit)."""
    h = hashlib.sha256()
    limit = input_limit("source")
    for tree, rel, name in sorted(files, key=lambda x: x[2]):
        try:
            data = tree.read_bytes(rel, limit=limit)
        except ConfinementError as e:
            raise AbiError(str(e)) from None
        except OSError as e:
            msg = f"{tree.root / rel}: cannot read it ({e.strerror or e})"
            raise AbiError(msg) from None
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def _recipe_files(tree: Tree, top: str, prefix: str) -> list[tuple[Tree, str, str]]:
    """Every regular file under ``top`` of ``tree`` (``__pycache__`` aside), named ``prefix/<path below top>``;
    :class:`AbiError` for a link, a FIFO, a device or a socket there, and for a file over the source limit."""
    kind = tree.kind(top)
    if kind is None:
        return []
    limit = input_limit("source")
    found = [(top, Entry(top, kind, 0))] if kind != "dir" else list(tree.walk(top))
    out = []
    for rel, entry in found:
        if entry.kind == "dir" or "__pycache__" in rel.split("/"):
            continue
        why = ("is a symbolic link (it may lead to any file of the host): put the file itself there"
               if entry.kind == "link" else "is not a regular file (a FIFO, a device or a socket)"
               if entry.kind != "file" else f"is {entry.size} bytes, over the {limit}-byte limit for a source file"
               if entry.size > limit else "")
        if why:
            msg = (f"{tree.root / rel} {why}. The binding's sources are read as regular files inside the recipe, "
                   "never through a link")
            raise AbiError(msg)
        out.append((tree, rel, f"{prefix}{rel[len(top):]}"))
    return out


def binding_sources_hash(source_dir: Path) -> str:
    """The hash of the binding's sources: every file of ``source_dir`` (``binding/``) and of the engines'
    ``_shared/``, by name and content. Nothing is followed or read whole past its limit: a link (to
    ``/proc/self/pagemap``, to a file of the host), a FIFO, a device or a file over the source limit there is an
    :class:`AbiError` naming it (the sources are the recipe's: an untrusted one's may point anywhere)."""
    files = _recipe_files(Tree(source_dir.parent, what="the recipe"), source_dir.name, "binding")
    return _read_all(files + _recipe_files(Tree(source_dir.parent.parent, what="the recipes"), "_shared", "_shared"))


def _headers_hash(tree: Path, headers: list[tuple[Path, str]]) -> str:
    """The hash of the headers the stand-in artifact shows (``(file in the tree, path below include/)``), each
    read inside the tree (a link in it followed only while it stays inside)."""
    inside = Tree(tree, what="the patched tree")
    files = []
    for src, name in headers:
        try:
            files.append((inside, inside.resolve(src.relative_to(tree)), name))
        except ConfinementError as e:
            raise AbiError(str(e)) from None
    return _read_all(files)


def _tool_version(argv: list[str]) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (r.stdout or r.stderr).splitlines()[0] if (r.stdout or r.stderr) else "?"


def _stand_in(spec: EngineSpec, tree: Path, dest: Path) -> dict[str, str]:
    """Lay out ``dest`` as the artifact's headers would be (links into the tree); returns the names map."""
    include = dest / "include"
    include.mkdir(parents=True)
    names: dict[str, str] = {}
    for src, rel in include_members(spec, tree):
        target = include / rel
        if target.exists() or target.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(os.path.realpath(src))
        names[rel.as_posix()] = src.relative_to(tree).as_posix()
    # Empty stand-ins for the libraries a binding's CMake project looks for: a recipe from history predates
    # HEADERS_ONLY and still calls find_library (which only needs the name); nothing is linked.
    lib = dest / "lib"
    lib.mkdir()
    stubs = {f"lib{t}.so" for t in spec.targets}
    stubs |= {g.replace("*", "") for g in spec.artifacts.get("lib", ()) if g.startswith("lib") and g.count("*") == 1
              and g.endswith(".so*")}
    for name in sorted(stubs):
        if re.fullmatch(r"lib[\w.+-]+\.so", name):
            (lib / name).write_bytes(b"")
    (dest / "manifest.json").write_text(json.dumps({"stand_in": "headers only (harness abi check)",
                                                    "engine": spec.name, "pin": spec.pin}) + "\n")
    return names


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def _host_runner(argv: list[str], *, env: dict[str, str], cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=False)


def runner_for(spec: EngineSpec, tree: Path, work: Path, source_dir: Path) -> Runner:
    """How the check runs CMake and the compiler: on the host for a trusted recipe; in the build sandbox for an
    untrusted one (its CMakeLists.txt is code, and a unit that ``#include``s a host file would print it in the
    diagnostics): the patched tree, the binding sources and the Python/pybind11 headers read-only, ``work``
    writable, nothing else of the home directory or the cache (README "Trust model")."""
    from harness.engine.trust import is_trusted

    if is_trusted(spec):
        return _host_runner
    from harness.binding.wheel import shared_source
    from harness.core import host as hostmod
    from harness.sandbox.bwrap import python_paths, sandbox_for

    shared = shared_source(spec, source_dir)  # binding/ and _shared resolve inside the recipe (ConfigError)
    shown = {**python_paths(), "binding": str(source_dir.resolve()), **({"shared": str(shared)} if shared else {})}
    sandbox = sandbox_for(spec, tree=tree.resolve(), build_dir=work, host=hostmod.probe(), env=compile_env(),
                          plugin_defines={k: v for k, v in shown.items() if os.path.exists(v)})

    def run(argv: list[str], *, env: dict[str, str], cwd: str | None = None) -> subprocess.CompletedProcess[str]:
        full, full_env = sandbox.command(argv, env)
        if sandbox.active and cwd:
            full = [*full[:full.index("--")], "--chdir", cwd, *full[full.index("--"):]]
        return subprocess.run(full, capture_output=True, text=True, env=full_env, cwd=cwd, check=False)

    return run


def _configure(source_dir: Path, artifact: Path, build: Path, env: dict[str, str],
               run: Runner = _host_runner) -> list[dict[str, Any]]:
    cmake = shutil.which("cmake")
    if cmake is None:
        msg = "cmake is needed to read the binding's compile commands; install the build extra (pip install 'harness[build]')"
        raise HostError(msg)
    import pybind11

    argv = [cmake, "-S", str(source_dir), "-B", str(build), f"-DHARNESS_ARTIFACT={artifact}",
            "-DHARNESS_PACKAGE=harness_syntax_check", "-DHEADERS_ONLY=ON",
            "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DPython_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"]
    if shutil.which("ninja"):
        argv += ["-G", "Ninja"]
    r = run(argv, env=env)
    if r.returncode:
        raise SubprocessError(argv, r.returncode, r.stdout + r.stderr,
                              hint="the binding's CMake project must configure against a headers-only stand-in "
                              "(HEADERS_ONLY=ON: skip find_library and linking)")
    # CMake ran the recipe's CMakeLists.txt: its build dir is read through the confined accessor
    written = Tree(build, what="the binding's compile-commands build")
    if written.kind("compile_commands.json") is None:
        msg = f"CMake wrote no compile_commands.json for {source_dir}; the binding has no compiled sources"
        raise BindingSurfaceError(msg)
    try:
        entries = json.loads(written.read_text("compile_commands.json"))
    except ConfinementError as e:
        raise BindingSurfaceError(str(e)) from None
    except ValueError as e:
        msg = f"{build / 'compile_commands.json'} is not JSON ({e}); CMake writes it with CMAKE_EXPORT_COMPILE_COMMANDS"
        raise BindingSurfaceError(msg) from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "file" in e for e in entries):
        msg = f"{build / 'compile_commands.json'} is not a list of compile commands"
        raise BindingSurfaceError(msg)
    return entries


def _syntax_argv(entry: dict[str, Any]) -> list[str]:
    argv = list(entry["arguments"]) if "arguments" in entry else shlex.split(entry["command"])
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith("-o"):
            continue
        out.append(a)
    # A launcher (ccache) is not wanted for a check that writes nothing.
    if out and Path(out[0]).name == "ccache":
        out = out[1:]
    return [*out, "-fsyntax-only"]


@dataclass(frozen=True, kw_only=True)
class StandIn:
    """A headers-only stand-in artifact of a pin, and the binding's compile commands against it."""

    artifact: Path
    include: Path
    names: dict[str, str]
    """Path below ``include/`` -> its path in the pinned tree."""
    entries: tuple[dict[str, Any], ...]
    run: Runner = _host_runner
    """Runs a command of the check (the sandbox's, for an untrusted recipe)."""


def compile_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_C_COMPILER_LAUNCHER")}
    env["LC_ALL"] = "C"  # the compiler's messages in plain ASCII quotes, whatever the user's locale
    return env


@contextmanager
def stand_in(spec: EngineSpec, tree: Path, source_dir: Path, *, within: Path | None = None) -> Iterator[StandIn]:
    """Lay out the stand-in artifact of ``tree`` in a scratch dir, configure the binding against it; removed after."""
    parent = within or paths.cache_root() / "binding-check" / spec.name
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stand-in-", dir=parent) as tmp:
        work = Path(tmp)
        names = _stand_in(spec, tree, work / "artifact")
        run = runner_for(spec, tree, work, source_dir)
        entries = _configure(source_dir, work / "artifact", work / "build", compile_env(), run)
        yield StandIn(artifact=work / "artifact", include=work / "artifact" / "include", names=names,
                      entries=tuple(entries), run=run)


def check_binding(spec: EngineSpec, tree: Path, *, source_dir: Path | None = None, force: bool = False) -> BindingCheck | None:
    """Compile every translation unit of ``spec``'s binding syntax-only against the patched ``tree``.

    None when the engine has no binding (a build/ABI-only engine). Never raises for compile errors:
    they are the result's ``problems`` (:func:`raise_for` turns them into :class:`BindingSurfaceError`).
    """
    from harness.binding.wheel import binding_source
    from harness.engine.trust import is_trusted

    source_dir = source_dir or binding_source(spec)
    if not (source_dir / "CMakeLists.txt").is_file():
        return None
    t0 = time.perf_counter()
    headers = [(src, rel.as_posix()) for src, rel in include_members(spec, tree)]
    compiler = os.environ.get("CXX") or shutil.which("c++") or "c++"
    import pybind11

    key = hashlib.sha256(json.dumps({
        "v": STAMP_VERSION, "binding": binding_sources_hash(source_dir), "headers": _headers_hash(tree, headers),
        "cxx": _tool_version([compiler, "--version"]), "py": sys.version_info[:2], "pybind11": pybind11.__version__,
        "sandboxed": not is_trusted(spec),  # what a unit can read differs in the sandbox
    }, sort_keys=True).encode()).hexdigest()
    # A unit retried with a directory of the tree also read headers the key does not cover: such a result fails
    # until the descriptor collects them, which changes the key.
    stamp = paths.cache_root() / "binding-check" / spec.name / f"{key[:32]}.json"
    if stamp.is_file() and not force:
        return BindingCheck.from_json(json.loads(stamp.read_text()), cached=True, pin=spec.pin,
                                      seconds=time.perf_counter() - t0)
    env = compile_env()
    files = TreeFiles(tree)
    descriptor = shown_path(str(spec.root / "engine.yaml"))
    with progress.spinner(f"binding {spec.name}: compile surface (syntax only)") as update, \
            stand_in(spec, tree, source_dir, within=stamp.parent) as si:
        update(f"{len(si.entries)} units")
        with ThreadPoolExecutor(max_workers=max(1, min(len(si.entries), os.cpu_count() or 1))) as pool:
            results = list(pool.map(lambda e: _compile_unit(e, si, env=env, files=files, descriptor=descriptor),
                                    si.entries))
    result = BindingCheck(engine=spec.name, pin=spec.pin, units=tuple(u for u, _, _ in results),
                          problems=merge(found for _, found, _ in results), seconds=time.perf_counter() - t0,
                          compiler=_tool_version([compiler, "--version"]), key=key, descriptor=descriptor,
                          log=tuple(log for _, _, log in results if log))
    stamp.write_text(json.dumps(result.as_json(), indent=1) + "\n")
    return result


def _compile_unit(entry: dict[str, Any], si: StandIn, *, env: dict[str, str], files: TreeFiles,
                  descriptor: str) -> tuple[str, list[CompileProblem], str]:
    """``(unit as shown, its problems, the compiler's words)`` for one translation unit. A unit that stops at a
    header the stand-in lacks and the pinned tree has is compiled again with that header's directory of the tree
    on its include path (up to :data:`MAX_RETRIES` times), so the errors behind the fatal one are found too."""
    unit = str(Path(entry.get("directory", ".")) / entry["file"])
    shown = shown_path(os.path.normpath(unit))
    argv = _syntax_argv(entry)
    added: list[Path] = []
    found: dict[tuple[str, int, int, str], CompileProblem] = {}
    logs: list[str] = []
    for attempt in range(MAX_RETRIES + 1):
        r = si.run([*argv[:-1], *(f"-I{d}" for d in added), argv[-1]], env=env, cwd=entry.get("directory"))
        logs.append(r.stderr)
        problems = parse_diagnostics(r.stderr, include=si.include, names=si.names, unit=unit, tree=files.root)
        if r.returncode and not problems:  # failed without a diagnostic we can read: keep its words
            problems = [CompileProblem(file=shown, line=0, column=0,
                                       message=(r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1])]
        retry: Path | None = None
        for p in problems:
            p = replace(p, units=(shown,), retried_with=tuple(os.path.relpath(d, files.root) for d in added))
            if p.missing_header:
                at = locate_missing(p, include=si.include, names=si.names, files=files)
                if at is None:
                    p = replace(p, hint=nowhere_hint(p.missing_header))
                else:
                    p = replace(p, artifact_include=at.entry, hint=descriptor_hint(at, descriptor=descriptor))
                    if at.include_dir not in added:
                        retry = at.include_dir
                    if at.include_dir in added or attempt == MAX_RETRIES:
                        p = replace(p, hint=f"{p.hint}. This unit's other errors are unknown until it is collected")
            found.setdefault((p.file, p.line, p.column, p.message), p)
        if retry is None:
            break
        added.append(retry)
    return shown, list(found.values()), "\n".join(log for log in logs if log)


def raise_for(result: BindingCheck) -> None:
    """:class:`BindingSurfaceError` listing each problem, when there are any; :class:`ArtifactIncludeError` when
    every one is a header the stand-in artifact lacks and the pinned tree has (the descriptor's to fix)."""
    if result.ok:
        return
    n = len(result.problems)
    lines = [
        f"the binding of {result.engine} does not compile against {result.pin}'s headers ({n} error{'s' if n != 1 else ''} "
        f"in {len(result.units)} translation units, syntax only, {result.seconds:.1f} s):",
        *(str(p) for p in result.problems),
    ]
    missing, real = result.missing_from_artifact, result.binding_errors
    descriptor = result.descriptor or f"engines/{result.engine}/engine.yaml"
    if missing:
        entries = ", ".join(f'"{e}"' for e in dict.fromkeys(p.artifact_include for p in missing))
        lines.append(f"{len(missing)} header{'s are' if len(missing) != 1 else ' is'} in the pinned tree but not "
                     f"collected into the artifact: add {entries} to `artifacts.include` in {descriptor} (the build "
                     "collects the artifact's headers by the same globs). The binding need not change for "
                     f"{'these' if len(missing) != 1 else 'it'}.")
    if real:
        other = "the other " if missing else ""
        lines.append(f"The binding must change (engines/{result.engine}/binding/) for {other}{len(real)} "
                     f"error{'s' if len(real) != 1 else ''}: these are source changes, not ABI differences to accept; "
                     f"`harness abi snapshot {result.engine}` cannot fix them.")
    lines.append(f"Re-run `harness abi check {result.engine}` after the edit (seconds, before any build).")
    raise (BindingSurfaceError if real else ArtifactIncludeError)("\n".join(lines))
