"""A stand-in binding ``_core`` for crash-reporting tests: no engine, the same interface.

Copied into ``<pkg>/_core.py`` of a fake binding package on ``$HARNESS_BINDING_PATH``.
The package's variant decides what it does: ``crashy`` kills its own process with
SIGILL (or the signal ``$FAKE_CRASH_SIGNAL`` names, e.g. SIGSEGV) when a request is
submitted, as a miscompiled CPU level does (with ``$FAKE_CRASH_AFTER=N``: when a streamed
request has handed out N deltas, mid-stream); ``steady`` answers "Paris". With
``$FAKE_WAIT_S`` a non-streaming request takes that long (a request in flight). An engine records
what it was given (``path``, ``params``, and each request's ``sampling`` in ``submitted``),
so tests can assert what reached the core.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import threading
import time
from pathlib import Path
from typing import Any

_IDENT = json.loads((Path(__file__).parent / "identity.json").read_text())
ABI_FINGERPRINT = None
PIN = _IDENT["pin"]
BUILD_NUMBER = 1
LEVEL = "fakelevel"
STATE_SEQ_VERSION = 4
#: What the fake's info() says about context shift and the state format (sessions).
SESSION_INFO = {"context_shift": "0", "context_erase": "0.500000", "kv_cache_type": "f16", "flash_attn": "-1",
                "state_seq_version": str(STATE_SEQ_VERSION)}


def library_build_number() -> int:
    return 1


def _crash() -> None:
    """Die by the signal on this thread, as a fault in native code does: a signal sent to the process
    (os.kill) may be taken by another thread while this one runs on for a while."""
    signal.pthread_kill(threading.get_ident(), signal.Signals[os.environ.get("FAKE_CRASH_SIGNAL", "SIGILL")])
    while True:  # the signal is taken on the way back from the call; nothing here runs on
        time.sleep(1)


#: The context (and training window) and the embedding size the fake reports.
N_CTX, N_EMBD = 256, 8
CLS, SEP = 1, 2


class ContextOverflowError(RuntimeError):
    """Named as the binding's (the runtime translates errors by class name)."""


def token_vector(token: int) -> list[float]:
    """A token's vector in the fake's embedding space: fixed, distinct per token."""
    return [math.sin((token + 1) * (k + 1)) for k in range(N_EMBD)]


#: What every request generates, as the deltas a streaming request hands out one by one.
DELTAS = (" Paris", ", and", " more.")


class _Req:
    def __init__(self) -> None:
        self.done = True
        self.finish_reason = "length"
        self._t = time.perf_counter()
        # $FAKE_FLOOD=N: N deltas of 1 KiB each instead (a stream a slow reader cannot keep up with);
        # $FAKE_DELTAS=N: N short deltas
        flood, many = int(os.environ.get("FAKE_FLOOD") or 0), int(os.environ.get("FAKE_DELTAS") or 0)
        deltas = ["x" * 1024] * flood if flood else [f" {i}" for i in range(many)] if many else list(DELTAS)
        self._events: list[tuple[str, str, str]] = [("delta", d, "") for d in deltas] + [("done", "length", "")]
        self._sent = 0
        self.reported = ""

    def wait(self) -> tuple[str, str, str]:
        time.sleep(float(os.environ.get("FAKE_WAIT_S") or 0))
        self._events = []
        return ("done", "length", "")

    def next(self) -> tuple[str, str, str] | None:
        if self._events and self._events[0][0] == "delta":  # $FAKE_DELTA_S: the time a token takes
            time.sleep(float(os.environ.get("FAKE_DELTA_S") or 0))
        after = os.environ.get("FAKE_CRASH_AFTER")
        if _IDENT["variant"] == "crashy" and after and self._sent >= int(after):
            _crash()
        if not self._events:
            return None
        kind, text, etype = self._events.pop(0)
        if kind == "delta":
            self._sent += 1
        return (kind, text, etype)

    def text(self) -> str:
        return "".join(DELTAS)

    def timings(self) -> dict[str, float]:
        return {"t_submit": self._t, "t_first_token": self._t + 0.001, "t_done": self._t + 0.002,
                "n_prompt": 4, "n_cached": 0, "n_generated": 4}

    def cancel(self) -> None:
        pass


class Engine:
    def __init__(self, path: str, params: dict[str, Any]) -> None:
        self.path = path
        self.params = params
        self.submitted: list[dict[str, Any]] = []
        self.restored: list[tuple[list[int], bytes]] = []
        # a plugin dir holding one CPU level (a forced level) loads that one, as ggml would
        found = sorted(Path(str(params.get("backend_dir") or ".")).glob("libggml-cpu-*.so"))
        self.level = found[0].name[len("libggml-cpu-"):-len(".so")] if len(found) == 1 else LEVEL

    def info(self) -> dict[str, Any]:
        return {"arch": "llama", "desc": "fake", "devices": ["CPU"], "cpu_variant": self.level, "chat_template": "",
                "n_params": 1, "size_bytes": 1, "n_ctx": N_CTX, "n_ctx_train": N_CTX, "n_embd": N_EMBD,
                "n_vocab": 359, "max_num_seqs": 1, "embedding_only": "1" if self.params.get("embeddings") else "0",
                "prefix_caching": "0", **SESSION_INFO, "context_shift": "1" if self.params.get("context_shift") else "0"}

    def submit(self, prompt: Any, sampling: Any, stream: bool) -> _Req:
        self.submitted.append({"prompt": prompt, "sampling": sampling, "stream": stream})
        if _IDENT["variant"] == "crashy" and not os.environ.get("FAKE_CRASH_AFTER"):
            _crash()
        return _Req()

    def submit_chat(self, messages: str, tools: str, choice: str, schema: str, sampling: Any, stream: bool) -> _Req:
        return self.submit(messages, sampling, stream)

    def parse_chat(self, req: _Req) -> str:
        return json.dumps({"role": "assistant", "content": req.text()})

    def chat_diffs(self, req: _Req, final: bool) -> str:
        """The content the deltas handed out so far add, as the real core's partial parse does."""
        now = req.text() if final else "".join(DELTAS[:req._sent])
        new, req.reported = now[len(req.reported):], now
        return json.dumps([{"content": new}] if new else [])

    def pump_sse(self, req: _Req, fd: int, prefix: bytes, suffix: bytes, chat: bool, write_timeout_s: float,
                 chunked: bool) -> tuple[str, int, tuple[str, str, str] | None]:
        """The real core's contract (engines/llamacpp/binding/src/sse.cpp), in Python: each delta one
        event ``prefix + JSON value + suffix`` written to ``fd`` (non-blocking, as the server's loop
        left it), in HTTP/1.1 chunks; (outcome, events written, the end event or None)."""
        events = 0

        def emit(value: str) -> str | None:
            payload = prefix + value.encode() + suffix
            data = memoryview(f"{len(payload):x}\r\n".encode() + payload + b"\r\n" if chunked else payload)
            deadline = time.monotonic() + write_timeout_s
            while data:
                try:
                    data = data[os.write(fd, data):]
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return "slow"
                    select.select([], [fd], [], min(left, 0.1))
                except OSError:
                    return "gone"
            return None

        def values(final: bool, text: str) -> list[str]:
            if chat:
                return [json.dumps(d) for d in json.loads(self.chat_diffs(req, final))]
            return [json.dumps(text)] if text else []

        while True:
            ev = req.next()
            if ev is None:
                return ("done", events, None)
            kind, text, _ = ev
            if kind == "delta" or (chat and kind == "done"):
                for v in values(kind == "done", text if kind == "delta" else ""):
                    bad = emit(v)
                    if bad is not None:
                        req.cancel()
                        return (bad, events, None)
                    events += 1
                if kind == "delta":
                    continue
            return ("done", events, ev)

    def embed(self, texts: list[str], normalize: bool) -> list[list[float]]:
        """As a mean-pooling model (MiniLM) embeds: the mean of its tokens' vectors, [CLS] and [SEP]
        included, refused beyond the window as llama.cpp's position embeddings would be."""
        out = []
        for t in texts:
            ids = self.tokenize(t, True, False)
            if len(ids) > N_CTX:
                msg = f"text of {len(ids)} tokens exceeds the embedding batch of {N_CTX}"
                raise ContextOverflowError(msg)
            v = [sum(token_vector(i)[k] for i in ids) / len(ids) for k in range(N_EMBD)]
            norm = sum(x * x for x in v) ** 0.5 if normalize else 1.0
            out.append([x / norm for x in v])
        return out

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        """A token per character; an embedding model adds [CLS] (1) and [SEP] (2) as BERT's does."""
        ids = [ord(c) % 300 for c in text]
        return [CLS, *ids, SEP] if add_special and self.params.get("embeddings") else ids

    def detokenize(self, tokens: list[int], special: bool) -> str:
        return "".join(chr(t) for t in tokens if t not in (CLS, SEP) or special)

    # sessions: the fake's one sequence holds the last prompt's tokens (or the last state restored);
    # a state's payload is its tokens as JSON
    def chat_tokens(self, messages: str) -> list[int]:
        return [ord(c) % 300 for c in messages]

    def save_state(self, history: list[int]) -> tuple[list[int], bytes, int]:
        held = self.restored[-1][0] if self.restored else (
            [ord(c) % 300 for c in str(self.submitted[-1]["prompt"])] if self.submitted else [])
        if not held:
            raise ValueError("no idle sequence holds a conversation to save")
        shared = 0
        while shared < min(len(held), len(history)) and held[shared] == history[shared]:
            shared += 1
        return held, json.dumps(held).encode(), shared

    def restore_state(self, tokens: list[int], data: Any) -> tuple[int, bool]:
        if json.loads(bytes(data)) != list(tokens):
            raise ValueError("the state was not loaded: its cells are not its tokens")
        self.restored.append((list(tokens), bytes(data)))
        return len(tokens), True

    def stats(self) -> dict[str, int]:
        return {"active": 0, "pending": 0}

    def close(self) -> None:
        pass


if os.environ.get("FAKE_NO_PUMP"):  # a core without the direct-stream writer (another engine, an older binding)
    del Engine.pump_sse
