"""The contract between the runtime and an engine plugin: what a loaded engine and its native
requests are, as Protocols, and the one table that maps a binding's C++ errors to the harness's.

An engine plugin's loaded engine (what ``Runtime.load`` returns) implements :class:`TextEngine`;
the capabilities beyond text are Protocols of their own, each claimed whole or not at all:

========================  ==========================================================
Protocol                  methods
========================  ==========================================================
:class:`TextEngine`       ``load`` (classmethod), ``complete``, ``start``, ``stream``,
                          ``info``, ``close``
:class:`ChatEngine`       ``chat``, ``start_chat``, ``chat_stream``: parsed messages
                          and tool calls (:class:`~harness.runtime.api.ChatResult`)
:class:`EmbeddingEngine`  ``embed``
:class:`TokenEngine`      ``tokenize``, ``detokenize``, ``evaluate`` (log-probs for
                          ``harness agree``)
:class:`SessionEngine`    ``save_state``, ``restore_state`` and their ``_file`` forms: a
                          sequence's state (:mod:`harness.runtime.state`)
:class:`VideoEngine`      ``video_generate`` (a module-level function of the plugin)
========================  ==========================================================

A plugin states what it claims in its engine module, where ``mypy --strict`` checks it (the nox
``lint`` and ``tests`` sessions run mypy over the plugins too)::

    if TYPE_CHECKING:
        _claims: tuple[type[TextEngine], type[ChatEngine]] = (Engine, Engine)

and a video plugin its module (``_claims: VideoEngine = sys.modules[__name__]`` cannot be typed;
a one-line ``contract.py`` beside it does ``from harness_plugins import NAME``, ``_: VideoEngine = NAME``).

A binding's native request and its errors: :mod:`harness.runtime.native`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    import numpy as np

    from harness.config.effective import Effective
    from harness.runtime.api import ChatResult, ChatStream, Completion, Pending, Stream
    from harness.runtime.sampling import Sampling
    from harness.runtime.state import StateInfo
    from harness.video.job import EngineOutput, VideoJob

@runtime_checkable
class TextEngine(Protocol):
    """A loaded text model: completions, blocking, submitted and streamed."""

    @classmethod
    def load(cls, model: str | Path, *, variant: str | None = None, effective: Effective | None = None,
             **engine_args: Any) -> TextEngine: ...

    def complete(self, prompt: str, sampling: Sampling | dict[str, Any] | None = None,
                 **overrides: Any) -> Completion: ...

    def start(self, prompt: str, sampling: Sampling | dict[str, Any] | None = None,
              **overrides: Any) -> Pending[Completion]: ...

    def stream(self, prompt: str, sampling: Sampling | dict[str, Any] | None = None, **overrides: Any) -> Stream: ...

    def info(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@runtime_checkable
class ChatEngine(Protocol):
    """Chat with the model's own template; tool calls parsed."""

    def chat(self, messages: Sequence[dict[str, Any]], *, tools: Sequence[dict[str, Any]] | None = None,
             tool_choice: str | dict[str, Any] = "auto", sampling: Sampling | dict[str, Any] | None = None,
             response_format: dict[str, Any] | None = None, **overrides: Any) -> ChatResult: ...

    def start_chat(self, messages: Sequence[dict[str, Any]], *, tools: Sequence[dict[str, Any]] | None = None,
                   tool_choice: str | dict[str, Any] = "auto", sampling: Sampling | dict[str, Any] | None = None,
                   response_format: dict[str, Any] | None = None, **overrides: Any) -> Pending[ChatResult]: ...

    def chat_stream(self, messages: Sequence[dict[str, Any]], *, tools: Sequence[dict[str, Any]] | None = None,
                    tool_choice: str | dict[str, Any] = "auto", sampling: Sampling | dict[str, Any] | None = None,
                    response_format: dict[str, Any] | None = None, **overrides: Any) -> ChatStream: ...


@runtime_checkable
class EmbeddingEngine(Protocol):
    """Sentence embeddings, one row per text: ``dimensions`` (OpenAI's) and ``long_text_mode``
    (``mean`` | ``truncate``, GPT4All's) as :mod:`harness.runtime.embeddings` defines them."""

    def embed(self, texts: Sequence[str], *, normalize: bool = True, dimensions: int | None = None,
              long_text_mode: str | None = None) -> np.ndarray[Any, np.dtype[np.float32]]: ...


@runtime_checkable
class TokenEngine(Protocol):
    """The vocabulary and per-position log-probabilities (``harness agree``)."""

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...

    def evaluate(self, sequences: Sequence[Sequence[int]], *, chunk: int | None = None,
                 log_softmax: bool = True) -> list[np.ndarray[Any, np.dtype[np.float32]]]: ...


@runtime_checkable
class SessionEngine(Protocol):
    """A sequence's state saved and put back (seed 003's ``llmodel_state_*``): a conversation resumes
    without prefilling it again; a state of another model, pin or format is refused."""

    def save_state(self, history: Any = None) -> bytes: ...

    def restore_state(self, data: bytes) -> StateInfo: ...

    def save_state_file(self, path: str | Path, history: Any = None) -> StateInfo: ...

    def restore_state_file(self, path: str | Path) -> StateInfo: ...


class VideoEngine(Protocol):
    """A video engine (its plugin module): renders a validated job's frames into a directory."""

    def video_generate(self, request: VideoJob, workdir: Path, progress: Callable[[int, int], None],
                       cancel: threading.Event) -> EngineOutput: ...


#: Capability name -> Protocol, for listings (``harness engines --json``) and the contract test.
CAPABILITIES: Mapping[str, type] = {"text": TextEngine, "chat": ChatEngine, "embeddings": EmbeddingEngine,
                                    "tokens": TokenEngine, "sessions": SessionEngine}


def capabilities(engine: object) -> list[str]:
    """The capabilities a loaded engine (or its class) has, by the Protocols' method names."""
    return [name for name, proto in CAPABILITIES.items() if isinstance(engine, proto)
            or (isinstance(engine, type) and all(callable(getattr(engine, m, None)) for m in _methods(proto)))]


def _methods(proto: type) -> list[str]:
    return [m for m in vars(proto) if not m.startswith("_") and callable(getattr(proto, m, None))]
