"""ffmpeg resolution order (option, HARNESS_FFMPEG, PATH, imageio-ffmpeg) and encoder checks."""

from __future__ import annotations

import shutil
import stat
import sys
from pathlib import Path

import pytest

from harness.core.errors import HostError
from harness.video import ffmpeg as ffmod
from harness.video.ffmpeg import parse_encoders, resolve_ffmpeg

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fake ffmpegs are sh scripts")

ENCODERS = """Encoders:
 V..... = Video
 A..... = Audio
 ------
 V....D libx264              libx264 H.264 / AVC / MPEG-4 AVC (codec h264)
 V.S... mpeg4                MPEG-4 part 2
 A....D aac                  AAC (Advanced Audio Coding)
"""


def fake_ffmpeg(directory: Path, name: str = "ffmpeg", *, encoders: str = ENCODERS,
                label: str = "fake") -> Path:
    """An executable that answers -version and -encoders like ffmpeg does."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"  *-encoders*) cat <<'X'\n{encoders}X\n;;\n"
        f"  *) echo 'ffmpeg version {label}';;\n"
        "esac\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def no_wheel() -> str | None:
    return None


def test_parse_encoders() -> None:
    assert parse_encoders(ENCODERS) == {"libx264", "mpeg4", "aac"}


def test_explicit_option_wins(tmp_path: Path) -> None:
    opt = fake_ffmpeg(tmp_path / "opt", label="opt")
    env = fake_ffmpeg(tmp_path / "env", label="env")
    fake_ffmpeg(tmp_path / "path", label="path")
    ff = resolve_ffmpeg(str(opt), env={"HARNESS_FFMPEG": str(env)},
                        search_path=str(tmp_path / "path"), wheel=no_wheel)
    assert (ff.path, ff.source, ff.version) == (str(opt), "option", "ffmpeg version opt")
    assert ff.aac_encoder == "aac" and ff.video_encoder == "libx264"


def test_env_before_path(tmp_path: Path) -> None:
    env = fake_ffmpeg(tmp_path / "env", label="env")
    fake_ffmpeg(tmp_path / "path", label="path")
    ff = resolve_ffmpeg(None, env={"HARNESS_FFMPEG": str(env)},
                        search_path=str(tmp_path / "path"), wheel=no_wheel)
    assert (ff.path, ff.source) == (str(env), "env")


def test_path_before_wheel(tmp_path: Path) -> None:
    on_path = fake_ffmpeg(tmp_path / "path", label="path")
    wheel = fake_ffmpeg(tmp_path / "wheel", label="wheel")
    ff = resolve_ffmpeg(None, env={}, search_path=str(tmp_path / "path"),
                        wheel=lambda: str(wheel))
    assert (ff.path, ff.source) == (str(on_path), "PATH")


def test_wheel_last(tmp_path: Path) -> None:
    wheel = fake_ffmpeg(tmp_path / "wheel", name="ffmpeg-linux-x86_64-v7", label="wheel")
    ff = resolve_ffmpeg(None, env={}, search_path=str(tmp_path / "empty"),
                        wheel=lambda: str(wheel))
    assert (ff.path, ff.source, ff.ffprobe) == (str(wheel), "imageio-ffmpeg", None)


def test_real_imageio_wheel_is_found() -> None:
    pytest.importorskip("imageio_ffmpeg")
    ff = resolve_ffmpeg(None, env={}, search_path="/nonexistent")
    assert ff.source == "imageio-ffmpeg" and ff.aac_encoder


def test_nothing_found(tmp_path: Path) -> None:
    with pytest.raises(HostError, match=r"ffmpeg not found .* apt-get install ffmpeg"):
        resolve_ffmpeg(None, env={}, search_path=str(tmp_path), wheel=no_wheel)


@pytest.mark.parametrize("where", ["option", "env"])
def test_configured_but_missing_does_not_fall_through(tmp_path: Path, where: str) -> None:
    fake_ffmpeg(tmp_path / "path")
    missing = str(tmp_path / "nope" / "ffmpeg")
    explicit = missing if where == "option" else None
    env = {"HARNESS_FFMPEG": missing} if where == "env" else {}
    with pytest.raises(HostError, match="not an executable"):
        resolve_ffmpeg(explicit, env=env, search_path=str(tmp_path / "path"), wheel=no_wheel)


def test_explicit_name_is_looked_up_on_path(tmp_path: Path) -> None:
    exe = fake_ffmpeg(tmp_path / "bin", name="ffmpeg7")
    ff = resolve_ffmpeg("ffmpeg7", env={}, search_path=str(tmp_path / "bin"), wheel=no_wheel)
    assert ff.path == str(exe)


def test_missing_aac_is_an_error_at_load(tmp_path: Path) -> None:
    exe = fake_ffmpeg(tmp_path, encoders=" V....D libx264   H.264\n")
    with pytest.raises(HostError, match="no AAC encoder"):
        resolve_ffmpeg(str(exe), env={}, wheel=no_wheel)


def test_mpeg4_fallback_without_libx264(tmp_path: Path) -> None:
    exe = fake_ffmpeg(tmp_path, encoders=" V.S... mpeg4  MPEG-4\n A....D aac  AAC\n")
    assert resolve_ffmpeg(str(exe), env={}, wheel=no_wheel).video_encoder == "mpeg4"


def test_sibling_ffprobe(tmp_path: Path) -> None:
    exe = fake_ffmpeg(tmp_path)
    fake_ffmpeg(tmp_path, name="ffprobe")
    assert resolve_ffmpeg(str(exe), env={}, wheel=no_wheel).ffprobe == str(tmp_path / "ffprobe")


def test_get_ffmpeg_resolves_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str | None] = []
    real = ffmod.resolve_ffmpeg

    def counting(explicit: str | None = None) -> ffmod.Ffmpeg:
        calls.append(explicit)
        return real(explicit, env={}, wheel=no_wheel)

    monkeypatch.setattr(ffmod, "resolve_ffmpeg", counting)
    monkeypatch.setattr(ffmod, "_cache", {})
    exe = str(fake_ffmpeg(tmp_path))
    assert ffmod.get_ffmpeg(exe) is ffmod.get_ffmpeg(exe)
    assert calls == [exe]


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="no ffmpeg on PATH")
def test_host_ffmpeg_has_what_the_mux_needs() -> None:
    ff = resolve_ffmpeg(None, env={})
    assert ff.source == "PATH" and ff.aac_encoder and ff.video_encoder in ("libx264", "mpeg4")
