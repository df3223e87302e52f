"""The ABI parse of an untrusted recipe, inside the sandbox: :mod:`harness.abi.sandboxed` starts it.

It reads one JSON request on stdin (``{"op": ..., "memory": bytes, "args": {...}}``; ``op`` one of :func:`ops`), caps its own
memory before libclang reads anything, runs the one parse the request names and writes one JSON
object on stdout: ``{"result": ...}``, or ``{"error": "..."}`` (exit 1) when the parse is refused or
fails. It imports nothing beyond the standard library, libclang and the ABI modules, so the
sandbox needs to show no other package.
"""

from __future__ import annotations

import json
import resource
import sys
from collections.abc import Callable
from typing import Any

#: The most a request may be (the compile commands of a binding are the largest part).
REQUEST_LIMIT = 16 << 20


def ops() -> dict[str, Callable[..., Any]]:
    """The parses a request may name (:func:`harness.abi.sandboxed.op_name` of each): ``harness.abi.snapshot.snapshot_request``,
    ``harness.abi.cpp.record_request``, ``harness.abi.cpp.declarations_request``."""
    from harness.abi.cpp import declarations_request, record_request
    from harness.abi.sandboxed import op_name
    from harness.abi.snapshot import snapshot_request

    return {op_name(f): f for f in (snapshot_request, record_request, declarations_request)}


def _cap(memory: int) -> None:
    """Bound what the parse can take: a header that includes ``/dev/zero`` or a device ends in an error."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # the heap (what reading an endless file fills); the address space too, where a kernel does not count mmap
    # in the data limit, with room for libclang's mappings and thread stacks
    for which, cap in ((resource.RLIMIT_DATA, memory), (resource.RLIMIT_AS, 4 * memory)):
        soft, _ = resource.getrlimit(which)
        limit = cap if soft == resource.RLIM_INFINITY else min(cap, soft)  # never more than it was given
        resource.setrlimit(which, (limit, limit))


def main() -> int:
    request = json.loads(sys.stdin.buffer.read(REQUEST_LIMIT))
    _cap(int(request["memory"]))
    from harness.core.errors import HarnessError

    try:
        known = ops()
        if str(request["op"]) not in known:
            msg = f"no such parse: {str(request['op'])[:200]!r}"
            raise HarnessError(msg)
        result = known[str(request["op"])](**dict(request["args"]))
    except (HarnessError, MemoryError) as e:
        json.dump({"error": str(e) or type(e).__name__}, sys.stdout)
        return 1
    except Exception as e:  # libclang's own failure (TranslationUnitLoadError after a crash it caught)
        json.dump({"error": f"libclang failed: {type(e).__name__}: {e}"}, sys.stdout)
        return 1
    json.dump({"result": result}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
