"""``harness serve CONFIG...``: load validated model configs and serve them over HTTP."""

from __future__ import annotations

import argparse
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import UsageError
from harness.serve.admission import DEFAULT_MAX_WAIT_S

#: The environment variable ``--api-key`` falls back to (a key on the command line shows in ``ps``).
API_KEY_ENV = "HARNESS_API_KEY"

EPILOG = """\
examples:
  harness serve examples/models/smollm2-chat.yaml --models-dir ~/.cache/harness/models
  harness serve chat.yaml embed.yaml --port 8080 --api-key "$KEY"
  HARNESS_API_KEY=... harness serve chat.yaml --host 0.0.0.0

The API (OpenAI's; point the openai client's base_url at http://HOST:PORT/v1):
  GET  /v1/models              the configs served (their name: is the model id)
  POST /v1/chat/completions    messages, tools, tool_choice, response_format json_schema, stream,
                               stream_options.include_usage; extensions top_k, min_p, repeat_penalty,
                               ignore_eos
  POST /v1/completions         prompt (text or token ids), stream, grammar (GBNF)
  POST /v1/responses           the Responses API: input items (messages, function_call,
                               function_call_output), instructions, function tools, tool_choice,
                               text.format json_schema, max_output_tokens, stream (its events)
  POST /v1/embeddings          configs with embeddings: true
  POST /sessions/{name}?action=save|restore|erase
                               a conversation's state saved to a file and put back ({"model": M,
                               "messages": [...]} to save): the next request starting with the chat
                               reuses it instead of prefilling it (the slot save/restore of peer servers)
  GET  /health                 models with requests in flight, active and queued, and the queue:
                               its bounds, bytes held, expected wait, drain rate, refusals
  GET  /metrics                Prometheus: requests, tokens, the queue, time to first token

Slow clients are bounded: request headers within --header-timeout (a head still coming past
16 KiB is 431), the body within --body-timeout, and a client that reads its answer too slowly
(64 KiB left unread for --write-timeout) is disconnected, its request cancelled and its place
freed.

Each model runs in an engine worker process. An engine that crashes (a signal in native code)
ends the requests in flight on it with an error (503 engine_crashed, or that error as an event
of the stream), the log names the signal, the CPU level and those requests, and the server
exits with code 16.

Each config's sampling values (temperature, max_tokens, stop, ...) are the request defaults; a
request's own values win.

A burst queues: a model's engine takes its parallel sequences (n_parallel) and four requests per
sequence waiting; the rest wait in the model's queue, first come first served, bounded by
memory (--max-queue-memory), by the expected wait at the measured drain rate (--max-queue-wait)
and, where given, by count (--max-queue: requests waiting beyond n_parallel). A request over a
bound is answered 429 at once with Retry-After (and retry-after-ms): when the queue is expected
to have room for it, each refused client told a different time.
"""


def byte_size(text: str) -> int:
    """``--max-queue-memory``'s value: bytes, or a number with K, M, G or T (powers of 1024)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in units else ""
    try:
        value = float(t[:len(t) - len(unit)])
    except ValueError:
        msg = f"not a size: {text!r} (bytes, or a number with K, M or G, e.g. 512M)"
        raise argparse.ArgumentTypeError(msg) from None
    return int(value * units[unit])


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="serve model configs over an OpenAI-compatible HTTP API",
                       description="Load each model config (validated; the values harness config show prints) "
                                   "and serve it over an OpenAI-compatible HTTP API.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("configs", nargs="+", type=Path, metavar="CONFIG", help="model config files (LocalAI's YAML)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; another address needs --api-key)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    p.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' on /v1/* and /metrics (default ${API_KEY_ENV})")
    p.add_argument("--models-dir", type=Path, default=None,
                   help="where the configs' model paths resolve (default $HARNESS_MODELS_DIR, else beside the config)")
    p.add_argument("--sessions-dir", type=Path, default=None,
                   help="where POST /sessions/{name}?action=save|restore|erase keeps conversations' states, one "
                        "directory per model (default: sessions/ in the models directory; without one, sessions "
                        "are off)")
    p.add_argument("--max-queue", type=int, default=None,
                   help="requests that may wait per model beyond its parallel sequences (default: no count bound, "
                        "the queue is bounded by --max-queue-memory and --max-queue-wait)")
    p.add_argument("--max-queue-wait", type=float, default=DEFAULT_MAX_WAIT_S, metavar="S",
                   help="a request the queue would hold longer than S seconds at the measured drain rate is refused "
                        f"at once, 429 with Retry-After (default {DEFAULT_MAX_WAIT_S:g})")
    p.add_argument("--max-queue-memory", type=byte_size, default=None, metavar="SIZE",
                   help="bytes a model's queued requests may hold, e.g. 512M (default: 1/8 of the memory available "
                        "when the server starts)")
    p.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                   help="a request's line and headers arrive within S seconds, else 408 and the connection "
                        "is closed (default 10)")
    p.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                   help="a request's body arrives within S seconds of its headers, else 408 (default 30)")
    p.add_argument("--write-timeout", type=float, default=30.0, metavar="S",
                   help="a client that leaves 64 KiB of its answer unread for S seconds is disconnected and "
                        "its request cancelled (default 30)")
    p.add_argument("--variant", default=None, help="binding variant (default: the best installed here)")
    p.add_argument("--no-malloc-hugetlb", action="store_true",
                   help="start the engine workers without glibc's malloc hugepages (by default they get "
                        "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 on Linux with glibc 2.35+: malloc's large blocks, "
                        "the weight buffers among them, madvised for transparent hugepages, +9-22%% decode "
                        "measured under THP madvise; same as HARNESS_MALLOC_HUGETLB=0)")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default warning)")
    p.set_defaults(func=cmd_serve, extras=('serve',))


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    host: str
    port: int
    api_key: str | None
    max_queue: int | None
    timeouts: tuple[float, float, float] = (10.0, 30.0, 30.0)
    """header, body and write timeouts in seconds"""
    max_queue_wait_s: float = DEFAULT_MAX_WAIT_S
    max_queue_bytes: int | None = None
    """None: a share of the memory available"""


def check_options(host: str, port: int, api_key: str | None, max_queue: int | None,
                  timeouts: tuple[float, float, float] = (10.0, 30.0, 30.0), *,
                  max_queue_wait_s: float = DEFAULT_MAX_WAIT_S, max_queue_bytes: int | None = None) -> ServeOptions:
    """The serve options, refused with the reason when unsafe or out of range."""
    for name, value in zip(("--header-timeout", "--body-timeout", "--write-timeout"), timeouts, strict=True):
        if not 0 < value <= 3600:
            msg = f"{name} must be in (0, 3600] seconds, got {value:g}"
            raise UsageError(msg)
    if not 0 <= port <= 65535:
        msg = f"--port must be in [0, 65535], got {port}"
        raise UsageError(msg)
    if max_queue is not None and not 0 <= max_queue <= 1 << 16:
        msg = f"--max-queue must be in [0, 65536], got {max_queue}"
        raise UsageError(msg)
    if not 0 < max_queue_wait_s <= 3600:
        msg = f"--max-queue-wait must be in (0, 3600] seconds, got {max_queue_wait_s:g}"
        raise UsageError(msg)
    if max_queue_bytes is not None and not 1 << 20 <= max_queue_bytes <= 1 << 50:
        msg = f"--max-queue-memory must be at least 1M, got {max_queue_bytes} bytes"
        raise UsageError(msg)
    if api_key is not None and not api_key.strip():
        msg = "--api-key is empty: give a key, or leave the option out to serve without one"
        raise UsageError(msg)
    if not _is_loopback(host) and api_key is None:
        msg = (f"--host {host} is reachable from other machines: give --api-key KEY (or ${API_KEY_ENV}) so that "
               "only clients with the key are served, or bind 127.0.0.1")
        raise UsageError(msg)
    return ServeOptions(host=host, port=port, api_key=api_key, max_queue=max_queue, timeouts=timeouts,
                        max_queue_wait_s=max_queue_wait_s, max_queue_bytes=max_queue_bytes)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def sessions_dir(arg: Path | None, models_dir: Path | None) -> Path | None:
    """Where saved sessions go: ``--sessions-dir``, else ``sessions/`` in the models directory named
    (``--models-dir`` or ``$HARNESS_MODELS_DIR``); None (sessions off) without either."""
    if arg is not None:
        return arg
    models = models_dir or (Path(os.environ["HARNESS_MODELS_DIR"]) if os.environ.get("HARNESS_MODELS_DIR") else None)
    return models / "sessions" if models is not None else None


def cmd_serve(args: argparse.Namespace) -> int:
    from harness.core import progress
    from harness.serve.connection import ClientLimits
    from harness.serve.server import load_models, serve

    # an empty $HARNESS_API_KEY is unset; an empty --api-key is a mistake check_options names
    key = args.api_key if args.api_key is not None else (os.environ.get(API_KEY_ENV) or None)
    opts = check_options(args.host, args.port, key, args.max_queue,
                         (args.header_timeout, args.body_timeout, args.write_timeout),
                         max_queue_wait_s=args.max_queue_wait, max_queue_bytes=args.max_queue_memory)
    limits = ClientLimits(header_timeout_s=opts.timeouts[0], body_timeout_s=opts.timeouts[1],
                          write_timeout_s=opts.timeouts[2])
    # each model runs in an engine worker: a crash there is reported by signal, CPU level and the
    # requests in flight (exit 16), and those requests are answered with an error, not cut off
    models = load_models(list(args.configs), models_dir=args.models_dir, variant=args.variant,
                         max_queue=opts.max_queue, malloc_hugetlb=False if args.no_malloc_hugetlb else None,
                         max_queue_wait_s=opts.max_queue_wait_s, max_queue_bytes=opts.max_queue_bytes,
                         sessions_dir=sessions_dir(args.sessions_dir, args.models_dir))
    progress.info(f"serving {', '.join(models)} on http://{opts.host}:{opts.port}/v1"
                  + (" (bearer key required)" if opts.api_key else ""))
    serve(models, host=opts.host, port=opts.port, api_key=opts.api_key, limits=limits, log_level=args.log_level)
    return 0
