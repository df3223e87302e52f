"""Where an ABI parse runs: in this process for a trusted recipe, in the sandbox for an untrusted one.

libclang reads whatever the parsed files ``#include``: ``"/home/me/.ssh/id_rsa"`` (its first token
comes back in the error), a FIFO (the parse waits for ever), ``/dev/zero`` (memory until there is none);
a binding's compile commands, written by CMake running the recipe's own CMakeLists.txt, may even name
``-Xclang -load``. Looking at the inclusions after the parse is too late: the read has happened. So the
parse of a recipe the user has not trusted (README "Trust model") runs where nothing of the host is
there to read: :mod:`harness.abi.worker`, a Python of its own, in the build sandbox
(:func:`harness.sandbox.bwrap.sandbox_for`: no network, ``$HOME`` and the cache out of sight, the
system directories read-only), shown only the trees it parses, this Python's interpreter and standard
library and the ``harness`` and libclang packages, read-only; its memory capped (:data:`MEMORY_LIMIT`),
its time bounded (:data:`TIMEOUT_S`) and what it prints read back bounded (:data:`OUTPUT_LIMIT`).
Where bubblewrap cannot run, an untrusted recipe's parse is refused (naming ``--no-sandbox``), like its build.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import selectors
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import AbiError

if TYPE_CHECKING:
    from harness.core.types import EngineSpec, HostInfo
    from harness.sandbox.bwrap import Sandbox

#: The heap the worker may take (libclang over llama.cpp's headers and a binding's units takes well under 1 GiB).
MEMORY_LIMIT = 4 << 30
#: Seconds one sandboxed parse may take (llama.cpp's C surface on three targets takes a few).
TIMEOUT_S = 300.0
#: The most of the worker's answer the host reads (llama.cpp's surface is ~1 MB of JSON).
OUTPUT_LIMIT = 64 << 20
#: The last bytes of the worker's stderr kept for a message.
_TAIL = 8 << 10
#: The worker's start: its ``sys.path`` (the packages' parents) comes as arguments; ``-I -S`` reads no
#: environment variable, no user site and no ``.pth`` file.
_BOOT = "import sys; sys.path[:0] = sys.argv[1:]; from harness.abi.worker import main; sys.exit(main())"


def confined(recipe: EngineSpec | None) -> bool:
    """Whether the parse of ``recipe``'s files runs in the sandbox: an untrusted recipe's, unless ``--no-sandbox``.
    None is a tree the caller vouches for (a test's, the user's own directory given as a pin of a trusted engine)."""
    if recipe is None:
        return False
    from harness.engine.trust import is_trusted
    from harness.sandbox.bwrap import disabled

    return not is_trusted(recipe) and not disabled()


def parse(recipe: EngineSpec | None, fn: Callable[..., Any], args: Mapping[str, Any], *, tree: Path,
          shown: Iterable[Path] = (), work: Path | None = None) -> Any:
    """``fn(**args)`` (a parse of :func:`harness.abi.worker.ops` over JSON values) for the files of ``recipe``: in
    this process when :func:`confined` says no, else in the sandbox, which shows ``tree`` (the patched tree the
    parsed files are in or link into), ``shown`` (more directories they are in) and ``work`` (a scratch directory;
    default a fresh one), read-only but ``work``."""
    if recipe is None or not confined(recipe):
        return fn(**args)
    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-abi-parse-")))
        sandbox = _sandbox(recipe, tree=tree, work=work, shown=shown)
        if not sandbox.active:  # --no-sandbox set since confined() looked
            return fn(**args)
        from harness.engine.trust import origin

        return run(sandbox, op_name(fn), args, what=origin(recipe))


def op_name(fn: Callable[..., Any]) -> str:
    """How a request to the worker names the parse ``fn``."""
    return f"{fn.__module__}:{fn.__qualname__}"


def _no_tools() -> HostInfo:
    """The host as the parse's sandbox sees it: no tool of the host probe's is run there, so none is shown."""
    from harness.core.types import HostInfo

    return HostInfo(os=platform.system().lower(), arch=platform.machine(), cpu_model="", microarch="", simd=(),
                    cores=os.cpu_count() or 1, memory_bytes=0)


def _file_of(module: Any) -> str:
    path: str | None = getattr(module, "__file__", None)
    if not path:
        msg = f"{module.__name__} has no file: the ABI parse's sandbox shows packages by their directory"
        raise AbiError(msg)
    return os.path.dirname(os.path.realpath(path))


def worker_paths() -> tuple[list[str], list[str]]:
    """``(shown, sys_path)``: what the worker's Python needs to see (the interpreter, the standard library
    and its extension modules, libpython when shared, the ``harness`` and ``clang`` packages) and its ``sys.path``."""
    import clang

    import harness

    packages = [_file_of(harness), _file_of(clang)]
    shown = [os.path.realpath(sys.executable), _file_of(os), *packages]
    dynload = sysconfig.get_config_var("DESTSHARED")
    if dynload:
        shown.append(os.path.realpath(str(dynload)))
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir and soname:
        shown.append(os.path.realpath(os.path.join(str(libdir), str(soname))))
    return [p for p in dict.fromkeys(shown) if os.path.exists(p)], list(dict.fromkeys(os.path.dirname(p) for p in packages))


def _sandbox(recipe: EngineSpec, *, tree: Path, work: Path, shown: Iterable[Path]) -> Sandbox:
    from harness.sandbox.bwrap import sandbox_for

    # a recipe's directory that is a link may lead anywhere (an ``_shared`` link to /etc/ssl): not shown
    named = [*worker_paths()[0], *(str(p) for p in shown if not os.path.islink(p))]
    # the paths to show, the way a plugin names them (sandbox_for shows a program with its prefix, the rest as is)
    defines = {f"HARNESS_ABI_SHOWN_{i}": p for i, p in enumerate(named) if os.path.exists(p)}
    from harness.sandbox.confined import host_dir

    # one host dir for every parse's passwd/group (not one per temporary work dir)
    return sandbox_for(recipe, tree=tree.resolve(), build_dir=work, host=_no_tools(),
                       env={"PATH": os.environ.get("PATH", os.defpath)}, plugin_defines=defines,
                       host_files=host_dir("sandbox", "abi"))


def run(sandbox: Sandbox, op: str, args: Mapping[str, Any], *, what: str) -> Any:
    """Run the worker in ``sandbox`` on one request; its result, or :class:`AbiError` with what it said."""
    _, sys_path = worker_paths()
    argv = [os.path.realpath(sys.executable), "-I", "-S", "-B", "-c", _BOOT, *sys_path]
    full, env = sandbox.command(argv, {"PATH": os.environ.get("PATH", os.defpath)})
    request = json.dumps({"op": op, "memory": MEMORY_LIMIT, "args": dict(args)}).encode()
    rc, out, err, why = _communicate(full, env, request)
    tail = err.decode(errors="replace").strip()
    said = "\nlibclang said:\n  " + "\n  ".join(tail.splitlines()[-8:]) if tail else ""
    if why:
        msg = (f"the ABI parse of {what} in the sandbox {why}; stopped. A header that includes a FIFO or a device "
               f"waits or reads for ever: look at the #include lines of the recipe's headers{said}")
        raise AbiError(msg)
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "result" in answer and rc == 0:
        return answer["result"]
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        hint = (f" (in the sandbox, the parse's memory is capped at {MEMORY_LIMIT >> 30} GiB)"
                if "libclang failed" in answer["error"] else "")
        raise AbiError(f"{answer['error']}{hint}{said}")
    msg = (f"the ABI parse of {what} in the sandbox ended (exit {rc}) without an answer; its memory is capped at "
           f"{MEMORY_LIMIT >> 30} GiB (a header that includes /dev/zero or a device passes it){said}")
    raise AbiError(msg)


def _communicate(argv: list[str], env: dict[str, str], request: bytes) -> tuple[int, bytes, bytes, str]:
    """``(returncode, stdout, stderr tail, why it was stopped or "")``: the request written, stdout read up to
    :data:`OUTPUT_LIMIT`, the whole run within :data:`TIMEOUT_S`."""
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + TIMEOUT_S
    out, err, why = bytearray(), bytearray(), ""
    pending = memoryview(request)
    os.set_blocking(proc.stdin.fileno(), False)
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdin, selectors.EVENT_WRITE)
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map() and not why:
            left = deadline - time.monotonic()
            if left <= 0:
                why = f"took over {TIMEOUT_S:.0f} s"
                break
            for key, _ in sel.select(timeout=left):
                if key.fileobj is proc.stdin:
                    try:
                        pending = pending[os.write(key.fd, pending[:1 << 16]):]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf: bytearray = key.data
                buf += chunk
                if buf is out and len(out) > OUTPUT_LIMIT:
                    why = f"answered more than {OUTPUT_LIMIT >> 20} MiB"
                elif buf is err and len(err) > _TAIL:
                    del err[:-_TAIL]
    try:
        rc = proc.wait(timeout=0 if why else max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        why = why or f"took over {TIMEOUT_S:.0f} s"
    if why:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # bwrap; the sandbox dies with it (--die-with-parent)
        rc = proc.wait()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        f.close()
    return rc, bytes(out), bytes(err), why
