"""Every file a user or a file names is opened through :mod:`harness.core.inputs`.

The walk finds each direct read of a path in ``harness/`` and ``plugins/`` (``open(``,
``X.open(``, ``X.read_text(``, ``X.read_bytes(``, ``os.open(`` without a write flag) and fails on
one that is not in :data:`ALLOWED`. The allowed ones read what the harness owns: its package data,
files it wrote itself (build outputs, stamps, logs, reports it just rendered), the pinned source
tree it unpacked, and the host's own files (/proc, /sys, /etc/apt). Anything a user, a request, a
config or a report names goes through ``harness.core.inputs`` (regular files only, a FIFO never
blocks, a size limit per kind) instead of joining this list.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.sources import trees

ROOT = Path(__file__).parents[2]
TREES = tuple(trees())
#: The module that is the one way to open an input: it opens with os.open itself.
FOUNDATION = "harness/core/inputs.py"
READS = frozenset({"open", "read_text", "read_bytes"})
_WRITE_FLAGS = frozenset({"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"})

#: (file, enclosing function, the call's callee as written): why it may read directly.
ALLOWED: dict[tuple[str, str, str], str] = {
    # the agreement's reference rows: a temp dir of the harness's own, written by the same series
    ("harness/agree/run.py", "ReferenceRows.load", "meta.read_text"): "the reference rows' meta file, written by an earlier agree() of the same series",
    # a bisect's state dir: its config, its probes' stamps and git's bisect log, all written by the bisect
    ("harness/bisect/gates.py", "_own", "path.read_text"): "the good build's simulation runs, kept by the bisect beside its probes",
    ("harness/bisect/search.py", "_own", "path.read_text"): "a file of the bisect's own state dir (config, stamps, git's log)",
    # the simulation instrument's own files: cachegrind's output and the run's log, both written by it
    ("harness/bench/simulation.py", "run_one", "out.read_text"): "cachegrind's output file of a run the harness started",
    ("harness/bench/simulation.py", "_tail", "log.read_text"): "the log of a run the harness started",
    ("harness/bench/counters.py", "probe", "paranoid.read_text"): "the kernel's perf_event_paranoid setting (the host's own /proc)",
    # package data, shipped inside the wheel
    ("engines/vllmcpp/plugin/__init__.py", "_writer_version", "(Path(__file__).parent / 'random_hf.py').read_bytes"): "the random-weight writer's own source, hashed as its version",
    ("harness/cli/config.py", "cmd_config_schema", "SCHEMA_PATH.read_text"): "the model-config schema shipped in the package",
    ("harness/config/localai.py", "_read", "resources.files('harness.config').joinpath(name).read_text"): "package data (localai.yaml, localai_index.yaml)",
    # the binding's compile-surface check: CMake's compile_commands.json and the check's own stamp
    ("harness/abi/binding.py", "_read_all", "tree.read_bytes"): "binding sources, through the confined accessor",
    ("harness/abi/diagnostics.py", "_header_text", "inside.read_text"): "a header of the pinned tree, through the confined accessor",
    ("harness/abi/diagnostics.py", "_header_text", "Tree(include, what=\"the stand-in artifact's headers\").read_text"): "the stand-in headers, through the confined accessor",
    ("harness/abi/used.py", "recipe_identifiers", "tree.read_bytes"): "a recipe's abi.used_from, through the confined accessor",
    ("harness/abi/binding.py", "check_binding", "stamp.read_text"): "the check's own stamp under the harness cache",
    ("harness/abi/revisions.py", "dir_label", "stamp.read_text"): "a cached source tree's stamp, written by the source cache",
    ("harness/config/schema.py", "committed", "SCHEMA_PATH.read_text"): "the schema shipped in the package",
    ("harness/config/schema.py", "write", "path.read_text"): "the schema file the generator writes, compared before it is rewritten",
    ("harness/config/schema.py", "main", "args.output.read_text"): "nox -s generate_schema's own output file, compared before writing",
    ("harness/engine/descriptor.py", "engine_schema", "resources.files('harness').joinpath('schemas/engine.schema.json').read_text"): "package data (engine schema)",
    ("harness/build/matrix.py", "_schema", "resources.files('harness').joinpath('schemas/matrix.schema.json').read_text"): "package data (matrix schema)",
    ("harness/families/table.py", "table", "resources.files('harness.families').joinpath(DATA_FILE).read_text"): "package data (families.yaml)",
    ("engines/llamacpp/plugin/__init__.py", "_writer_version", "(Path(__file__).parent / name).read_bytes"): "the plugin's own source files",
    # files the harness wrote itself: build outputs, stamps, caches, logs, reports it just rendered
    ("harness/abi/exports.py", "exported_symbols", "lib.open"): "a library the build stage wrote",
    ("harness/abi/exports.py", "elf_machine", "lib.open"): "a library the build stage wrote",
    ("harness/abi/exports.py", "_sha", "p.read_bytes"): "a library the build stage wrote",
    ("harness/audit/artifact.py", "_artifact_arch", "p.open"): "a CPU-level library of a built artifact",
    ("harness/audit/isa.py", "audit_library", "lib.open"): "a CPU-level library of a built artifact",
    ("harness/binding/wheel.py", "installed_identity", "ident.read_text"): "the identity file the binding build wrote",
    ("harness/binding/wheel.py", "build_binding", "stamp.read_text"): "the binding build's own stamp",
    ("harness/binding/wheel.py", "_unpack", "stamp.read_text"): "the unpacked binding's own stamp",
    ("harness/build/recipes.py", "_stamp_layout", "stamp.read_text"): "the materialized recipe's own stamp",
    ("harness/cli/bench.py", "cmd_report_merge", "(out / 'merged.md').read_text"): "the report merge just wrote",
    ("harness/bench/markdown.py", "_plots_lines", "p.read_bytes"): "plots the report just rendered",
    ("harness/bench/roofline.py", "measure_host", "path.read_text"): "the harness's own roofline cache",
    ("harness/build/cmake.py", "_sha256", "path.open"): "a file the build stage wrote",
    ("harness/build/cmake.py", "read_manifest", "(artifact / MANIFEST).read_text"): "the manifest the build stage wrote",
    ("harness/build/cmake.py", "header_hash", "p.read_bytes"): "headers of the patched source tree the harness unpacked",
    ("harness/build/cmake.py", "_clear_stale", "stamp.read_text"): "the build's own stamp, in the host's files for it",
    ("harness/binding/contents.py", "_digest", "zf.open"): "a member of a wheel already opened (the host's copy, taken out through the confined accessor)",
    ("engines/llamacpp/plugin/simulate.py", "LlamaBenchTarget.describe", "(self.artifact / 'manifest.json').read_bytes"): "an artifact's manifest (written by the build), hashed for the target's identity",
    ("harness/build/ccache.py", "read_stats_log", "build.read_text"): "ccache's stats log, through the confined accessor",
    ("harness/build/cmake_fileapi.py", "_load", "build.read_text"): "CMake's file-API reply, through the confined accessor",
    ("harness/sandbox/confined.py", "Tree._open_dir", "os.open"): "the confined accessor: a directory, no link followed",
    ("harness/sandbox/confined.py", "Tree.open_file", "os.open"): "the confined accessor: a regular file, no link, bounded",
    ("harness/sandbox/confined.py", "Tree.read_text", "self.read_bytes"): "the confined accessor's bounded read",
    ("harness/sandbox/confined.py", "Tree.touch", "os.open"): "the confined accessor: a file made, no link followed",
    ("harness/sandbox/bwrap.py", "_prefix_of", "open"): "the #! line of a tool the host probe found on PATH",
    ("harness/cli/qualify.py", "cmd_qualify", "(directory / 'qualify.md').read_text"): "the report qualify just wrote",
    ("harness/core/crash.py", "read_note", "path.read_text"): "a crash note the harness's supervisor wrote",
    ("harness/models/fixtures.py", "read_stamp", "_stamp_path(name).read_text"): "the fixture cache's own stamp",
    ("harness/qualify/stages/bench.py", "bench_stage_result", "files.markdown.read_text"): "the bench report this stage just wrote",
    ("harness/runtime/discovery.py", "discover", "ident_file.read_text"): "an installed artifact's identity file (written by the build)",
    ("harness/runtime/levels.py", "artifact_key", "manifest.read_bytes"): "an installed artifact's manifest (written by the build)",
    ("harness/runtime/levels.py", "verdict", "path.read_text"): "the harness's own CPU-level verdict cache",
    ("plugins/cross_gnu.py", "toolchain_file", "path.read_text"): "the toolchain file this plugin writes, compared before rewriting",
    ("plugins/cross_gnu.py", "harness_artifact_manifest", "tfile.read_text"): "the toolchain file this plugin wrote",
    ("plugins/cross_gnu.py", "elf_machine", "path.open"): "a library the build stage wrote",
    ("engines/llamacpp/plugin/bench.py", "LlamaBenchArm.__init__", "(self.artifact / 'manifest.json').read_text"): "a built artifact's manifest",
    ("engines/llamacpp/plugin/bench_http.py", "_HttpArm._wait_ready", "self.log.read_text"): "the server log this arm is writing",
    ("engines/llamacpp/plugin/bench_http.py", "LlamaServerArm._command", "(artifact / 'manifest.json').read_text"): "a built artifact's manifest",
    ("engines/llamacpp/plugin/convert.py", "_is_gguf", "path.open"): "the converter's output, in a temporary file the harness made",
    ("engines/llamacpp/plugin/engine.py", "handshake", "manifest_path.read_text"): "a built artifact's manifest",
    ("engines/vllmcpp/plugin/engine.py", "handshake", "manifest.read_text"): "a built artifact's manifest",
    ("plugins/variant_vulkan.py", "ensure_headers", "stamp.read_text"): "the pinned headers' own stamp",
    ("plugins/variant_vulkan.py", "harness_artifact_manifest", "log.read_text"): "the build log the harness wrote",
    # the pinned source tree the harness unpacked (integrity: harness/source/cache.py's manifest)
    ("engines/llamacpp/plugin/__init__.py", "pinned_architectures", "path.read_text"): "llama-arch.cpp of the pinned source tree",
    ("engines/llamacpp/plugin/convert.py", "_hash_files", "f.open"): "the converter's sources in the pinned tree",
    ("engines/llamacpp/plugin/emulated.py", "probe_source", "header.read_text"): "a header of the pinned source tree",
    ("engines/llamacpp/plugin/emulated.py", "feature_probe", "header.read_text"): "a header of the pinned source tree",
    ("plugins/variant_cpu.py", "harness_artifact_cpu_levels", "cmake.read_text"): "ggml's CMakeLists of the pinned source tree",
    ("plugins/variant_cpu.py", "harness_artifact_cpu_levels", "feats.read_text"): "ggml's CPU feature source of the pinned tree",
    # caches of fetched files: opened non-blocking and fstat-checked where they are read
    ("harness/source/manifest.py", "sha256_file", "os.open"): "hashes cache files; O_NONBLOCK open and an fstat regular-file check of its own",
    ("harness/source/cache.py", "safe_extract", "tarfile.open"): "the pinned archive, read after its sha256 matched",
    ("harness/agree/corpus.py", "_member_bytes", "tarfile.open"): "the pinned corpus archive, read after its sha256 matched",
    # the host's own files
    ("harness/core/host.py", "_cpu_model", "Path('/proc/cpuinfo').read_text"): "/proc/cpuinfo",
    ("harness/core/host.py", "vulkan_header_version", "core.read_text"): "the host's Vulkan SDK header",
    ("harness/bench/system.py", "_read", "path.read_text"): "/sys and /proc settings of the host",
    ("harness/source/mirrors.py", "apt_sources", "path.read_text"): "the host's /etc/apt sources",
    ("harness/core/crash.py", "_in_terminal_foreground", "os.open"): "/dev/tty, to ask for the foreground process group",
    # not a path: a file object or an archive member
    ("harness/models/wheels.py", "extract_member", "zf.open"): "a member of a zip already opened",
    ("harness/build/recipes.py", "recipe_at", "tarfile.open"): "an in-memory blob (fileobj=BytesIO)",
    ("harness/pin/sources.py", "_archive_listing", "tarfile.open"): "fileobj= the reader harness.core.inputs.open_input gave for the archive the user names",
    ("harness/video/mux.py", "check_wav", "wave.open"): "a file object from harness.core.inputs.open_input",
}


def _writes(call: ast.Call) -> bool:
    """A call that opens for writing (a literal mode with w/a/x/+; os.open with a write flag or a
    creation mode)."""
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "os":
        flags = {n.attr for a in call.args[1:2] for n in ast.walk(a) if isinstance(n, ast.Attribute)}
        return bool(flags & _WRITE_FLAGS) or len(call.args) > 2  # a creation mode: it makes the file
    mode: ast.expr | None = None
    positional = call.args[1:2] if isinstance(f, ast.Name) else call.args[:1]
    if positional:
        mode = positional[0]
    for k in call.keywords:
        if k.arg == "mode":
            mode = k.value
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")


class _Walk(ast.NodeVisitor):
    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.scope: list[str] = []
        self.found: list[tuple[str, str, str, int]] = []
        self.via_inputs: set[str] = set()  # names bound to harness.core.inputs or its functions

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "harness.core.inputs":
            self.via_inputs |= {a.asname or a.name for a in node.names}
        elif node.module == "harness.core":
            self.via_inputs |= {a.asname or a.name for a in node.names if a.name == "inputs"}

    def visit_Import(self, node: ast.Import) -> None:
        self.via_inputs |= {a.asname for a in node.names if a.name == "harness.core.inputs" and a.asname}

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Name):
            direct = f.id == "open"
        elif isinstance(f, ast.Attribute):
            through_inputs = isinstance(f.value, ast.Name) and f.value.id in self.via_inputs
            direct = f.attr in READS and not through_inputs
        else:
            direct = False
        if direct and not _writes(node):
            self.found.append((self.rel, ".".join(self.scope) or "<module>", ast.unparse(f), node.lineno))
        self.generic_visit(node)


def direct_reads(source: str, rel: str) -> list[tuple[str, str, str, int]]:
    """(file, function, callee, line) of each direct read of a path in ``source``."""
    walk = _Walk(rel)
    walk.visit(ast.parse(source, rel))
    return walk.found


def _all_reads() -> list[tuple[str, str, str, int]]:
    out: list[tuple[str, str, str, int]] = []
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel != FOUNDATION:
                out += direct_reads(path.read_text(encoding="utf-8"), rel)
    return out


def test_every_direct_read_is_of_the_harnesss_own_files() -> None:
    new = [f"{rel}:{line}: {callee}(...) in {func}" for rel, func, callee, line in _all_reads()
           if (rel, func, callee) not in ALLOWED]
    assert not new, ("direct reads of a path outside harness.core.inputs:\n  " + "\n  ".join(new)
                     + "\nopen user-named files with harness.core.inputs (read_bytes / read_text / open_input, "
                     "a kind from LIMITS); a file the harness wrote itself goes into ALLOWED with its reason")


def test_the_allow_list_names_only_reads_that_exist() -> None:
    present = {(rel, func, callee) for rel, func, callee, _ in _all_reads()}
    stale = [f"{k}" for k in ALLOWED if k not in present]
    assert not stale, "ALLOWED entries whose read is gone (remove them):\n  " + "\n  ".join(stale)


def test_every_allowed_read_has_a_reason() -> None:
    assert all(reason.strip() and "\n" not in reason for reason in ALLOWED.values())


def test_the_walk_sees_reads_and_passes_writes_and_harness_inputs() -> None:
    source = '''
from harness.core import inputs
from harness.core.inputs import read_text as rt

def f(p):
    open(p)
    p.read_text()
    p.read_bytes()
    p.open("rb")
    yaml.safe_load(open(p))
    os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    open(p, "w")
    p.open("ab")
    p.write_text("x")
    os.open(p, os.O_WRONLY | os.O_CREAT)
    os.open(p, flags, 0o644)
    inputs.read_text(p, kind="config")
    rt(p, kind="config")
'''
    found = [(func, callee) for _, func, callee, _ in direct_reads(source, "x.py")]
    assert found == [("f", "open"), ("f", "p.read_text"), ("f", "p.read_bytes"), ("f", "p.open"),
                     ("f", "open"), ("f", "os.open")]
