"""``harness serve``'s sessions: a conversation's state saved to a file and put back, by name.

llama-server's slot save and restore (``POST /slots/{id}?action=save|restore|erase`` with files under
``--slot-save-path``), with a session name where llama-server has a slot id::

    POST /sessions/{name}?action=save     {"model": M, "messages": [...]}  (or "prompt": text or token ids;
                                          neither: the sequence used last)
    POST /sessions/{name}?action=restore  {"model": M}
    POST /sessions/{name}?action=erase    {"model": M}

Why a name, not a slot id: the engine picks a sequence for each request itself (the longest cached
prefix, continuous batching), so a client can neither name one nor keep it idle; it names its chat.
Why calls of their own, not a ``session`` field on each request: a state is large (about 23 KB a token
for SmolLM2-135M, gigabytes for a long chat on a large model) and the client knows when it switches
away from a chat and back, as GPT4All's chat application saves and restores on a switch; a field would
write the state after every turn. After a restore, the next request starting with the chat reuses
its tokens instead of prefilling them.

Files are ``<sessions dir>/<model>/<name>.state`` (``harness serve --sessions-dir``, default
``<models dir>/sessions``); a name is a plain file name (no ``/``, no ``..``), a link in its place is
not followed, and a state of another model, pin or format is refused by the engine (400).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from starlette.responses import JSONResponse

from harness.serve import protocol
from harness.serve.protocol import APIError

if TYPE_CHECKING:
    from starlette.requests import Request


class Served(Protocol):
    """What a session needs of a served model (:class:`harness.serve.app.ServedModel` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def embeddings(self) -> bool: ...
    @property
    def sessions(self) -> Path | None: ...
    @property
    def engine(self) -> Any:
        """its runtime: ``save_state_file`` and ``restore_state_file`` awaited"""


#: A session (and a model directory) name: a plain file name.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SUFFIX = ".state"
ACTIONS = ("save", "restore", "erase")


def plain_name(name: str) -> bool:
    return NAME.fullmatch(name) is not None and ".." not in name


def session_name(name: str) -> str:
    """``name`` when it is a plain file name, else a 400 saying what one is."""
    if not plain_name(name):
        raise APIError(400, f"session name {name[:80]!r} is not a plain name: 1 to 128 letters, digits, '.', '_' or "
                            "'-', starting with a letter or digit, without '..' (no '/')",
                       param="name", code="invalid_session_name")
    return name


def model_dir(root: Path, model: str) -> Path:
    """``root/<model>``, made when missing; a model name that is not a plain name is hashed. A link or a
    file in its place is refused (500: the operator's sessions directory is not as this server left it)."""
    sub = model if plain_name(model) else "model-" + hashlib.sha256(model.encode()).hexdigest()[:16]
    d = root / sub
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(d).st_mode):
        raise APIError(500, f"the sessions directory of model {model!r} ({d}) is not a directory (a link?)",
                       type="server_error")
    return d


def session_file(root: Path, model: str, name: str) -> Path:
    return model_dir(root, model) / f"{session_name(name)}{SUFFIX}"


def _saved(path: Path, name: str, model: str) -> None:
    """404 unless a regular file (not a link) is saved at ``path``."""
    try:
        ok = stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        ok = False
    if not ok:
        raise APIError(404, f"no session {name!r} is saved for model {model!r}", param="name",
                       code="session_not_found")


def _history(body: dict[str, Any]) -> Any:
    """The conversation a save names: ``messages``, else ``prompt``, else None (the sequence used last)."""
    if body.get("messages") is not None:
        if not isinstance(body["messages"], list):
            raise protocol.invalid("messages", "messages must be a list of chat messages")
        return body["messages"]
    prompt = body.get("prompt")
    if prompt is not None and not isinstance(prompt, str | list):
        raise protocol.invalid("prompt", "prompt must be a string or a list of token ids")
    return prompt


async def handle(request: Request, body: Any, models: Mapping[str, Served]) -> JSONResponse:
    """``POST /sessions/{name}?action=save|restore|erase``."""
    action = request.query_params.get("action", "")
    if action not in ACTIONS:
        raise APIError(400, f"action {action[:40]!r}: give ?action= one of {', '.join(ACTIONS)}", param="action")
    name = session_name(str(request.path_params.get("name", "")))
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise protocol.invalid("model", "the body names the model: {\"model\": ...}")
    m = models.get(body["model"])
    if m is None:
        raise APIError(404, f"model {body['model']!r} is not served here (served: {', '.join(models)})",
                       param="model", code="model_not_found")
    if m.embeddings:
        raise APIError(400, f"model {m.name!r} is an embedding model: it has no conversations to save",
                       param="model", code="model_not_supported")
    if m.sessions is None:
        raise APIError(501, "sessions are off: start harness serve with --sessions-dir DIR (or --models-dir, "
                            "whose sessions/ then holds them)", type="server_error", code="sessions_off")
    path = session_file(m.sessions, m.name, name)
    out: dict[str, Any] = {"session": name, "model": m.name, "filename": path.name}
    try:
        if action == "save":
            info = await m.engine.save_state_file(str(path), _history(body))
            out.update(n_saved=info.n_tokens, n_written=info.n_bytes, n_matched=info.n_matched,
                       timings={"save_ms": round(info.seconds * 1e3, 3)})
        elif action == "restore":
            _saved(path, name, m.name)
            info = await m.engine.restore_state_file(str(path))
            out.update(n_restored=info.n_tokens, n_read=info.n_bytes, loaded=info.loaded,
                       timings={"restore_ms": round(info.seconds * 1e3, 3)})
        else:
            _saved(path, name, m.name)
            path.unlink()
            out.update(erased=True)
    except APIError:
        raise
    except Exception as e:
        raise protocol.from_engine_error(e) from e
    return JSONResponse(out)
