"""Property tests: whatever a ``video check`` request holds, the answer is a plan or a VideoError.

Random keys, values (NaN, infinities, huge ints, lone surrogates, NUL bytes, nested
containers), paths (outside the media directory, through symlinks, FIFOs,
directories, oversized and lying image headers, data: URLs) and raw request-file
text. A plan that comes back is inside the limits.

Bounded in the unit suite (200 examples per property); ``HYPOTHESIS_PROFILE=long``
selects 5000.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import harness.cli
from harness.core.errors import VideoError
from harness.families.limits import DEFAULT_LIMITS
from harness.video.ffmpeg import resolve_ffmpeg
from harness.video.pipeline import plan_request
from harness.video.request import ALLOWED_KEYS, IGNORED_KEYS, load_request
from harness.video.target import resolve_target

from .pngs import png, png_header
from .video_engines import FamilyEngine, install

_HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("video-unit", max_examples=200, deadline=None,
                          suppress_health_check=_HEALTH)
settings.register_profile("video-long", max_examples=5000, deadline=None,
                          suppress_health_check=_HEALTH)
# Named per module (another module may load a global profile); HYPOTHESIS_PROFILE=long
# selects the long one here.
PROFILE = settings.get_profile(
    "video-long" if os.environ.get("HYPOTHESIS_PROFILE") == "long" else "video-unit")


_JPEG = (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(7)
         + b"\xff\xc0\x00\x11\x08" + struct.pack(">HH", 90, 160) + b"\x03" + bytes(9) + b"\xff\xd9")


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("fuzz")
    root, outside = base / "media", base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.png").write_bytes(png(40, 20))
    (root / "k.png").write_bytes(png(40, 20))
    (root / "k.jpg").write_bytes(_JPEG)
    (root / "wide.png").write_bytes(png_header(2**31 - 1, 768))
    (root / "strip.png").write_bytes(png_header(16_384, 1))
    (root / "zero.png").write_bytes(png_header(0, 0))
    (root / "trunc.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (root / "trunc.jpg").write_bytes(b"\xff\xd8\xff\xe1\xff")
    (root / "text.txt").write_text("hello")
    (root / "sub").mkdir()
    (root / "link-in.png").symlink_to(root / "k.png")
    (root / "link-out.png").symlink_to(outside / "secret.png")
    (root / "loop.png").symlink_to(root / "loop.png")
    big = root / "big.png"
    big.write_bytes(png_header(64, 64))
    os.truncate(big, 200 * 2**20)  # sparse, above the keyframe size limit
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "fifo.png")
    (base / "c.yaml").write_text(
        "backend: fake\noptions:\n  - video_partition:fl2va\n  - video_width:64\n"
        "  - video_height:32\n  - video_num_frames:5\n  - video_steps:2\n")
    return root


_DATA_PNG = "data:image/png;base64," + base64.b64encode(png(8, 4)).decode()
PATHS = st.sampled_from([
    "k.png", "k.jpg", "wide.png", "strip.png", "zero.png", "trunc.png", "trunc.jpg", "text.txt",
    "sub", "link-in.png", "link-out.png", "loop.png", "big.png", "fifo.png", "missing.png",
    "../outside/secret.png", "../../../../etc/passwd", "/etc/shadow", "/etc/passwd",
    "sub/../k.png", "sub/../../outside/secret.png", "~/k.png", "k\x00.png", "", " ", ".", "..",
    "/", _DATA_PNG, "data:image/gif;base64,R0lGOD", "data:image/png;base64,!!!",
    "data:,", "data:image/png,%89PNG%0D%0A%1A%0A", "data:image/jpeg;base64,AAAA",
]) | st.builds(lambda: "x/" * 3000) | st.text(max_size=24)
NUMBERS = st.one_of(
    st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 5, 31, 32, 64, 1025, 1026, 4096, 4097, 2**31 - 1, 2**32 - 1, 2**32,
                     2**63, 10**30, 1e9, 24, 24.0, 0.5, -1]),
    st.builds(lambda: 10**4000),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=16),
                    st.sampled_from(["\ud800", "a\x00b", "  "]),
                    st.builds(lambda: "x" * 25_000), PATHS)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
_PATH_KEYS = ("start_image", "end_image", "audio", "ref_image", "ref_video")


def _value_for(key: str) -> st.SearchStrategy[Any]:
    if key in _PATH_KEYS:
        return PATHS | VALUES
    if key in ("prompt", "negative_prompt"):
        return st.just("a fox") | VALUES
    return NUMBERS | VALUES


WILD = st.builds(
    lambda known, extra: {**known, **extra},
    st.fixed_dictionaries({"prompt": _value_for("prompt")},
                          optional={k: _value_for(k) for k in (*ALLOWED_KEYS[1:], *IGNORED_KEYS)}),
    st.dictionaries(st.text(max_size=10), VALUES, max_size=2) | st.just({}),
)
#: Values near and across the limits, so that plans come back too, not only errors.
_KEYFRAMES = st.sampled_from(["k.png", "k.jpg", "link-in.png", "sub/../k.png", _DATA_PNG])
NEAR = {
    "width": st.integers(1, 5000), "height": st.integers(1, 5000),
    "num_frames": st.integers(1, 1100), "steps": st.integers(1, 1100),
    "seed": st.integers(0, 2**33), "crf": st.integers(-1, 52),
    "noise_aug": st.floats(0, 1.2), "fps": st.sampled_from([24, 24.0, 30, 16.5]),
    "start_image": _KEYFRAMES, "end_image": _KEYFRAMES,
    "negative_prompt": st.text(max_size=8), "cfg_scale": st.floats(0, 20),
}
NEARLY_VALID = st.lists(st.sampled_from(sorted(NEAR)), max_size=5, unique=True).flatmap(
    lambda keys: st.fixed_dictionaries({"prompt": st.just("a fox"),
                                        **{k: NEAR[k] for k in keys}}))
REQUESTS = NEARLY_VALID | WILD
OPTIONS = st.sampled_from([
    {"video_partition": "fl2va", "video_width": "64", "video_height": "32",
     "video_num_frames": "5", "video_steps": "2"},
    {"video_partition": "ref2va"},
    {},
    # The largest values the config's bounds take (beyond them the options are refused as read).
    {"video_width": "4096"},
    {"video_num_frames": "1025"},
    {"video_fps": "240", "video_steps": "1000"},
])


def _assert_bounded(plan: Any) -> None:
    lim = DEFAULT_LIMITS
    w, h = plan.canvas.width, plan.canvas.height
    assert 32 <= w <= lim.max_side and 32 <= h <= lim.max_side
    assert 1 <= plan.num_frames <= lim.max_frames
    assert w * h * plan.num_frames <= lim.max_pixel_frames
    assert 1 <= plan.steps <= lim.max_steps
    assert plan.seed is None or 0 <= plan.seed <= lim.max_seed
    assert 0 <= plan.crf <= 51


@PROFILE
@given(data=REQUESTS, options=OPTIONS)
def test_random_requests_give_a_plan_or_a_video_error(media: Path, data: dict[str, Any],
                                                      options: dict[str, str]) -> None:
    target = resolve_target("fake", options)
    try:
        plan = plan_request(data, target, base_dir=media)
    except VideoError as e:
        event("VideoError")
        assert str(e)  # a message, printable
        return
    event("plan")
    _assert_bounded(plan)


def _texts() -> st.SearchStrategy[bytes]:
    def wrap(req: dict[str, Any], depth: int, dup: bool, cut: int | None) -> bytes:
        text = json.dumps(req, allow_nan=True, ensure_ascii=False, default=str)
        if dup:
            text = text[:-1] + (", " if len(req) else "") + '"prompt": "again"}'
        text = "[" * depth + text + "]" * depth
        raw = text.encode("utf-8", "surrogatepass")
        return raw[:cut] if cut is not None else raw

    structured = st.builds(wrap, NEARLY_VALID | REQUESTS, st.sampled_from([0, 0, 0, 0, 1, 8, 9, 12, 5000]),
                           st.sampled_from([False, False, False, True]),
                           st.sampled_from([None, None, None, None, 0, 1, 5, 20, 60]))
    return structured | st.binary(max_size=200) | st.text(max_size=200).map(
        lambda t: t.encode("utf-8", "surrogatepass"))


@PROFILE
@given(raw=_texts())
def test_random_request_files_give_a_plan_or_a_video_error(media: Path, raw: bytes) -> None:
    path = media.parent / "request.json"
    path.write_bytes(raw)
    try:
        data = load_request(path)
        plan = plan_request(data, resolve_target("fake"), base_dir=media)
    except VideoError:
        event("VideoError")
        return
    event("plan")
    _assert_bounded(plan)


@pytest.fixture(scope="module")
def ffmpeg_found() -> bool:
    try:
        resolve_ffmpeg(None)
    except Exception:
        return False
    return True


@pytest.fixture(scope="module")
def fake_engine() -> Iterator[None]:
    """The config's backend, registered as a plugin registers an engine."""
    with pytest.MonkeyPatch.context() as mp:
        install(mp, FamilyEngine("fake", "minimax-h3"))
        yield


@settings(PROFILE, max_examples=PROFILE.max_examples // 4)
@given(raw=_texts())
def test_random_requests_through_the_cli(media: Path, ffmpeg_found: bool, fake_engine: None,
                                         raw: bytes) -> None:
    path = media / "request.json"  # the request's directory is the media directory
    path.write_bytes(raw)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = harness.cli.main(["video", "check", str(media.parent / "c.yaml"), str(path),
                                 "--json"])
    event(f"exit {code}")
    assert code in ((0, VideoError.exit_code) if ffmpeg_found else (4, VideoError.exit_code))
    assert "Traceback" not in err.getvalue()
