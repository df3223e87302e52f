"""Find ffmpeg once, at load time, and check it can write what the mux needs.

The engine writes frames and a WAV but deliberately spawns no process; the mux
and the keyframe conversion are ffmpeg's. A missing ffmpeg discovered after the
render would throw away hours of work, so the video pipeline resolves it when it
is created, before any request is accepted.

Order: the explicit ``ffmpeg`` option, ``$HARNESS_FFMPEG``, ``ffmpeg`` on PATH,
then the binary bundled in the ``imageio-ffmpeg`` wheel. Install one of:
Debian/Ubuntu ``apt-get install ffmpeg``; macOS ``brew install ffmpeg``; or
``pip install imageio-ffmpeg`` (a static build with libx264 and AAC).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import HostError, SubprocessError

ENV_VAR = "HARNESS_FFMPEG"
#: AAC encoders in order of preference; ffmpeg's native one is good enough.
AAC_ENCODERS: tuple[str, ...] = ("aac", "libfdk_aac", "aac_at")
INSTALL_HINT = (
    "install ffmpeg (Debian/Ubuntu: apt-get install ffmpeg; macOS: brew install ffmpeg) "
    "or the imageio-ffmpeg wheel (pip install imageio-ffmpeg), or point the model option "
    f"'ffmpeg' or ${ENV_VAR} at a binary")


@dataclass(frozen=True, kw_only=True)
class Ffmpeg:
    """A resolved ffmpeg and what it can encode."""

    path: str
    source: str
    """How it was found: option, env, PATH or imageio-ffmpeg."""
    version: str
    encoders: frozenset[str]
    ffprobe: str | None = None
    """ffprobe next to this ffmpeg, when there is one (the wheel ships none)."""

    @property
    def aac_encoder(self) -> str | None:
        return next((e for e in AAC_ENCODERS if e in self.encoders), None)

    @property
    def video_encoder(self) -> str:
        """libx264 when present; mpeg4 otherwise (a plain fallback every build has)."""
        return "libx264" if "libx264" in self.encoders else "mpeg4"


def _run(argv: list[str], timeout: float = 60) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except OSError as e:
        msg = f"cannot run {argv[0]}: {e}; {INSTALL_HINT}"
        raise HostError(msg) from e
    except subprocess.TimeoutExpired as e:
        raise SubprocessError(argv, -1, str(e.stderr or ""), hint="timed out") from e
    if proc.returncode != 0:
        raise SubprocessError(argv, proc.returncode, proc.stdout + proc.stderr)
    return proc.stdout


def parse_encoders(listing: str) -> frozenset[str]:
    """Encoder names from ``ffmpeg -encoders`` (lines like `` A....D aac  AAC ...``)."""
    names = set()
    for line in listing.splitlines():
        parts = line.split()
        # Flag columns are six chars of [VASFXBD.]; the legend uses "=" lines.
        if (len(parts) >= 2 and len(parts[0]) == 6 and set(parts[0]) <= set("VASFXBD.")
                and parts[1] != "="):
            names.add(parts[1])
    return frozenset(names)


def _wheel_ffmpeg() -> str | None:
    try:
        import imageio_ffmpeg  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    try:
        exe = imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError:  # the wheel has no binary for this platform
        return None
    return str(exe)


def _locate(explicit: str | None, env: Mapping[str, str], search_path: str | None,
            wheel: Callable[[], str | None]) -> tuple[str, str]:
    """(path, source) following the resolution order; explicit settings never fall through."""
    def which(name: str) -> str | None:
        if os.sep in name or (os.altsep and os.altsep in name):
            p = Path(name).expanduser()
            return str(p) if p.is_file() and os.access(p, os.X_OK) else None
        return shutil.which(name, path=search_path)

    for value, source, label in ((explicit, "option", "model option 'ffmpeg'"),
                                 (env.get(ENV_VAR) or None, "env", f"${ENV_VAR}")):
        if value:
            found = which(value)
            if found is None:
                # A configured ffmpeg that is missing is a mistake to fix, not to paper over.
                msg = f"{label} is {value!r}, which is not an executable; fix it or unset it"
                raise HostError(msg)
            return found, source
    found = shutil.which("ffmpeg", path=search_path)
    if found:
        return found, "PATH"
    found = wheel()
    if found:
        return found, "imageio-ffmpeg"
    msg = f"ffmpeg not found (looked at the 'ffmpeg' option, ${ENV_VAR}, PATH, imageio-ffmpeg); {INSTALL_HINT}"
    raise HostError(msg)


def _sibling_ffprobe(ffmpeg: str) -> str | None:
    # Only a sibling: a random ffprobe from PATH may be another build with other codecs.
    p = Path(ffmpeg)
    name = "ffprobe" + (".exe" if p.suffix.lower() == ".exe" else "")
    candidate = p.with_name(name)
    return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None


def resolve_ffmpeg(
    explicit: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    search_path: str | None = None,
    wheel: Callable[[], str | None] = _wheel_ffmpeg,
    require_aac: bool = True,
) -> Ffmpeg:
    """Find ffmpeg and check its encoders.

    :param explicit: the model's ``ffmpeg`` option (path or name).
    :param env: environment to read ``HARNESS_FFMPEG`` from (default ``os.environ``).
    :param search_path: PATH to search (default the process PATH).
    :param wheel: finder for the imageio-ffmpeg binary (tests replace it).
    :raises HostError: no ffmpeg, or one without an AAC encoder.
    """
    path, source = _locate(explicit, os.environ if env is None else env, search_path, wheel)
    version_out = _run([path, "-version"]).strip()
    version = version_out.splitlines()[0] if version_out else "unknown"
    encoders = parse_encoders(_run([path, "-hide_banner", "-encoders"]))
    ff = Ffmpeg(path=path, source=source, version=version, encoders=encoders,
                ffprobe=_sibling_ffprobe(path))
    if require_aac and ff.aac_encoder is None:
        msg = (f"ffmpeg {path} (from {source}) has no AAC encoder; the MP4 needs a real AAC "
               f"track. Use a full build: {INSTALL_HINT}")
        raise HostError(msg)
    if "libx264" not in encoders and "mpeg4" not in encoders:
        msg = f"ffmpeg {path} (from {source}) has neither libx264 nor mpeg4; {INSTALL_HINT}"
        raise HostError(msg)
    return ff


_cache: dict[tuple[str | None, str | None], Ffmpeg] = {}


def get_ffmpeg(explicit: str | None = None) -> Ffmpeg:
    """:func:`resolve_ffmpeg` once per (option, $HARNESS_FFMPEG) in this process."""
    key = (explicit, os.environ.get(ENV_VAR))
    if key not in _cache:
        _cache[key] = resolve_ffmpeg(explicit)
    return _cache[key]
