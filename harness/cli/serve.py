"""``harness serve CONFIG...``: load validated model configs and serve them over HTTP."""

from __future__ import annotations

import argparse
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, UsageError

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
  POST /v1/embeddings          configs with embeddings: true
  GET  /health                 models with requests in flight, capacity, active and queued
  GET  /metrics                Prometheus: requests, tokens, queue depth, time to first token

Each config's sampling values (temperature, max_tokens, stop, ...) are the request defaults; a
request's own values win. A model takes as many requests as its engine runs in parallel
(n_parallel) plus --max-queue waiting; beyond that the answer is 429 with Retry-After.
"""


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
    p.add_argument("--max-queue", type=int, default=None,
                   help="requests that may wait per model beyond its parallel sequences (default 4 x n_parallel)")
    p.add_argument("--variant", default=None, help="backend variant (default: the best installed here)")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default warning)")
    p.set_defaults(func=cmd_serve, extras=('serve',))


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    host: str
    port: int
    api_key: str | None
    max_queue: int | None


def check_options(host: str, port: int, api_key: str | None, max_queue: int | None) -> ServeOptions:
    """The serve options, refused with the reason when unsafe or out of range."""
    if not 0 <= port <= 65535:
        msg = f"--port must be in [0, 65535], got {port}"
        raise UsageError(msg)
    if max_queue is not None and not 0 <= max_queue <= 1 << 16:
        msg = f"--max-queue must be in [0, 65536], got {max_queue}"
        raise UsageError(msg)
    if api_key is not None and not api_key.strip():
        msg = "--api-key is empty: give a key, or leave the option out to serve without one"
        raise UsageError(msg)
    if not _is_loopback(host) and api_key is None:
        msg = (f"--host {host} is reachable from other machines: give --api-key KEY (or ${API_KEY_ENV}) so that "
               "only clients with the key are served, or bind 127.0.0.1")
        raise UsageError(msg)
    return ServeOptions(host=host, port=port, api_key=api_key, max_queue=max_queue)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_models(configs: list[Path], *, models_dir: Path | None, variant: str | None,
                max_queue: int | None) -> dict[str, Any]:
    """name -> :class:`~harness.serve.app.ServedModel` for each config, loaded as ``Runtime.load(config=...)``."""
    from harness.config.effective import load_config_file
    from harness.core import progress
    from harness.runtime import Runtime
    from harness.runtime.aio import AsyncRuntime
    from harness.serve.app import ServedModel

    models: dict[str, ServedModel] = {}
    try:
        for path in configs:
            effective = load_config_file(path, models_dir=models_dir).resolve()
            name = effective.name if effective is not None else None
            if effective is not None and not name:
                msg = f"model config {path} has no name: the API serves a config under its name: key"
                raise ConfigError(msg)
            if name is not None and name in models:
                msg = f"two configs are named {name!r} ({models[name].config} and {path}): a model id must be unique"
                raise UsageError(msg)
            with progress.spinner(f"load {name} ({path})"):
                # an invalid config is refused here, every diagnostic listed
                eng = Runtime.load(config=path, models_dir=models_dir, variant=variant)
            assert name is not None  # a config that loads has a resolved name
            info = eng.info()
            parallel = int(info.get("max_num_seqs", 1))
            queue = max_queue if max_queue is not None else 4 * parallel
            capacity = parallel + queue
            models[name] = ServedModel(name=name, engine=AsyncRuntime(eng, max_concurrency=capacity), capacity=capacity,
                                       embeddings=bool(info.get("embedding_only")), config=str(path),
                                       context=int(info.get("n_ctx") or 0))
            progress.info(f"{name}: {info.get('desc', '')}, {parallel} parallel + {queue} queued, "
                          f"variant {info.get('variant')} ({info.get('cpu_variant') or '-'})")
    except BaseException:
        for m in models.values():
            m.engine.engine.close()
        raise
    return models


def cmd_serve(args: argparse.Namespace) -> int:
    import signal

    from harness.core import crash

    # the engines run in a child: a crash in one is reported by signal and CPU level (exit 16)
    code = crash.supervise(getattr(args, "argv", None), "harness serve")
    if code is not None:
        return code

    import uvicorn

    from harness.core import progress
    from harness.serve.app import create_app

    # an empty $HARNESS_API_KEY is unset; an empty --api-key is a mistake check_options names
    key = args.api_key if args.api_key is not None else (os.environ.get(API_KEY_ENV) or None)
    opts = check_options(args.host, args.port, key, args.max_queue)
    models = load_models(list(args.configs), models_dir=args.models_dir, variant=args.variant,
                         max_queue=opts.max_queue)
    app = create_app(models, api_key=opts.api_key)
    config = uvicorn.Config(app, host=opts.host, port=opts.port, log_level=args.log_level, access_log=False,
                            timeout_graceful_shutdown=5, lifespan="off")
    server = uvicorn.Server(config)
    progress.info(f"serving {', '.join(models)} on http://{opts.host}:{opts.port}/v1"
                  + (" (bearer key required)" if opts.api_key else ""))
    # uvicorn re-raises the signal that stopped it once it has shut down: SIGTERM's default action
    # would then kill this process before the engines close, a clean stop looking like a death
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        import asyncio

        asyncio.run(server.serve())
    finally:
        signal.signal(signal.SIGTERM, previous)
        for m in models.values():
            m.engine.engine.close()
    return 0
