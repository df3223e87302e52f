"""Sessions of the llama.cpp engine: a sequence's KV state saved and restored (seed 003's
``llmodel_state_get_size`` / ``get_data`` / ``set_data``, llama-server's slot save and restore), in
:mod:`harness.runtime.state`'s envelope.

The binding saves and restores on its engine thread, between decode steps: a save takes the idle
sequence whose cached tokens share the longest start with the history asked for; a restore puts
the state into an idle sequence as a cached prefix, which the next request starting with those
tokens reuses (prefix caching) instead of prefilling them.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from typing import Any, Protocol

from harness.core import errors
from harness.core.inputs import open_input
from harness.runtime import requests
from harness.runtime.native import translate_error
from harness.runtime.state import (
    StateIdentity,
    StateInfo,
    header,
    pack,
    read_file,
    unpack,
    write_file,
)


class Engine(Protocol):
    """What saving and restoring need of a loaded engine (:class:`harness_plugins.llamacpp.engine.Engine`)."""

    @property
    def module(self) -> Any: ...
    @property
    def core(self) -> Any: ...
    @property
    def model_path(self) -> os.PathLike[str]: ...
    @property
    def _n_vocab(self) -> int: ...
    @property
    def model_sha256(self) -> str: ...

#: What a session's history may be: chat messages, a prompt, or token ids.
History = Sequence[dict[str, Any]] | str | Sequence[int] | None
_CHUNK = 1 << 20


def model_sha256(path: os.PathLike[str] | str) -> str:
    """sha256 of the model file (read once per loaded engine: a state names its model by it)."""
    h = hashlib.sha256()
    with open_input(path, kind="model", error=errors.ModelError) as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def identity(engine: Engine) -> StateIdentity:
    """This engine's identity as a state records it."""
    version = getattr(engine.module, "STATE_SEQ_VERSION", None)
    if version is None or not hasattr(engine.core, "save_state"):
        raise errors.BindingError(f"the binding of pin {engine.module.PIN} cannot save sequence states: it was built "
                                  "from a recipe without sessions; rebuild it (harness build-binding llamacpp)")
    info = engine.core.info()
    return StateIdentity(
        engine="llamacpp", state_format="llama_state_seq", state_version=int(version), pin=str(engine.module.PIN),
        build=int(engine.module.BUILD_NUMBER), model_sha256=engine.model_sha256,
        model_size=os.stat(engine.model_path).st_size, model_desc=str(info.get("desc", "")),
        n_params=int(info.get("n_params", 0)), n_ctx=int(info.get("n_ctx", 0)),
        cache_type=str(info.get("kv_cache_type", "")), flash_attn=int(info.get("flash_attn", -1)))


def history_tokens(engine: Engine, history: History) -> list[int]:
    """The tokens a history stands for: chat messages as the template renders them (no generation
    prompt), a prompt as a completion tokenizes it, token ids as given; None: none (the sequence
    used last)."""
    if history is None:
        return []
    if not isinstance(history, str) and history and all(isinstance(m, dict) for m in history):
        return list(engine.core.chat_tokens(requests.messages(list(history))))
    p = requests.prompt(history, engine._n_vocab)
    return list(engine.core.tokenize(p, True, True)) if isinstance(p, str) else list(p)


def _save(engine: Engine, history: History) -> tuple[StateIdentity, list[int], bytes, int]:
    ident = identity(engine)  # first: a binding without sessions is said before any work
    wanted = history_tokens(engine, history)
    try:
        tokens, payload, matched = engine.core.save_state(wanted)
    except Exception as e:
        raise translate_error(e) from e
    return ident, list(tokens), payload, int(matched)


def save(engine: Engine, history: History) -> bytes:
    """The state of the idle sequence holding ``history`` (the one used last with None), enveloped."""
    ident, tokens, payload, _ = _save(engine, history)
    return pack(ident, tokens, payload)


def save_file(engine: Engine, path: os.PathLike[str] | str, history: History) -> StateInfo:
    """:func:`save` into a file (written atomically)."""
    t0 = time.perf_counter()
    ident, tokens, payload, matched = _save(engine, history)
    size = write_file(path, header(ident, tokens, payload), payload)
    return StateInfo(n_tokens=len(tokens), n_bytes=size, seconds=time.perf_counter() - t0, n_matched=matched)


def restore(engine: Engine, data: bytes | memoryview, *, started: float | None = None) -> StateInfo:
    """Check ``data`` against this engine and put it into an idle sequence.

    :raises SessionStateError: another model, pin, state format or cache type, or damaged.
    """
    t0 = time.perf_counter() if started is None else started
    tokens, payload = unpack(data, identity(engine), n_vocab=engine._n_vocab)
    try:
        n, loaded = engine.core.restore_state(tokens, payload)
    except Exception as e:
        raise translate_error(e) from e
    return StateInfo(n_tokens=int(n), n_bytes=len(data), seconds=time.perf_counter() - t0, loaded=bool(loaded))


def restore_file(engine: Engine, path: os.PathLike[str] | str) -> StateInfo:
    """:func:`restore` from a file."""
    t0 = time.perf_counter()
    return restore(engine, read_file(path), started=t0)
