"""The request body: read as JSON within bounds (size, time, nesting, encoding, media type),
each way it can be malformed or too slow refused as a 4xx that names the problem."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import ClientDisconnect, Request

from harness.serve import protocol
from harness.serve.protocol import APIError

#: The request body arrives within this many seconds of its headers, else 408.
BODY_TIMEOUT_S = 30.0


def _refuse_content_type(request: Request) -> None:
    """A body sent as something else than JSON is refused (415); no Content-Type at all is read as JSON."""
    ctype = request.headers.get("content-type")
    if ctype is None:
        return
    media, _, params = ctype.partition(";")
    media = media.strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise APIError(415, f"Content-Type {media or ctype!r} is not JSON: send the request body as application/json",
                       code="unsupported_media_type")
    charset = next((v.strip().strip('"').lower() for k, _, v in (p.partition("=") for p in params.split(";"))
                    if k.strip().lower() == "charset"), "utf-8")
    if charset not in ("utf-8", "utf8"):
        raise APIError(415, f"Content-Type charset {charset!r}: the request body must be UTF-8 JSON",
                       code="unsupported_media_type")


async def _raw_body(request: Request, timeout_s: float) -> bytes:
    """The body, refused (413) by its Content-Length before a byte is read, or as soon as the bytes
    read pass :data:`protocol.MAX_BODY_BYTES` (a chunked body): never buffered past the bound; and
    refused (408) when it has not all arrived ``timeout_s`` after the headers (a slow-body client)."""
    limit = protocol.MAX_BODY_BYTES
    size = request.headers.get("content-length")
    if size is not None:
        if not size.strip().isdigit():
            raise APIError(400, f"Content-Length {size!r} is not a byte count")
        if int(size) > limit:
            raise APIError(413, f"request body of {int(size)} bytes is larger than the limit of {limit} bytes",
                           code="request_too_large")
    chunks: list[bytes] = []
    n = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                n += len(chunk)
                if n > limit:
                    raise APIError(413, f"request body is larger than the limit of {limit} bytes",
                                   code="request_too_large")
                chunks.append(chunk)
    except ClientDisconnect:
        # nobody is left to answer: the 400 is never sent, but the request is counted as refused,
        # not logged as a server error
        of = f" of {int(size)}" if size is not None else ""
        raise APIError(400, f"the client closed the connection while sending its body ({n}{of} bytes came)",
                       code="client_disconnected", headers={"Connection": "close"}) from None
    except TimeoutError:
        of = f" of {int(size)}" if size is not None else ""
        raise APIError(408, f"the request body did not arrive within {timeout_s:g} s ({n}{of} bytes came): "
                            "send the body with the headers", code="request_timeout",
                       headers={"Connection": "close"}) from None
    return b"".join(chunks)


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays/objects more than ``limit`` deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return True
        children = v.values() if isinstance(v, dict) else v
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return False


async def read_json(request: Request, timeout_s: float = BODY_TIMEOUT_S) -> Any:
    """The request's JSON body (its size in bytes noted as ``request.state.body_bytes``); each way it can be
    malformed (or too slow) is a 4xx naming the problem."""
    _refuse_content_type(request)
    raw = await _raw_body(request, timeout_s)
    request.state.body_bytes = len(raw)  # what a queued request is counted as holding (harness.serve.admission)
    if not raw.strip():
        raise protocol.invalid(None, "the request body is empty: send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise protocol.invalid(None, f"the request body is not valid UTF-8: byte 0x{raw[e.start]:02x} at offset "
                                     f"{e.start} ({e.reason})", code="invalid_utf8") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as e:
        # the input ran out inside a value (a string never closed is one too)
        if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string"):
            raise protocol.invalid(None, f"the request body is truncated JSON: it ends after {len(raw)} bytes "
                                         f"before the value is complete ({e.msg})", code="invalid_json") from None
        raise protocol.invalid(None, f"the request body is not JSON: {e}", code="invalid_json") from None
    except RecursionError:
        deep = True
    else:
        deep = _depth_over(body, protocol.MAX_JSON_DEPTH)
    if deep:
        raise protocol.invalid(None, f"the request body nests arrays/objects deeper than {protocol.MAX_JSON_DEPTH} "
                                     "levels", code="too_deep")
    return body
