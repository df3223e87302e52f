"""A saved sequence state (a session): the engine's own bytes behind a header that says what they are.

Seed 003's ``llmodel_state_get_size`` / ``get_data`` / ``set_data``: a chat application switches chats by
saving the model's KV state and token cache and putting it back later, instead of prefilling the chat
again. The engine's bytes (llama.cpp's ``llama_state_seq_get_data``) say nothing about the model or
the format they belong to, and loaded into another model they are garbage that runs; so they travel
in an envelope:

    MAGIC (8 bytes) | header length (uint32, little-endian) | header (UTF-8 JSON) | payload

The header holds this envelope's ``format``, the engine's ``state`` format and its version (llama.cpp's
``LLAMA_STATE_SEQ_VERSION`` in the headers the binding was compiled against), the ``pin`` and build,
the ``model`` (sha256 of its file, size, description, parameters), the ``context`` settings (n_ctx,
KV-cache type, flash attention), the sequence's ``tokens`` and the payload's size and sha256.

:func:`unpack` refuses (:class:`~harness.core.errors.SessionStateError`) a state of another engine,
model, pin, state format or cache type, and a damaged one, before a byte of it reaches the engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.core import errors
from harness.core.inputs import read_bytes

MAGIC = b"HRNSTATE"
#: This envelope's layout; a state of another format is refused.
FORMAT = 1
#: The most header bytes read before it is parsed (a 128k-token history is ~1 MB of JSON).
MAX_HEADER = 64 << 20
_LEN = struct.Struct("<I")


@dataclass(frozen=True, kw_only=True)
class StateIdentity:
    """What a state belongs to: a state loads only into an engine whose identity matches it
    (:data:`MUST_MATCH`); ``n_ctx`` is carried, and the engine checks that the tokens fit."""

    engine: str
    state_format: str
    """the engine's state kind (the name its plugin gives the C API's sequence state)"""
    state_version: int
    """its version in the headers the binding was compiled against (the C API's sequence-state version constant)"""
    pin: str
    build: int
    model_sha256: str
    model_size: int
    model_desc: str = ""
    n_params: int = 0
    n_ctx: int = 0
    cache_type: str = ""
    flash_attn: int = -1


#: identity field -> what it is called in a refusal
MUST_MATCH: Mapping[str, str] = {
    "engine": "engine", "state_format": "state format", "state_version": "state format version",
    "pin": "engine pin", "build": "engine build", "model_sha256": "model (sha256 of its file)",
    "cache_type": "KV-cache type", "flash_attn": "flash attention setting",
}


@dataclass(frozen=True, kw_only=True)
class StateInfo:
    """What a save or a restore did."""

    n_tokens: int
    """tokens of the sequence saved or restored"""
    n_bytes: int
    """the state's size (envelope and payload)"""
    seconds: float
    n_matched: int = 0
    """save: tokens of the sequence the history asked for shares"""
    loaded: bool = True
    """restore: False when an idle sequence held the tokens already (nothing was loaded)"""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def header(identity: StateIdentity, tokens: Sequence[int], payload: bytes | memoryview) -> bytes:
    """The envelope in front of ``payload``: magic, length, JSON header."""
    body = json.dumps({
        "format": FORMAT, "identity": asdict(identity), "tokens": [int(t) for t in tokens],
        "payload": {"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()},
    }, separators=(",", ":")).encode()
    return MAGIC + _LEN.pack(len(body)) + body


def pack(identity: StateIdentity, tokens: Sequence[int], payload: bytes) -> bytes:
    """A state as one bytes object."""
    return header(identity, tokens, payload) + payload


def _refuse(why: str) -> errors.SessionStateError:
    return errors.SessionStateError(f"session state refused, nothing loaded: {why}")


def _parse_header(data: memoryview) -> tuple[dict[str, Any], int]:
    """(the header, where the payload starts); refused when it is not an envelope of this format."""
    if len(data) < len(MAGIC) + _LEN.size or bytes(data[:len(MAGIC)]) != MAGIC:
        raise _refuse(f"not a harness session state (it does not start with {MAGIC!r})")
    (n,) = _LEN.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _LEN.size
    if n > MAX_HEADER or start + n > len(data):
        raise _refuse(f"its header claims {n} bytes, the state has {len(data) - start} after the magic (damaged)")
    try:
        head = json.loads(bytes(data[start:start + n]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _refuse(f"its header is not JSON ({e}): damaged") from None
    if not isinstance(head, dict) or not isinstance(head.get("identity"), dict):
        raise _refuse("its header is not a JSON object with an identity: damaged")
    if head.get("format") != FORMAT:
        raise _refuse(f"envelope format {head.get('format')!r}, this harness reads format {FORMAT}: save it again "
                      "with this harness")
    return head, start + n


def header_of(data: bytes | memoryview) -> dict[str, Any]:
    """A state's header (identity, tokens, payload size and sha256), unchecked against any engine.

    :raises SessionStateError: not a state of this envelope's format.
    """
    return _parse_header(memoryview(data).cast("B"))[0]


def mismatches(saved: Mapping[str, Any], expected: StateIdentity) -> list[str]:
    """One line per identity field where the saved state differs from this engine."""
    want = asdict(expected)
    out = []
    for key, what in MUST_MATCH.items():
        if saved.get(key) != want[key]:
            extra = ""
            if key == "model_sha256":
                extra = f" ({saved.get('model_desc') or '?'}, {saved.get('model_size')} bytes; this engine's is " \
                        f"{expected.model_desc or '?'}, {expected.model_size} bytes)"
            out.append(f"{what}: the state's is {saved.get(key)!r}, this engine's is {want[key]!r}{extra}")
    return out


def unpack(data: bytes | memoryview, expected: StateIdentity, *, n_vocab: int) -> tuple[list[int], memoryview]:
    """The tokens and the engine's payload of a state saved for an engine like ``expected``.

    :raises SessionStateError: not a state, another format, engine, pin, model or cache type, tokens
        outside the vocabulary, or a payload whose size or sha256 is not the header's.
    """
    view = memoryview(data).cast("B")
    head, start = _parse_header(view)
    problems = mismatches(head["identity"], expected)
    if problems:
        raise _refuse("it was saved for another engine or model:\n  " + "\n  ".join(problems)
                      + "\nrestore it into the engine that saved it (same model file, pin and cache type)")
    tokens = head.get("tokens")
    if not isinstance(tokens, list) or not tokens or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n_vocab for t in tokens):
        raise _refuse(f"its tokens are not a non-empty list of token ids in [0, {n_vocab}): damaged")
    payload = view[start:]
    found = head.get("payload")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    if meta.get("size") != len(payload):
        raise _refuse(f"its payload is {len(payload)} bytes, the header says {meta.get('size')!r}: truncated or damaged")
    if hashlib.sha256(payload).hexdigest() != meta.get("sha256"):
        raise _refuse("its payload's sha256 is not the header's: damaged")
    return tokens, payload


def read_file(path: str | os.PathLike[str]) -> bytes:
    """A state file, read as every input is (a regular file, not a link, within the ``session`` limit)."""
    return read_bytes(path, kind="session", error=errors.SessionStateError, nofollow=True)


def write_file(path: str | os.PathLike[str], head: bytes, payload: bytes | memoryview) -> int:
    """Write a state file atomically (a temporary file beside it, then renamed over it): a reader
    never sees half a state, and two saves of one name leave one of them whole. Returns its size."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head)
            f.write(payload)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return len(head) + len(payload)
