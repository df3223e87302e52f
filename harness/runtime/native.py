"""A binding's side of the engine contract (:mod:`harness.runtime.contract`): its native request and
its errors.

A binding's native request (what its ``submit`` returns) is a :class:`NativeRequest`: the
:class:`~harness.runtime.api.Stream`, :class:`~harness.runtime.api.Pending` and
:func:`~harness.runtime.api.completion_from` read it. Its errors arrive as exceptions whose class
*names* the binding exports; :data:`CORE_ERRORS` is the one place they become harness errors
(:func:`translate_error`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from harness.core import errors

#: The exception class names a binding raises (its pybind11 module registers them) -> the harness
#: error they become. Any other ``ValueError`` is a request the engine refused
#: (:class:`~harness.core.errors.InvalidRequestError`), any other ``RuntimeError`` an engine failure
#: (:class:`~harness.core.errors.EngineError`); anything else passes unchanged.
CORE_ERRORS: Mapping[str, type[errors.HarnessError]] = {
    "ContextOverflowError": errors.ContextOverflowError,
    "KVCacheFullError": errors.KVCacheFullError,
    "EngineClosedError": errors.EngineClosedError,
    "ModelLoadError": errors.ModelError,
    "InsufficientMemoryError": errors.InsufficientMemoryError,
}


def translate_error(e: BaseException) -> BaseException:
    """The harness error a binding's exception stands for (:data:`CORE_ERRORS`)."""
    cls = CORE_ERRORS.get(type(e).__name__)
    if cls is not None:
        return cls(str(e))
    if isinstance(e, ValueError):
        return errors.InvalidRequestError(str(e))
    if isinstance(e, RuntimeError):
        return errors.EngineError(str(e))
    return e


@runtime_checkable
class NativeRequest(Protocol):
    """One submitted request inside a binding (its C++ object)."""

    @property
    def done(self) -> bool: ...

    @property
    def finish_reason(self) -> str: ...

    def text(self) -> str:
        """The text generated so far."""
        ...

    def timings(self) -> Mapping[str, Any]:
        """``t_submit``, ``t_first_token``, ``t_done`` (seconds), ``n_prompt``, ``n_cached``,
        ``n_generated``; optionally ``n_steps``, ``n_drafted``, ``n_accepted``, ``n_erased``."""
        ...

    def wait(self) -> tuple[str, str, str]:
        """Block (GIL released) until done: ``(kind, text, error class name)``, kind ``"error"`` on failure."""
        ...

    def cancel(self) -> None: ...


