"""One error hierarchy for every stage.

Each class carries the exit code the CLI returns for it. Messages say what was
expected, what was found and what to do next.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


class HarnessError(Exception):
    """Base of every error the harness raises on purpose."""

    exit_code = 1


class UsageError(HarnessError):
    """The command line or an argument is wrong."""

    exit_code = 2


class UnknownNameError(UsageError):
    """A name (engine, variant, plugin, key) is not one we know."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        self.kind, self.name, self.known = kind, name, known
        msg = f"unknown {kind} {name!r}"
        msg += did_you_mean(name, known)
        if known:
            msg += f" (known: {', '.join(known)})"
        super().__init__(msg)


class ReportMismatchError(UsageError):
    """Reports that cannot be put side by side (different engines, pins or patch series)."""


class ConfigError(HarnessError):
    """A data file (engine.yaml, matrix row, model config) is invalid."""

    exit_code = 3


class HostError(HarnessError):
    """The host lacks something a stage needs."""

    exit_code = 4


class MissingExtraError(HostError):
    """A command needs an optional dependency group (an extra) this install lacks."""

    def __init__(self, command: str, extra: str, missing: Sequence[str], *, in_all: bool = True) -> None:
        """``in_all``: whether ``harness[all]`` pulls ``extra`` in (``test`` and ``lint`` it does not)."""
        self.command, self.extra, self.missing = command, extra, tuple(missing)
        everything = "all" if in_all else f"all,{extra}"
        super().__init__(
            f"{command} needs the `{extra}` extra ({', '.join(self.missing)} not installed): "
            f"pip install 'harness[{extra}]' (or 'harness[{everything}]'; in a checkout: "
            f"pip install -e '.[{extra}]')")


class SourceError(HarnessError):
    """Fetching or extracting a pinned source failed."""

    exit_code = 5


class ChecksumError(SourceError):
    """A downloaded file does not have the pinned sha256."""

    def __init__(self, what: str, expected: str, found: str) -> None:
        msg = (
            f"sha256 mismatch for {what}: expected {expected}, found {found}. "
            "Refusing to use it. If the pin moved on purpose, update the sha256 in the "
            "engine descriptor (harness pin); otherwise the download is corrupt or tampered."
        )
        super().__init__(msg)


class UnsafeArchiveError(SourceError):
    """An archive member would land outside the extraction directory."""


class IntegrityError(SourceError):
    """A cached tree no longer matches the manifest recorded when it was made.

    The message names the edited, added or removed files and the command that restores
    the tree (``harness fetch --repair ENGINE``).
    """


class PatchError(HarnessError):
    """A patch of the series does not apply."""

    exit_code = 6


class AbiError(HarnessError):
    """The pinned headers disagree with the committed ABI surface."""

    exit_code = 7


class BindingSurfaceError(AbiError):
    """The binding's translation units do not compile against the pinned, patched headers (C or C++):
    the binding must change; accepting a snapshot cannot fix it."""


class ArtifactIncludeError(BindingSurfaceError):
    """A header the binding compiles against is in the pinned tree but the descriptor's ``artifacts.include``
    does not collect it into the artifact: the descriptor must change, not the binding."""


class BuildError(HarnessError):
    """Configuring or building a variant failed."""

    exit_code = 8


class ArtifactError(HarnessError):
    """An artifact is missing, corrupt, or mixes pins/ABI fingerprints."""

    exit_code = 9


class ModelError(HarnessError):
    """A model file is missing, corrupt or unsupported."""

    exit_code = 10


class InsufficientMemoryError(ModelError):
    """A model (at its context and layers) does not fit the memory of its device or host: the engine's
    own estimate, with the numbers, before any weight is read. The exit code is the model's (10)."""


class EngineError(HarnessError):
    """The engine refused a request (context too large, KV full, bad sampling value)."""

    exit_code = 11


class VideoError(HarnessError):
    """A video request is invalid or rendering/muxing failed."""

    exit_code = 12


class BenchError(HarnessError):
    """A benchmark could not run or its result cannot support a claim."""

    exit_code = 13


class SubprocessError(HarnessError):
    """A command the harness ran failed: shows the command, code and output tail."""

    exit_code = 14

    def __init__(
        self, argv: Sequence[str], returncode: int, output: str, hint: str = "", tail: int = 40
    ) -> None:
        self.argv, self.returncode, self.output = list(argv), returncode, output
        lines = output.rstrip().splitlines()[-tail:]
        msg = f"command failed with exit code {returncode}: {' '.join(map(str, argv))}"
        if lines:
            msg += "\n--- last output ---\n" + "\n".join(lines)
        if hint:
            msg += f"\n{hint}"
        super().__init__(msg)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` when a close match exists, else ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ContextOverflowError(EngineError):
    """A request does not fit the engine's context."""


class KVCacheFullError(EngineError):
    """The shared KV cache ran out of cells while requests were running."""


class InvalidRequestError(EngineError, ValueError):
    """A request or sampling value is invalid (also a ValueError for callers)."""


class EngineClosedError(EngineError):
    """The engine was closed before or while the request ran."""


class SessionStateError(InvalidRequestError):
    """A saved sequence state is refused: another model, pin, state format or cache type, or damaged.
    Nothing of it was loaded."""


class BindingError(HarnessError):
    """A binding is missing, mismatched (pin/ABI handshake) or failed to build."""

    exit_code = 15


class EngineCrashError(HarnessError):
    """A process running engine code died by a signal (SIGILL, SIGSEGV, ...).

    The message names the signal, the CPU level that process had loaded and what it was
    running; ``harness engine info`` shows which levels passed the smoke probe here.
    """

    exit_code = 16


class AuditError(HarnessError):
    """A static audit found something outside its contract (an instruction a CPU level may not use)."""

    exit_code = 17


class GateUndecidedError(BenchError):
    """A benchmark gate the run could not resolve: the ratio's interval straddles the gate's floor.

    Not a pass and not a failure: run more blocks (``--blocks``, or ``--until-halfwidth`` with a
    larger ``--max-blocks``) until the interval's half-width is under the gate.
    """

    exit_code = 18


class AgreementError(HarnessError):
    """Two arms disagree beyond a gated agreement threshold (harness agree --gate, qualification)."""

    exit_code = 19


class BisectError(HarnessError):
    """A bisect could not name the commit: an endpoint is not what it was said to be (the good build fails
    the gate, the bad one passes), or the step runs stopped (the reason is in the message)."""

    exit_code = 20
