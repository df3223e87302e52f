"""Per-request validation: a whitelist of keys, each with its type.

An unknown key is a hard error, never dropped: a misspelled reference path that is
silently ignored renders the wrong thing, successfully, hours later. A few keys
that other video APIs accept (``negative_prompt``, ``cfg_scale``, a non-native
``fps``) only warn: the engine has no such knob, and refusing them would break
clients written for those APIs for no gain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from harness.errors import VideoError, did_you_mean

#: Keys a request may carry, and nothing else.
ALLOWED_KEYS: tuple[str, ...] = (
    "prompt", "start_image", "end_image", "audio", "width", "height", "num_frames",
    "steps", "seed", "noise_aug", "ref_image", "ref_video", "crf",
)
#: Keys accepted for compatibility, warned about and dropped.
IGNORED_KEYS: tuple[str, ...] = ("negative_prompt", "cfg_scale", "fps")

_STR_KEYS = ("start_image", "end_image", "audio", "ref_image", "ref_video")
_POSITIVE_INT_KEYS = ("width", "height", "num_frames", "steps")
#: Conditioning inputs that name files (keyframes may also be data: URLs).
PATH_KEYS: tuple[str, ...] = ("start_image", "end_image", "audio", "ref_image", "ref_video")


@dataclass(frozen=True, kw_only=True)
class VideoRequest:
    """One validated request, as the client sent it (geometry not resolved yet)."""

    prompt: str
    start_image: str | None = None
    end_image: str | None = None
    audio: str | None = None
    width: int | None = None
    height: int | None = None
    num_frames: int | None = None
    steps: int | None = None
    seed: int | None = None
    noise_aug: float | None = None
    ref_image: str | None = None
    ref_video: str | None = None
    crf: int | None = None

    def given(self) -> dict[str, Any]:
        """The keys the client set."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    @property
    def keyframe(self) -> str | None:
        """The keyframe whose aspect ratio shapes a derived canvas (start, else end)."""
        return self.start_image or self.end_image


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _type_error(key: str, expected: str, value: Any) -> VideoError:
    return VideoError(f"request key {key!r}: expected {expected}, found {value!r}")


def parse_request(data: Mapping[str, Any], *, native_fps: float) -> tuple[VideoRequest, list[str]]:
    """Check ``data`` against the whitelist; return the request and the warnings to show.

    :param data: the request as decoded from JSON or built from CLI flags.
    :param native_fps: the engine's fixed frame rate; a request for another warns.
    :raises VideoError: unknown keys (all of them, each with a did-you-mean), wrong types.
    """
    if not isinstance(data, Mapping):
        msg = f"a video request is a JSON object, found {type(data).__name__}"
        raise VideoError(msg)
    unknown = [k for k in data if k not in ALLOWED_KEYS and k not in IGNORED_KEYS]
    if unknown:
        known = (*ALLOWED_KEYS, *IGNORED_KEYS)
        lines = [f"  {k!r}{did_you_mean(str(k), known)}" for k in unknown]
        msg = ("unknown video request key(s):\n" + "\n".join(lines)
               + f"\nallowed keys: {', '.join(ALLOWED_KEYS)}"
               + "\nremove or rename them; unknown keys are refused, not dropped.")
        raise VideoError(msg)

    warnings: list[str] = []
    for key in ("negative_prompt", "cfg_scale"):
        if key in data:
            warnings.append(f"{key} is ignored: this engine has no negative prompt or CFG")
    if "fps" in data:
        fps = data["fps"]
        if not _is_number(fps) or fps <= 0:
            raise _type_error("fps", "a positive number", fps)
        if not math.isclose(float(fps), native_fps, rel_tol=1e-6):
            warnings.append(
                f"fps={fps:g} is ignored: the engine renders at its native {native_fps:g} fps "
                "and another rate would desynchronise the jointly generated audio")

    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise _type_error("prompt", "a non-empty string", prompt)
    values: dict[str, Any] = {"prompt": prompt}
    for key in _STR_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise _type_error(key, "a file path or data: URL string", value)
        values[key] = value
    for key in _POSITIVE_INT_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if not _is_int(value) or value < 1:
            raise _type_error(key, "a positive integer", value)
        values[key] = value
    seed = data.get("seed")
    if seed is not None:
        if not _is_int(seed) or seed < 0:
            raise _type_error("seed", "a non-negative integer", seed)
        values["seed"] = seed
    noise_aug = data.get("noise_aug")
    if noise_aug is not None:
        if not _is_number(noise_aug) or noise_aug < 0:
            raise _type_error("noise_aug", "a non-negative number", noise_aug)
        values["noise_aug"] = float(noise_aug)
    crf = data.get("crf")
    if crf is not None:
        if not _is_int(crf) or not 0 <= crf <= 51:
            raise _type_error("crf", "an integer 0..51 (H.264 CRF)", crf)
        values["crf"] = crf
    return VideoRequest(**values), warnings


def resolve_paths(request: VideoRequest, base_dir: Path) -> dict[str, Path]:
    """Resolve the file-valued keys against ``base_dir`` and check they exist.

    Done during validation so that ``video check`` catches a wrong path, not the render.
    """
    found: dict[str, Path] = {}
    for key in PATH_KEYS:
        value = getattr(request, key)
        if value is None or value.startswith("data:"):
            continue
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        if not path.is_file():
            msg = f"request key {key!r}: file not found: {path}"
            raise VideoError(msg)
        found[key] = path
    return found
