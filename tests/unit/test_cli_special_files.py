"""No input makes a file-taking command hang or end in a traceback.

Every command that reads a file a user names (``validate``, ``config show``, ``select``, each with
its ``--models-dir`` GGUF, ``video check``'s config and request, ``report compare``, ``report
merge``) is run in-process through ``harness.cli.main`` with special files in each file slot:
/dev/zero, a symlink to it, a FIFO, a directory, a symlink loop, a sparse file past every size
limit, invalid UTF-8, NUL bytes, a 300-character name, and (hypothesis) arbitrary bytes. Each run
returns an exit code (a typed error or a result). What is checked is bounded work, not speed (a
timed assertion flakes on a loaded CI host): an alarm turns a hang (a FIFO opened for reading, a
read that never ends) into a failure instead of a stuck suite, and the process's peak RSS may not
grow past ``RSS_GROWTH`` during a run (reading /dev/zero into memory would).
"""

from __future__ import annotations

import os
import resource
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness.cli
from harness.core.inputs import LIMITS

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"),
                                reason="needs FIFOs and /dev/zero")

#: A run still going after this long is hung (correct runs take well under a second once imported;
#: the first imports the command's modules, and CI hosts are busy).
HANG_S = 30
#: How far one run may raise the process's peak RSS: imports and a refused file cost a few MiB;
#: a read of /dev/zero or a FIFO fed forever would pass this within a second.
RSS_GROWTH = 512 * 1024 * 1024

LLAMA_CONFIG = "name: m\nbackend: llamacpp\nparameters:\n  model: m.gguf\n"
VIDEO_CONFIG = "backend: fake\noptions:\n  - video_partition:fl2va\n  - video_width:64\n  - video_height:32\n"
REQUEST = '{"prompt": "a cat"}'
#: Past every limit of harness.core.inputs (sparse: it costs no disk).
HUGE = max(LIMITS[k] for k in ("config", "request", "report", "model-metadata")) + 1

KINDS = ("dev-zero", "zero-link", "fifo", "directory", "loop", "huge", "bad-utf8", "nul-bytes",
         "long-name", "missing")


def place(kind: str, path: Path) -> Path:
    """Make the special ``kind`` at ``path``; the path to give the command (which may differ)."""
    if kind == "dev-zero":
        return Path("/dev/zero")
    if kind == "zero-link":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "huge":
        path.touch()
        os.truncate(path, HUGE)
    elif kind == "bad-utf8":
        path.write_bytes(b"name: \xff\xfe\xc3(\n")
    elif kind == "nul-bytes":
        path.write_bytes(b"{\"prompt\": \"a\x00b\"}\x00name: m\x00\n")
    elif kind == "long-name":
        return path.with_name("n" * 300 + path.suffix)
    return path


#: (slot, command): the slot is the file the special thing takes the place of.
def _validate(d: Path, x: Path) -> list[str]:
    return ["validate", str(x)]


def _validate_dir(d: Path, x: Path) -> list[str]:
    (d / "good.yaml").write_text(LLAMA_CONFIG)
    return ["validate", str(d)]


def _models_dir(command: str) -> Callable[[Path, Path], list[str]]:
    def argv(d: Path, x: Path) -> list[str]:
        (d / "cfg.yaml").write_text(LLAMA_CONFIG.replace("m.gguf", x.name))
        return [*command.split(), "--models-dir", str(d), str(d / "cfg.yaml")]
    return argv


def _one(command: str) -> Callable[[Path, Path], list[str]]:
    return lambda d, x: [*command.split(), str(x)]


def _video_config(d: Path, x: Path) -> list[str]:
    (d / "r.json").write_text(REQUEST)
    return ["video", "check", str(x), str(d / "r.json")]


def _video_request(d: Path, x: Path) -> list[str]:
    (d / "c.yaml").write_text(VIDEO_CONFIG)
    return ["video", "check", str(d / "c.yaml"), str(x)]


def _compare(d: Path, x: Path) -> list[str]:
    return ["report", "compare", str(x), str(x)]


def _merge(d: Path, x: Path) -> list[str]:
    # a second report that reads, so the special one is read and not merely counted
    (d / "other").mkdir()
    (d / "other" / "qualify.json").write_text('{"stages": [], "pin": "p"}')
    return ["report", "merge", str(x), str(d / "other"), "--out", str(d / "out")]


#: slot name -> (file name the special takes, argv builder)
SLOTS: dict[str, tuple[str, Callable[[Path, Path], list[str]]]] = {
    "validate FILE": ("x.yaml", _validate),
    "validate DIR (one bad *.yaml)": ("x.yaml", _validate_dir),
    "validate --models-dir GGUF": ("x.gguf", _models_dir("validate")),
    "config show FILE": ("x.yaml", _one("config show")),
    "config show --models-dir GGUF": ("x.gguf", _models_dir("config show")),
    "select FILE": ("x.yaml", _one("select")),
    "select --models-dir GGUF": ("x.gguf", _models_dir("select")),
    "video check CONFIG": ("x.yaml", _video_config),
    "video check REQUEST": ("x.json", _video_request),
    "report compare": ("results.json", _compare),
    "report merge": ("qualify.json", _merge),
}


@pytest.fixture(autouse=True)
def _quick_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """``select`` probes the host only after the config; the minimal description is enough here."""
    import harness.core.host

    def no_probe() -> None:
        raise OSError("not probed in this test")

    monkeypatch.setattr(harness.core.host, "probe", no_probe)
    monkeypatch.delenv("HARNESS_MODELS_DIR", raising=False)


@contextmanager
def alarm(seconds: int) -> Iterator[None]:
    def expired(*_: object) -> None:
        raise TimeoutError(f"no answer within {seconds}s: a read blocked or ran on")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def peak_rss() -> int:
    """This process's peak resident set in bytes (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run(argv: list[str]) -> tuple[int, int]:
    """(exit code, growth of the peak RSS in bytes) of one in-process command; a hang raises."""
    before = peak_rss()
    with alarm(HANG_S):
        try:
            code = harness.cli.main(argv)
        except SystemExit as e:  # argparse's own refusals are exit codes too
            code = e.code if isinstance(e.code, int) else 2
    return code, peak_rss() - before


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("slot", sorted(SLOTS))
def test_a_special_file_in_any_slot_is_refused_fast(slot: str, kind: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    name, argv = SLOTS[slot]
    special = place(kind, tmp_path / name)
    code, grew = run(argv(tmp_path, special))
    out = capsys.readouterr()
    # in a validated directory, a name that is not there (or a subdirectory) is no config at all
    absent = slot.startswith("validate DIR") and kind in ("dev-zero", "long-name", "missing", "directory")
    assert isinstance(code, int) and (code != 0 or absent), (code, out)
    assert "Traceback" not in out.err + out.out
    assert grew < RSS_GROWTH


def test_a_bad_file_in_a_validated_directory_does_not_stop_the_others(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    place("fifo", tmp_path / "a-fifo.yaml")
    place("zero-link", tmp_path / "b-zero.yaml")
    place("huge", tmp_path / "c-huge.yaml")
    (tmp_path / "d-good.yaml").write_text(LLAMA_CONFIG)
    (tmp_path / "e-bad.yaml").write_text("name: e\nparameters: {model: 3}\nunknown_key_here: 1\n")
    code, grew = run(["validate", "--json", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 3 and grew < RSS_GROWTH
    assert "a-fifo.yaml" in out and "FIFO" in out
    assert "b-zero.yaml" in out and "character device" in out
    assert "c-huge.yaml" in out and "over the 64 MiB limit" in out
    assert "e-bad.yaml" in out  # checked although three files before it were refused


_CONTENT = (st.binary(max_size=256)
            | st.text(max_size=128).map(lambda t: t.encode("utf-8", "surrogatepass"))
            | st.sampled_from([b"\xff" * 64, b"\x00" * 64, b"[" * 5_000, b"{" * 5_000,
                               b"GGUF\x03\x00\x00\x00" + b"\xff" * 16, b"- &a [*a, *a]\n"]))


@settings(max_examples=int(os.environ.get("HARNESS_SPECIAL_FILE_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(slot=st.sampled_from(sorted(SLOTS)), content=_CONTENT)
def test_any_bytes_in_any_slot_give_an_exit_code(slot: str, content: bytes) -> None:
    name, argv = SLOTS[slot]
    with tempfile.TemporaryDirectory(prefix="h-special-") as tmp:
        d = Path(tmp)
        (d / name).write_bytes(content)
        code, grew = run(argv(d, d / name))
    assert isinstance(code, int)
    assert grew < RSS_GROWTH
