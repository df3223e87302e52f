"""The build stage: one patched tree + one matrix row -> one relocatable, stamped artifact."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pluggy
from filelock import FileLock

from harness.build import ccache, cmake_fileapi
from harness.build.matrix import buildability, engine_support, row_defines
from harness.core import paths, progress
from harness.core.errors import BuildError, HostError, UsageError
from harness.core.types import EngineSpec, HostInfo, PatchedTree, Variant
from harness.engine import trust
from harness.engine.confine import DEFINE_NAME, recipe_regex
from harness.engine.descriptor import with_current_build_data
from harness.sandbox import bwrap as sandbox
from harness.sandbox import confined

BUILD_STAMP = ".harness-build.json"
MANIFEST = "manifest.json"
MANIFEST_VERSION = 2


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    artifact: Path
    build_dir: Path
    built: bool
    seconds: float
    manifest: dict[str, Any]


def jobs() -> int:
    """``HARNESS_JOBS``, else the usable CPU count, else 2 (never 0 or 'unknown')."""
    env = os.environ.get("HARNESS_JOBS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 2


def toolchain_id(host: HostInfo) -> dict[str, str | None]:
    return {t: host.tool(t).version for t in ("cc", "c++", "cmake", "ninja", "nvcc") if host.tool(t).found}


def effective_defines(pm: pluggy.PluginManager, engine: EngineSpec, variant: Variant, host: HostInfo,
                      overrides: dict[str, str]) -> dict[str, str]:
    """engine base options < the row's intent in the engine's spelling < plugin defines < ``--define``
    overrides. Raises :class:`UsageError` when the engine does not map the row's intent."""
    defines = dict(engine.cmake.get("base", {}))
    defines.update(row_defines(engine, variant))
    for extra in pm.hook.harness_variant_configure(engine=engine, variant=variant, host=host):
        defines.update(extra or {})
    if host.tool("ccache").found and "CMAKE_C_COMPILER_LAUNCHER" not in overrides:
        defines["CMAKE_C_COMPILER_LAUNCHER"] = str(host.tool("ccache").path)
        defines["CMAKE_CXX_COMPILER_LAUNCHER"] = str(host.tool("ccache").path)
        if variant.platform == "cuda":
            defines["CMAKE_CUDA_COMPILER_LAUNCHER"] = str(host.tool("ccache").path)
    defines.update(overrides)
    return dict(sorted(defines.items()))


def build_key(engine: EngineSpec, tree: PatchedTree, variant: Variant, defines: dict[str, str]) -> str:
    """What the CMake configuration depends on: names the build dir. Trust is part of it (an untrusted
    recipe's build never shares a build dir with a trusted one's, nor with another folder's)."""
    untrusted = trust_key(engine)
    blob = json.dumps({"engine": engine.name, "pin": engine.pin, "source": engine.source.sha256 or engine.source.commit,
                       "series": tree.series_hash, "variant": variant.name, "defines": defines,
                       **({"trust": untrusted} if untrusted else {})}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def trust_key(engine: EngineSpec) -> str:
    """"" for a trusted recipe; ``untrusted-<hash12 of its folder and commit>`` for an untrusted one: the
    component every path an untrusted build writes carries, so it never writes a trusted one's."""
    if trust.is_trusted(engine):
        return ""
    where = f"{os.path.realpath(engine.root)}@{engine.recipe_commit}"
    return "untrusted-" + hashlib.sha256(where.encode()).hexdigest()[:12]


def row_targets(engine: EngineSpec, variant: Variant) -> list[str]:
    """The CMake targets of a row: the engine's, plus its ``cross.targets`` for a cross-built row."""
    return [*engine.targets, *(engine.cross.get("targets", ()) if variant.target else ())]


def row_bins(engine: EngineSpec, variant: Variant) -> list[str]:
    """The programs collected into ``bin/``: the engine's, plus ``cross.bin`` for a cross-built row."""
    return [*engine.artifacts.get("bin", ()), *(engine.cross.get("bin", ()) if variant.target else ())]


def stamp_key(key: str, engine: EngineSpec, abi_fingerprint: str | None, targets: list[str] | None = None) -> str:
    """Everything the artifact depends on: targets, collected files and the ABI fingerprint too."""
    blob = json.dumps({"build": key, "targets": targets or list(engine.targets), "artifacts": engine.artifacts,
                       "abi": abi_fingerprint, "manifest": MANIFEST_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def build_dir_for(tree: PatchedTree, variant: Variant, key: str) -> Path:
    """``work/<patched tree>/build/<variant>-<key12>``: beside the tree it compiles.

    Every build dir then reaches its sources as ``../../tree/...``, so with ``CCACHE_BASEDIR``
    the compiler command lines do not depend on which patched tree (patch series) they build:
    after a patch change, only the files the patch touches miss ccache.
    """
    return tree.path.parent / "build" / f"{variant.name}-{key[:12]}"


def artifact_dir(engine: EngineSpec, variant: Variant) -> Path:
    """``<dist>/<engine>-<pin>-<variant>``; a recipe from history adds ``@<commit12>``, an untrusted one
    ``+untrusted-<hash12>`` (:func:`trust_key`): it never writes the path a trusted build's artifact has."""
    suffix = f"@{engine.recipe_commit[:12]}" if engine.recipe_commit else ""
    untrusted = trust_key(engine)
    return paths.artifacts_dir() / f"{engine.name}-{engine.pin}-{variant.name}{suffix}{'+' + untrusted if untrusted else ''}"


def host_files(build_dir: Path) -> Path:
    """Where the host keeps its own files for ``build_dir`` (the log, the init-cache script, the stamp,
    the sandbox's passwd/group): outside every tree the build can write, shown to it read-only."""
    rel = build_dir.relative_to(paths.work_dir()) if build_dir.is_relative_to(paths.work_dir()) else Path(
        hashlib.sha256(str(build_dir).encode()).hexdigest()[:16])
    return confined.host_dir("build", *rel.parts)


def build_log(build_dir: Path) -> Path:
    """The build's log: the host's own file (:func:`host_files`), never one in the build dir."""
    return host_files(build_dir) / "build.log"


def init_cache_text(defines: dict[str, str]) -> str:
    """A ``-C`` init-cache script: every setting in one reviewable file.

    Names are CMake identifiers (checked again here: a name is written unquoted); a value is one
    quoted argument in which ``\\``, ``"`` and ``$`` are escaped, so no value is a variable
    reference or ends the argument."""
    lines = ["# generated by harness; every cache entry of this build"]
    for k, v in defines.items():
        if not DEFINE_NAME.match(k):
            msg = (f"CMake define name {k[:80]!r} is not an identifier (letters, digits, '_'): "
                   "refusing to write it into the init-cache script; rename the define")
            raise BuildError(msg)
        vtype = "BOOL" if v in ("ON", "OFF") else "STRING"
        esc = v.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
        lines.append(f'set({k} "{esc}" CACHE {vtype} "" FORCE)')
    return "\n".join(lines) + "\n"


def _run_logged(argv: list[str], cwd: Path, log: Path, env: dict[str, str], label: str,
                box: sandbox.Sandbox | None = None) -> None:
    """Run ``argv`` (in ``box`` when given), its output streamed into ``log`` (the host's own file,
    outside every tree the build can write); BuildError with the log's last lines on failure."""
    shown = argv
    if box is not None:
        argv, env = box.command(argv, env)
    fd = confined.open_log(log)
    with os.fdopen(fd, "a") as lf, progress.spinner(label) as update:
        lf.write(f"\n$ {' '.join(shown)}\n" + ("  (in the bubblewrap sandbox)\n" if box and box.active else ""))
        lf.flush()
        # The with block closes the pipe (an unclosed one is a ResourceWarning at every build).
        with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, bufsize=1, errors="replace") as proc:
            assert proc.stdout is not None
            try:
                for line in proc.stdout:
                    lf.write(line)
                    if line.startswith("["):
                        update(line.strip())
                rc = proc.wait()
            except BaseException:
                proc.kill()
                proc.wait()
                raise
    if rc != 0:
        msg = (f"{label} failed (exit {rc}): {' '.join(shown)}"
               + (" (in the bubblewrap sandbox: no network; the host's /home, /root, /var, /run, /tmp and the "
                  "harness cache out of sight; /etc reduced; the source tree read-only)" if box and box.active else "")
               + f"\n--- last lines of {log} ---\n" + "\n".join(log_tail(log))
               + "\nFix the cause above; the full log is kept at the path shown.")
        raise BuildError(msg)


def log_tail(log: Path, lines: int = 40) -> list[str]:
    """The last ``lines`` lines of the host's own log (its last 64 KiB, never the whole file)."""
    tree = confined.Tree(log.parent, what="the harness's build logs")
    fd = tree.open_file(log.name, limit=confined.COPY_LIMIT)
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - (64 << 10)), os.SEEK_SET)
        data = os.read(fd, 64 << 10)
    finally:
        os.close(fd)
    return data.decode(errors="replace").splitlines()[-lines:]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every regular file; symlinks recorded as ``-> target``."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel == MANIFEST:
            continue
        if p.is_symlink():
            out[rel] = f"-> {os.readlink(p)}"
        elif p.is_file():
            out[rel] = _sha256(p)
    return out


def _library_candidates(build: confined.Tree, pattern: str,
                        targets: list[cmake_fileapi.TargetArtifacts] | None) -> list[str]:
    """Files (relative to the build dir) matching ``pattern`` where the build's libraries are: the
    directories CMake's file API says shared/module libraries are written to (build root, ``bin/``,
    ``src/ggml/``, ...)."""
    if targets is None:
        # No file API reply (a build dir configured by an older harness): bin/ and one level below.
        return build.glob(f"bin/{pattern}") + build.glob(f"*/{pattern}")
    return [p for d in cmake_fileapi.library_dirs(build, targets) for p in build.glob(f"{d}/{pattern}" if d else pattern)]


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _destination(artifact: Path, target: Path, what: str) -> None:
    """Make ``target``'s directory, after checking that ``target`` stays inside ``artifact`` (the
    host's own staging directory): a pattern never places a file elsewhere."""
    rel = os.path.relpath(target, artifact)
    if os.path.isabs(rel) or rel == os.pardir or rel.startswith(os.pardir + os.sep):
        msg = (f"{what} would be placed at {os.path.normpath(target)}, outside the artifact {artifact}: "
               "fix the pattern in artifacts: of the engine descriptor (relative, no '..')")
        raise BuildError(msg)
    target.parent.mkdir(parents=True, exist_ok=True)
    parent = os.path.realpath(target.parent)
    if not _inside(parent, (os.path.realpath(artifact),)):
        msg = (f"{what} would be placed at {target}, whose directory leads to {parent}, outside the artifact "
               f"{artifact} (through a symlink in it): remove the symlink")
        raise BuildError(msg)


@dataclass(frozen=True)
class _Pending:
    """A symlink recorded in the artifact, and the file it leads to in its tree (for :func:`_settle_links`)."""

    tree: confined.Tree
    resolved: str


def _place(tree: confined.Tree, rel: str, target: Path, *, base: str, what: str, artifact: Path) -> _Pending | None:
    """Put the tree's ``rel`` (a file the build or the source tree holds) at ``target`` in the artifact.

    Only the trees' own bytes go in, read through the confined accessor: a link is followed lexically
    and only inside its tree (:meth:`~harness.sandbox.confined.Tree.resolve`), a special file, a file
    with other hard links (a host file under a second name) or a link out is :class:`BuildError`. A
    symlink whose text is relative and stays inside ``base`` (the directory collected from:
    libggml.so -> libggml.so.0) is recorded as that symlink; any other is copied as the file it leads to."""
    _destination(artifact, target, what)
    try:
        if tree.kind(rel) == "link":
            text = tree.readlink(rel)
            resolved = tree.resolve(rel)
            lexical = os.path.normpath(os.path.join(os.path.dirname(os.path.relpath(rel, base or ".")), text))
            if not os.path.isabs(text) and lexical != ".." and not lexical.startswith(".." + os.sep):
                target.symlink_to(text)
                return _Pending(tree, resolved)
            rel = resolved
        tree.copy_to(rel, target)
    except confined.ConfinementError as e:
        msg = (f"{what} {e}. An artifact carries only the build and source trees' own files, never the host's; "
               "or fix the pattern in artifacts: of the engine descriptor")
        raise BuildError(msg) from None
    return None


def _settle_links(links: dict[Path, _Pending]) -> None:
    """A symlink recorded in the artifact whose target was not collected is replaced by the file it
    led to in the tree (read through the accessor): the artifact never holds a dangling link."""
    for link, pending in links.items():
        if not link.exists() and pending.tree.is_file(pending.resolved):
            link.unlink()
            pending.tree.copy_to(pending.resolved, link)


def _collect(engine: EngineSpec, tree: Path, build_dir: Path, dest: Path, bins: list[str] | None = None) -> None:
    """Fill the host's staging dir ``dest`` from the build dir and the patched tree, both read only
    through the confined accessor (the build wrote the one, the patch series the other)."""
    (dest / "lib").mkdir(parents=True)
    (dest / "bin").mkdir()
    (dest / "include").mkdir()
    build = confined.Tree(build_dir, what="build dir")
    source = confined.Tree(tree, what="patched source tree")
    links: dict[Path, _Pending | None] = {}
    targets = cmake_fileapi.read_targets(build)
    for pattern in engine.artifacts.get("lib", ()):
        for rel in _library_candidates(build, pattern, targets):
            target = dest / "lib" / os.path.basename(rel)
            if target.exists() or target.is_symlink():
                continue
            links[target] = _place(build, rel, target, base=os.path.dirname(rel), what="library", artifact=dest)
    exes = cmake_fileapi.executables(targets or [])
    for name in engine.artifacts.get("bin", ()) if bins is None else bins:
        rel = exes.get(name, f"bin/{name}")
        if build.kind(rel) not in ("file", "link"):
            msg = (f"expected binary {name} not built (looked for {build_dir / rel}); check targets: in "
                   f"{engine.root / 'engine.yaml'}")
            raise BuildError(msg)
        links[dest / "bin" / name] = _place(build, rel, dest / "bin" / name, base=os.path.dirname(rel),
                                            what="program", artifact=dest)
    for entry in engine.artifacts.get("include", ()):
        # "DIR:GLOB" keeps paths relative to DIR; a bare glob flattens into include/.
        base, colon, pattern = entry.rpartition(":")
        base = "" if base in ("", ".") else base  # ".:common/*.h" keeps common/ (the binding includes common/...)
        for rel in source.glob(f"{base}/{pattern}" if base else pattern):
            if source.kind(rel) == "dir":
                continue
            out = os.path.relpath(rel, base or ".") if colon else os.path.basename(rel)
            links[dest / "include" / out] = _place(source, rel, dest / "include" / out,
                                                   base=base if colon else os.path.dirname(rel),
                                                   what="header", artifact=dest)
    _settle_links({k: v for k, v in links.items() if v})
    if not any((dest / "lib").iterdir()):
        where = (", ".join(str(build_dir / d) for d in cmake_fileapi.library_dirs(build, targets)) or "none"
                 if targets is not None else f"{build_dir / 'bin'} and one level below {build_dir}")
        msg = (f"no libraries matched {engine.artifacts.get('lib')} (artifacts.lib in {engine.root / 'engine.yaml'}); "
               f"library directories of the build: {where}")
        raise BuildError(msg)


def smoke_cpu_level(engine: EngineSpec, variant: Variant, artifact: Path) -> str | None:
    """Run the descriptor's ``smoke:`` command in a fresh artifact; the CPU level it reports.

    None when the descriptor has none, the row's intent does not match its ``when:``, the
    recipe is not trusted (README "Trust model"), the artifact lacks the program, or the output
    does not say.
    """
    spec = with_current_build_data(engine).smoke
    if variant.target:  # a cross-built artifact does not run natively here
        return None
    if not trust.is_trusted(engine):  # what an untrusted recipe built runs only once the user trusts it
        return None
    if not spec or any(variant.intent.get(k) != v for k, v in dict(spec.get("when", {})).items()):
        return None
    argv = [str(a) for a in spec["argv"]]
    exe = artifact / argv[0]
    if not exe.is_file():
        return None
    real = os.path.realpath(exe)
    if not _inside(real, (os.path.realpath(artifact),)) or os.path.isabs(argv[0]):
        msg = (f"smoke.argv[0] {argv[0]!r} of {engine.root / 'engine.yaml'} leads to {real}, outside the artifact "
               f"{artifact}: the smoke check runs a program the artifact holds (e.g. bin/tool), nothing else")
        raise BuildError(msg)
    try:
        r = subprocess.run([str(exe), *argv[1:]], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    pattern = spec.get("cpu_level")
    m = recipe_regex(str(pattern), where=f"{engine.root / 'engine.yaml'}:smoke.cpu_level").search(
        r.stdout + r.stderr) if pattern else None
    return m.group(1) if m else None


def read_manifest(artifact: Path) -> dict[str, Any]:
    return dict(json.loads((artifact / MANIFEST).read_text()))


def build(pm: pluggy.PluginManager, engine: EngineSpec, variant: Variant, tree: PatchedTree, host: HostInfo,
          *, overrides: dict[str, str] | None = None, abi_fingerprint: str | None = None,
          force: bool = False) -> BuildResult:
    """Configure, build and collect one variant. A no-op when the stamped artifact matches.

    Raises :class:`UsageError` for a row the engine does not build (its ``variants:`` list or
    its intent map), :class:`HostError` for one this host cannot build.
    """
    t0 = time.perf_counter()
    unsupported = engine_support(engine, variant)
    if unsupported:
        msg = f"variant {variant.name} is {unsupported}"
        raise UsageError(msg)
    b = buildability(pm, variant, host, engine)
    if not b.buildable:
        msg = f"variant {variant.name} cannot be built on this host: " + "; ".join(b.reasons)
        raise HostError(msg)
    defines = effective_defines(pm, engine, variant, host, overrides or {})
    key = build_key(engine, tree, variant, defines)
    targets = row_targets(engine, variant)
    stamp = stamp_key(key, engine, abi_fingerprint, targets)
    dest = artifact_dir(engine, variant)
    with FileLock(str(paths.locks_dir() / f"build-{dest.name}.lock")):
        if not force and (dest / MANIFEST).is_file():
            manifest = read_manifest(dest)
            if manifest.get("build_key") == stamp:
                return BuildResult(artifact=dest, build_dir=Path(manifest.get("build_dir", "")), built=False,
                                   seconds=time.perf_counter() - t0, manifest=manifest)
        build_dir = build_dir_for(tree, variant, key)
        own = host_files(build_dir)
        _clear_stale(build_dir, own, tree.path, toolchain_id(host))
        build_dir.mkdir(parents=True, exist_ok=True)
        build_tree = confined.Tree(build_dir, what="build dir")
        build_tree.remove("build.log")  # an older harness's log there (and never written through again)
        log = build_log(build_dir)
        init = confined.write_private(own / "init-cache.cmake", init_cache_text(defines))
        try:
            cmake_fileapi.write_query(build_tree)
        except confined.ConfinementError as e:
            # a link or special file where the query goes: what an earlier (hostile) build left; made again
            progress.info(f"{e.args[0].split(':', 1)[0]} is not what the harness left there: the build dir "
                          f"{build_dir} is made again")
            shutil.rmtree(build_dir)
            build_dir.mkdir(parents=True)
            cmake_fileapi.write_query(build_tree)
        env = dict(os.environ)
        env.setdefault("CCACHE_BASEDIR", str(paths.cache_root()))
        box = sandbox.sandbox_for(engine, tree=tree.path, build_dir=build_dir, host=host, env=env,
                                  plugin_defines=_not_from_descriptor(engine, variant, defines), host_files=own,
                                  shown=(str(init),))
        source_dir = tree.path / engine.cmake.get("source_subdir", "")
        compile_lock = FileLock(paths.compile_lock_path())
        if not _try_acquire(compile_lock):
            progress.info("another build holds the machine's compile lock; waiting for it")
            compile_lock.acquire()
        try:
            _run_logged(configure_command(source_dir, build_dir, init, host), build_dir, log, env,
                        f"configure {engine.name} {variant.name}", box)
            # this build's own ccache counts (other builds running now keep theirs): see harness/build/ccache.py
            build_env = {**env, **ccache.build_env(build_tree)} if _uses_ccache(defines) else env
            _run_logged(["cmake", "--build", str(build_dir), "--parallel", str(jobs()), "--target", *targets],
                        build_dir, log, build_env, f"build {engine.name} {variant.name} (-j{jobs()})", box)
        finally:
            compile_lock.release()
        staging = dest.with_name(f".{dest.name}.staging")
        shutil.rmtree(staging, ignore_errors=True)
        _collect(engine, tree.path, build_dir, staging, row_bins(engine, variant))
        manifest = {
            "manifest_version": MANIFEST_VERSION,
            "engine": engine.name,
            "pin": engine.pin,
            "upstream": engine.upstream,
            "source_sha256": engine.source.sha256 or engine.source.commit,
            "patch_series_hash": tree.series_hash,
            "patches": [o.patch.name for o in tree.patches],
            "recipe_commit": engine.recipe_commit or None,
            "variant": variant.name,
            "platform": variant.platform,
            "intent": variant.intent,
            "defines": defines,
            "cuda_archs": defines.get("CMAKE_CUDA_ARCHITECTURES", "").split(";") if variant.platform == "cuda" else [],
            "toolchain": toolchain_id(host),
            "host": {"os": host.os, "arch": host.arch, "microarch": host.microarch},
            # A cross-built row's GNU triple (where the artifact runs); None for a build for the host.
            "target": variant.target or None,
            "abi_fingerprint": abi_fingerprint or header_hash(staging / "include"),
            "abi_fingerprint_kind": "abi" if abi_fingerprint else "header-sha256",
            "build_key": stamp,
            "build_dir": str(build_dir),
            "build_log": str(log),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.perf_counter() - t0, 1),
            "ccache": _ccache_record(build_tree, defines, {**env, **box.ccache}),
            "trusted": trust.is_trusted(engine),
            "sandbox": "bubblewrap" if box.active else None,
        }
        for extra in pm.hook.harness_artifact_manifest(engine=engine, variant=variant, manifest=manifest):
            manifest.update(extra or {})
        manifest["files"] = file_hashes(staging)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
        confined.write_private(own / BUILD_STAMP, json.dumps({"source_dir": str(source_dir),
                                                              "toolchain": toolchain_id(host), "key": key}))
    return BuildResult(artifact=dest, build_dir=build_dir, built=True, seconds=time.perf_counter() - t0,
                       manifest=manifest)


def _not_from_descriptor(engine: EngineSpec, variant: Variant, defines: dict[str, str]) -> dict[str, str]:
    """The defines whose values the variant plugins, the host probe or ``--define`` set (not the
    descriptor): the paths among them are the harness's own and are shown in the sandbox."""
    recipe = {**engine.cmake.get("base", {}), **row_defines(engine, variant)}
    return {k: v for k, v in defines.items() if recipe.get(k) != v}


def _uses_ccache(defines: dict[str, str]) -> bool:
    return Path(defines.get("CMAKE_C_COMPILER_LAUNCHER", defines.get("CMAKE_CXX_COMPILER_LAUNCHER", ""))).name == "ccache"


def _ccache_record(build: confined.Tree, defines: dict[str, str], env: dict[str, str]) -> dict[str, Any] | None:
    """The manifest's ``ccache``: this build's hits (local and remote) and the remote storage it had."""
    if not _uses_ccache(defines):
        return None
    stats = ccache.read_stats_log(build, ccache.STATS_LOG)
    remote = ccache.remote_storage(env)
    return {**(stats.as_dict() if stats else {"compilations": 0}),
            "remote_storage": ccache.redact(remote) if remote else None}


def ccache_summary(manifest: dict[str, Any]) -> str:
    """``ccache 412/412 hits (100%: 0 local, 412 remote)`` from a manifest, or "" without a record."""
    rec = manifest.get("ccache")
    if not rec or not rec.get("compilations"):
        return ""
    fields = {f: int(rec.get(f) or 0) for f in ("compilations", "hits", "local_hits", "remote_hits", "misses",
                                                "remote_errors", "uncacheable")}
    return ccache.CacheStats(**fields).summary()


def _try_acquire(lock: FileLock) -> bool:
    from filelock import Timeout

    try:
        lock.acquire(timeout=0)
    except Timeout:
        return False
    return True


def header_hash(include: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(include.glob("*.h")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def configure_command(source_dir: Path, build_dir: Path, init: Path, host: HostInfo) -> list[str]:
    """cmake's configure line. The ninja found now is named: a build dir in the shared cache keeps the
    CMAKE_MAKE_PROGRAM of whoever configured it first (a CI clone's venv, since deleted: "ninja --version
    failed: no such file or directory"), and a -D on the command line also outranks a recipe's define."""
    ninja = host.tool("ninja")
    make_program = [f"-DCMAKE_MAKE_PROGRAM:FILEPATH={ninja.path}"] if ninja.found and ninja.path else []
    return ["cmake", "-S", str(source_dir), "-B", str(build_dir), "-G", "Ninja", *make_program, "-C", str(init)]


def _clear_stale(build_dir: Path, own: Path, source_dir: Path, toolchain: dict[str, str | None]) -> None:
    """CMake caches the source dir and compilers: a change in either needs a fresh build dir. The stamp
    is the host's own (``own``); CMakeCache.txt, which the build wrote, is read through the accessor."""
    stamp = own / BUILD_STAMP
    build = confined.Tree(build_dir, what="build dir")
    if not build_dir.is_dir() or not build.is_file("CMakeCache.txt"):
        if build_dir.is_dir() and build.kind("CMakeCache.txt") not in (None, "file"):
            shutil.rmtree(build_dir)  # a link or special file where the cache is: what a hostile build left
        return
    old: dict[str, Any] = json.loads(stamp.read_text()) if stamp.is_file() else {}
    try:
        text = build.read_text("CMakeCache.txt")
    except confined.ConfinementError:
        text = ""
    home = next((ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("CMAKE_HOME_DIRECTORY:")), None)
    if (home and Path(home) != source_dir) or (old and old.get("toolchain") != toolchain) or not text:
        progress.info(f"clearing stale CMake cache in {build_dir} (source dir or toolchain changed)")
        shutil.rmtree(build_dir)
