"""Bench arms over HTTP, measured client-side: ``server`` (``harness serve``) and ``llama-server``
(the artifact's own ``bin/llama-server``), started with the same settings.

Both serve one model with ``max_num_seqs`` parallel sequences sharing one unified KV pool of
``n_ctx`` cells, ``threads`` compute threads, batch 512, no prompt cache; the arm's worker sends
each request to ``/v1/completions`` as token ids (the same prompts the ``in-process``
arm uses), greedy, ``ignore_eos``, streamed, and times the server-sent events it reads: time to
the first text, then decode tokens/s between the first and the last text. One client thread reads
every stream of a measurement, only reading and stamping bytes while they run and parsing them
after (:meth:`_HttpArm._streams`): on a host whose cores the server's engine fills, the client's
CPU per event is taken from the server under test. Either server starts with
an engine process's environment (:func:`harness.core.hugepages.engine_env`), as every arm's does.
"""

from __future__ import annotations

import json
import selectors
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import h11
import httpx

from harness import __version__
from harness.core import hugepages
from harness.core.errors import BenchError
from harness.core.pyexec import python_argv
from harness_plugins.llamacpp.bench import (
    _metrics,
    _model_facts,
    _opts,
    n_vocab_of,
    synthetic_prompt,
)

#: Seconds a server gets to load its model and answer /health.
START_TIMEOUT_S = 180.0
#: Seconds a stream may go without a byte before the request counts as failed.
STREAM_TIMEOUT_S = 3600.0
BATCH = 512


def _parse_stream(kind: str, reads: list[tuple[float, bytes]]) -> tuple[float, float, bool, dict[str, Any]]:
    """(time of the first event with text, of the last, whether the response ended, the server's own
    ``timings`` object or {}) of a streamed /v1/completions response read as ``reads`` (when each
    read came back, its bytes). Both servers send llama-server's ``timings`` with the last event."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="POST", target="/v1/completions", headers=[("Host", "127.0.0.1")]))
    conn.send(h11.EndOfMessage())
    first = last = 0.0
    timings: dict[str, Any] = {}
    status, pending, error = 0, b"", b""
    for at, data in reads:
        conn.receive_data(data)
        while True:
            try:
                ev = conn.next_event()
            except h11.RemoteProtocolError as e:
                raise BenchError(f"{kind}: not an HTTP response: {e}") from e
            if ev is h11.NEED_DATA or ev is h11.PAUSED:
                break
            if isinstance(ev, h11.Response):
                status = ev.status_code
            elif isinstance(ev, h11.Data):
                if status != 200:
                    error += ev.data
                    continue
                pending += ev.data
                *events, pending = pending.replace(b"\r\n", b"\n").split(b"\n\n")  # SSE lines may end in CRLF
                for event in events:
                    for line in event.split(b"\n"):
                        if not line.startswith(b"data:"):
                            continue
                        value = line[6:] if line.startswith(b"data: ") else line[5:]
                        if value == b"[DONE]":
                            continue
                        chunk = json.loads(value)
                        if "error" in chunk:
                            raise BenchError(f"{kind}: {chunk['error']}")
                        if any(c.get("text") for c in chunk.get("choices", ())):
                            last = at
                            first = first or at
                        if isinstance(chunk.get("timings"), dict):
                            timings = chunk["timings"]
            elif isinstance(ev, h11.EndOfMessage):
                if status != 200:
                    raise BenchError(f"{kind}: HTTP {status}: {error[:500]!r}")
                return first, last, True, timings
    if status and status != 200:
        raise BenchError(f"{kind}: HTTP {status}: {error[:500]!r}")
    return first, last, False, timings


def _engine_side(timings: dict[str, Any]) -> tuple[float, float] | None:
    """(TTFT s, decode tok/s) as the server's engine measured them, from llama-server's ``timings``
    (``prompt_ms``; ``predicted_n`` tokens over ``predicted_ms``, which starts at the first token: the
    rate is taken over the n - 1 tokens after it, as the client's is); None when absent."""
    try:
        prompt_ms, n, ms = float(timings["prompt_ms"]), int(timings["predicted_n"]), float(timings["predicted_ms"])
    except (KeyError, TypeError, ValueError):
        return None
    return prompt_ms / 1e3, (n - 1) / (ms / 1e3) if n > 1 and ms > 0 else 0.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _HttpArm:
    """A server child process on 127.0.0.1 and the client that measures it."""

    kind = ""
    extra_body: dict[str, Any] = {}  # noqa: RUF012 - read-only per class

    def __init__(self, options: dict[str, Any]) -> None:
        self.opts = _opts(options)
        self.opts.setdefault("max_num_seqs", 4)
        #: per request of the last measurement: (TTFT s, decode tok/s) from the server's ``timings``
        self.engine_side: list[tuple[float, float] | None] = []
        self.n_vocab = n_vocab_of(self.opts["model"])
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._tmp = tempfile.TemporaryDirectory(prefix=f"harness-{self.kind}-")
        self.log = Path(self._tmp.name) / "server.log"
        argv, env = self._command(Path(self._tmp.name))
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.argv = argv
        # A connection per request, for both arms: llama-server drops idle keep-alive connections,
        # and a request sent on one it just closed fails without an answer.
        self.client = httpx.Client(base_url=self.base, timeout=httpx.Timeout(3600.0, connect=30.0),
                                   limits=httpx.Limits(max_connections=256, max_keepalive_connections=0))
        self._wait_ready()

    def _command(self, tmp: Path) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                msg = f"{self.kind} exited with {self.proc.returncode} while starting:\n{self.log.read_text()[-3000:]}"
                raise BenchError(msg)
            try:
                if self.client.get("/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.close()
                msg = f"{self.kind} did not answer /health within {START_TIMEOUT_S:.0f} s; log: {self.log}"
                raise BenchError(msg)
            time.sleep(0.2)

    def _one(self, prompt: list[int], gn: int) -> tuple[float, float, int]:
        """(ttft_s, decode tok/s, generated) of one streamed request, timed as the client reads it."""
        return self._streams([prompt], gn)[0][0]

    def _streams(self, prompts: list[list[int]], gn: int) -> tuple[list[tuple[float, float, int]], float]:
        """Each prompt one streamed request, all at once, read by this one thread: (ttft_s, decode tok/s,
        generated) per request as the client reads it, and the wall time of the whole.

        The client does nothing per event while the streams run but read and stamp the bytes (one
        ``select`` wake-up serves every stream with bytes waiting, then a ``recv`` each: ~0.05 ms of
        CPU per event, against ~0.2 ms for httpx's line iterator and a JSON parse in a thread per
        request, CPU the server under test would lose on a small host); h11 parses each response once
        it has ended, each event timed by the read that completed it.
        """
        n = len(prompts)
        reads: list[list[tuple[float, bytes]]] = [[] for _ in range(n)]
        sent = [0.0] * n
        sel = selectors.DefaultSelector()
        socks: list[socket.socket] = []
        try:
            begin = time.perf_counter()
            for i, prompt in enumerate(prompts):
                body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": gn, "temperature": 0,
                                   "stream": True, "ignore_eos": True, **self.extra_body}).encode()
                head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                        "Connection: close\r\n\r\n").encode()
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=STREAM_TIMEOUT_S)
                socks.append(sock)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sent[i] = time.perf_counter()
                sock.sendall(head + body)
                sock.setblocking(False)
                sel.register(sock, selectors.EVENT_READ, i)
            left = n
            while left:
                ready = sel.select(timeout=STREAM_TIMEOUT_S)
                if not ready:
                    msg = f"{self.kind}: no byte of {left} open stream(s) for {STREAM_TIMEOUT_S:.0f} s"
                    raise BenchError(msg)
                now = time.perf_counter()
                for key, _ in ready:
                    i = int(key.data)
                    try:
                        data = socks[i].recv(1 << 18)
                    except BlockingIOError:
                        continue
                    if data:
                        reads[i].append((now, data))
                    # "Connection: close" ends a stream; a chunked body's last chunk ends it as well
                    if not data or (data.endswith(b"0\r\n\r\n") and _parse_stream(self.kind, reads[i])[2]):
                        sel.unregister(socks[i])
                        left -= 1
            wall = time.perf_counter() - begin
        finally:
            sel.close()
            for sock in socks:
                sock.close()
        out = []
        self.engine_side = []
        for i in range(n):
            first, last, _, timings = _parse_stream(self.kind, reads[i])
            if not first:
                raise BenchError(f"{self.kind}: the stream carried no text")
            decode = (gn - 1) / (last - first) if gn > 1 and last > first else 0.0
            out.append((first - sent[i], decode, gn))
            self.engine_side.append(_engine_side(timings))
        return out, wall

    def warmup(self) -> None:
        self._one(synthetic_prompt(64, self.n_vocab), 8)

    def measure(self, pn: int, gn: int, concurrency: int) -> dict[str, Any]:
        prompts = [synthetic_prompt(pn, self.n_vocab, salt=i) for i in range(concurrency)]
        done, wall = self._streams(prompts, gn)
        out = _metrics(pn, wall, done)
        # the server's own figures beside the client's: what a gap owes to delivery, what to the engine
        if self.engine_side and all(e is not None for e in self.engine_side):
            out["engine_ttft_s"] = max(e[0] for e in self.engine_side if e)
            out["engine_decode_tps"] = sum(e[1] for e in self.engine_side if e) / len(self.engine_side)
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "engine": "llamacpp", "argv": self.argv, "versions": {"harness": __version__},
                "options": self.opts, "model": _model_facts(self.opts["model"])}

    def close(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._tmp.cleanup()


class ServerArm(_HttpArm):
    """``harness serve`` on a model config written from the options (``variant`` picks the binding)."""

    kind = "server"

    def _command(self, tmp: Path) -> tuple[list[str], dict[str, str]]:
        model = Path(self.opts["model"]).resolve()
        config = tmp / "bench.yaml"
        config.write_text(
            "name: bench\nbackend: llamacpp\n"
            f"context_size: {int(self.opts['n_ctx'])}\n"
            f"parameters:\n  model: {model.name}\n"
            "options:\n"
            f"  - n_parallel:{int(self.opts['max_num_seqs'])}\n"
            f"  - threads:{int(self.opts['threads'])}\n"
            "  - enable_prefix_caching:false\n"
            f"engine_args:\n  n_batch: {BATCH}\n")
        argv = [*python_argv("-m", "harness"), "serve", str(config), "--models-dir", str(model.parent),
                "--port", str(self.port), "--max-queue", "256", "--log-level", "error"]
        if self.opts.get("variant"):
            argv += ["--variant", str(self.opts["variant"])]
        return argv, hugepages.engine_env()

    def describe(self) -> dict[str, Any]:
        health = self.client.get("/health").json()
        return {**super().describe(), "health": health}


class LlamaServerArm(_HttpArm):
    """The artifact's ``bin/llama-server`` (``artifact=DIR``, default: the built ``variant``, cpu)."""

    kind = "llama-server"
    extra_body = {"cache_prompt": False}  # noqa: RUF012

    def _command(self, tmp: Path) -> tuple[list[str], dict[str, str]]:
        artifact = Path(str(self.opts.get("artifact") or self._default_artifact())).expanduser()
        exe = artifact / "bin" / "llama-server"
        if not exe.is_file():
            msg = f"no llama-server in {artifact}: give artifact=DIR of a built artifact (harness artifacts lists them)"
            raise BenchError(msg)
        self.manifest = json.loads((artifact / "manifest.json").read_text())
        t, s = str(int(self.opts["threads"])), str(int(self.opts["max_num_seqs"]))
        argv = [str(exe), "-m", self.opts["model"], "-t", t, "-tb", t, "-c", str(int(self.opts["n_ctx"])), "-np", s,
                "-kvu", "-b", str(BATCH), "-ub", str(BATCH), "--no-cache-prompt", "--host", "127.0.0.1",
                "--port", str(self.port), "--no-webui"]
        return argv, hugepages.engine_env()

    def _default_artifact(self) -> Path:
        from harness.build.cmake import artifact_dir
        from harness.build.matrix import get_variant
        from harness.engine.descriptor import load_engine

        return artifact_dir(load_engine("llamacpp"), get_variant(str(self.opts.get("variant", "cpu"))))

    def describe(self) -> dict[str, Any]:
        m = self.manifest
        return {**super().describe(), "pin": m.get("pin"), "variant": m.get("variant"), "upstream": m.get("upstream"),
                "abi_fingerprint": m.get("abi_fingerprint")}
