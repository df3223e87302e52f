"""Per-request validation: a whitelist of keys, each with its type.

An unknown key is a hard error, never dropped: a misspelled reference path that is
silently ignored renders the wrong thing, successfully, hours later. A few keys
that other video APIs accept (``negative_prompt``, ``cfg_scale``, a non-native
``fps``) only warn: the engine has no such knob, and refusing them would break
clients written for those APIs for no gain.

Every number is bounded by :class:`~harness.families.limits.VideoLimits` (NaN,
infinities, bools and non-integers where integers are expected are refused), and
a request file is bounded in size and nesting before it is decoded: every bad
request is a :class:`~harness.core.errors.VideoError` naming the key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError, VideoError, did_you_mean
from harness.core.inputs import read_bytes
from harness.families.limits import DEFAULT_LIMITS, VideoLimits, is_int, is_number, show
from harness.video.media import confine, regular_file

#: Keys a request may carry, and nothing else.
ALLOWED_KEYS: tuple[str, ...] = (
    "prompt", "start_image", "end_image", "audio", "width", "height", "num_frames",
    "steps", "seed", "noise_aug", "ref_image", "ref_video", "crf",
)
#: Keys accepted for compatibility, warned about and dropped.
IGNORED_KEYS: tuple[str, ...] = ("negative_prompt", "cfg_scale", "fps")

_STR_KEYS = ("start_image", "end_image", "audio", "ref_image", "ref_video")
#: Unknown keys named in one error (a hostile request may carry thousands).
_SHOWN_KEYS = 20
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


def _type_error(key: str, expected: str, value: Any) -> VideoError:
    return VideoError(f"request key {key!r}: expected {expected}, found {show(value)}")


def _check_int(data: Mapping[str, Any], key: str, low: int, high: int,
               values: dict[str, Any], what: str = "an integer") -> None:
    value = data.get(key)
    if value is None:
        return
    if not is_int(value) or not low <= value <= high:
        raise _type_error(key, f"{what} {low}..{high}", value)
    values[key] = value


def _check_text(key: str, value: Any, expected: str) -> None:
    # A lone surrogate cannot cross into C++ (pybind11 refuses to cast it) and a NUL
    # truncates the string there: refuse both here, naming the key.
    if not isinstance(value, str) or not value.strip():
        raise _type_error(key, expected, value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _type_error(key, f"{expected} of valid Unicode (no lone surrogates)",
                          value) from None
    if "\x00" in value:
        raise _type_error(key, f"{expected} without NUL characters", value)


def parse_request(data: Mapping[str, Any], *, native_fps: float,
                  limits: VideoLimits = DEFAULT_LIMITS) -> tuple[VideoRequest, list[str]]:
    """Check ``data`` against the whitelist and the limits; return the request and warnings.

    :param data: the request as decoded from JSON or built from CLI flags.
    :param native_fps: the engine's fixed frame rate; a request for another warns.
    :param limits: the bounds for every number and string (:mod:`harness.families.limits`).
    :raises VideoError: unknown keys (each with a did-you-mean), wrong types, values out of
        bounds; every message names the key.
    """
    if not isinstance(data, Mapping):
        msg = f"a video request is a JSON object, found {type(data).__name__}"
        raise VideoError(msg)
    unknown = [k for k in data if k not in ALLOWED_KEYS and k not in IGNORED_KEYS]
    if unknown:
        known = (*ALLOWED_KEYS, *IGNORED_KEYS)
        # did_you_mean is quadratic in the name's length: compare a prefix only.
        lines = [f"  {show(k)}{did_you_mean(str(k)[:64], known)}" for k in unknown[:_SHOWN_KEYS]]
        if len(unknown) > _SHOWN_KEYS:
            lines.append(f"  ... and {len(unknown) - _SHOWN_KEYS} more")
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
        if not is_number(fps) or not 0 < fps <= limits.max_fps:
            raise _type_error("fps", f"a number above 0 and at most {limits.max_fps:g}", fps)
        if not math.isclose(float(fps), native_fps, rel_tol=1e-6):
            warnings.append(
                f"fps={fps:g} is ignored: the engine renders at its native {native_fps:g} fps "
                "and another rate would desynchronise the jointly generated audio")

    prompt = data.get("prompt")
    _check_text("prompt", prompt, "a non-empty string")
    assert isinstance(prompt, str)
    if len(prompt) > limits.max_prompt_chars:
        raise _type_error("prompt", f"at most {limits.max_prompt_chars} characters", prompt)
    values: dict[str, Any] = {"prompt": prompt}
    for key in _STR_KEYS:
        value = data.get(key)
        if value is None:
            continue
        _check_text(key, value, "a file path or data: URL string")
        if not value.startswith("data:") and len(value) > limits.max_path_chars:
            raise _type_error(key, f"a path of at most {limits.max_path_chars} characters", value)
        values[key] = value
    _check_int(data, "width", 1, limits.max_side, values)
    _check_int(data, "height", 1, limits.max_side, values)
    _check_int(data, "num_frames", 1, limits.max_frames, values)
    _check_int(data, "steps", 1, limits.max_steps, values)
    _check_int(data, "seed", 0, limits.max_seed, values)
    _check_int(data, "crf", 0, 51, values, "an H.264 CRF, an integer")
    noise_aug = data.get("noise_aug")
    if noise_aug is not None:
        if not is_number(noise_aug) or not 0 <= noise_aug <= limits.max_noise_aug:
            raise _type_error("noise_aug", f"a number 0..{limits.max_noise_aug:g}", noise_aug)
        values["noise_aug"] = float(noise_aug)
    return VideoRequest(**values), warnings


def resolve_paths(request: VideoRequest, base_dir: Path,
                  limits: VideoLimits = DEFAULT_LIMITS) -> dict[str, Path]:
    """Confine the file-valued keys to ``base_dir`` and check each is a regular file.

    ``base_dir`` is the media directory: relative paths resolve against it and every
    path must resolve inside it (:func:`harness.video.media.confine`). Done during
    validation so that ``video check`` catches a wrong path, not the render; nothing
    is opened here.
    """
    found: dict[str, Path] = {}
    for key in PATH_KEYS:
        value = getattr(request, key)
        if value is None or value.startswith("data:"):
            continue
        path = confine(value, key, base_dir, limits)
        regular_file(path, key)
        found[key] = path
    return found


# -- request files -------------------------------------------------------------------

#: A JSON string (escapes included) for the structure scan to remove. Linear: the closing quote
#: is optional, so the match never fails once a quote starts it; the repeats are possessive, and
#: each body character is either one non-quote non-backslash or one escape pair, so there is only
#: one way to match. An unterminated string runs to the end of the text in one match (the text
#: is not JSON then, and json.loads says so) instead of being tried again from every later quote,
#: which made the old pattern quadratic on a run of ``\\"``.
_JSON_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _check_structure(text: str, where: str, limits: VideoLimits) -> None:
    # Before json.loads: a deep document is a RecursionError inside the decoder, and a
    # wide one of empty arrays costs gigabytes of objects. Strings are removed first
    # (brackets inside them do not count), then only the brackets remain to walk.
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    depth = 0
    # A depth beyond the limit shows within the first limit-many openings, if at all.
    for char in brackets[:2 * limits.max_json_containers + 2]:
        if char in "[{":
            depth += 1
            if depth > limits.max_json_depth:
                msg = (f"{where}: JSON nested deeper than {limits.max_json_depth} levels; "
                       "a video request is one flat JSON object")
                raise VideoError(msg)
        else:
            depth -= 1
    containers = brackets.count("[") + brackets.count("{")
    if containers > limits.max_json_containers:
        msg = (f"{where}: {containers} JSON arrays/objects, above the limit of "
               f"{limits.max_json_containers}; a video request is one flat JSON object")
        raise VideoError(msg)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            msg = f"request key {show(key)} is given twice; a request says each thing once"
            raise VideoError(msg)
        out[key] = value
    return out


def parse_request_text(text: str, where: str,
                       limits: VideoLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Decode a request's JSON text, bounded in size and depth; it must be an object.

    NaN and Infinity decode (and are refused by the key they are given for).

    :raises VideoError: too large, too deep, not JSON, a duplicated key, not an object.
    """
    if len(text) > limits.max_request_bytes:
        msg = (f"{where}: {len(text)} characters, above the {limits.max_request_bytes}-byte "
               "limit for a request")
        raise VideoError(msg)
    _check_structure(text, where, limits)
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, or an int over 4300 digits
        msg = f"{where}: not valid JSON: {e}"
        raise VideoError(msg) from None
    if not isinstance(data, dict):
        msg = f"{where}: a video request is a JSON object, found {type(data).__name__}"
        raise VideoError(msg)
    return data


def load_request(path: Path, limits: VideoLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Read a request file (a regular file, read with a bounded read) and decode it.

    :raises UsageError: the file does not exist.
    :raises VideoError: not a regular file, unreadable, too large, not UTF-8, or see
        :func:`parse_request_text`.
    """
    raw = read_bytes(path, kind="request", error=VideoError, missing=UsageError,
                     max_bytes=limits.max_request_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        msg = f"{path}: not UTF-8 text: {e}"
        raise VideoError(msg) from None
    return parse_request_text(text, str(path), limits)
