"""The CPU-level fallback: a level that crashes the smoke probe is skipped, with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.core import crash
from harness.core.errors import BindingError
from harness.runtime import levels


@pytest.fixture
def lib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(levels.LEVEL_ENV, raising=False)
    d = tmp_path / "lib"
    d.mkdir()
    for name in ("libggml-base.so", "libggml-cpu-x64.so", "libggml-cpu-zen4.so", "libggml-cpu-sapphirerapids.so"):
        (d / name).write_bytes(name.encode())
    (d / "manifest.json").write_text(json.dumps({"files": {"x": "1"}}))
    return d


def _fake_probe(monkeypatch: pytest.MonkeyPatch, crashing: set[str], order: list[str]) -> list[list[str]]:
    """ggml picks the first level of ``order`` present in the dir; levels in ``crashing`` die by SIGILL."""
    calls: list[list[str]] = []

    def probe_once(lib_dir: Path, model: Path) -> levels.ProbeRun:
        present = levels.cpu_levels(lib_dir)
        calls.append(present)
        pick = next(lvl for lvl in order if lvl in present)
        if pick in crashing:
            died = crash.Crash(signal=4, cpu_level=pick, running="probe", note={})
            return levels.ProbeRun(ok=False, level=pick, crash=died, detail=died.describe())
        return levels.ProbeRun(ok=True, level=pick, crash=None, detail="")

    monkeypatch.setattr(levels, "probe_once", probe_once)
    monkeypatch.setattr(levels, "_probe_model", lambda: Path("tiny.gguf"))
    return calls


def test_crashing_level_is_skipped_with_its_reason(lib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_probe(monkeypatch, {"sapphirerapids"}, ["sapphirerapids", "zen4", "x64"])
    sel = levels.select(lib)
    assert sel.level == "zen4"
    assert sel.verdict is not None and sel.verdict.excluded == {"sapphirerapids": "crashed in the smoke probe (SIGILL)"}
    assert sel.describe() == ["cpu level sapphirerapids: crashed in the smoke probe (SIGILL); using zen4"]
    assert levels.cpu_levels(sel.lib_dir) == ["x64", "zen4"]
    assert (sel.lib_dir / "libggml-base.so").read_bytes() == b"libggml-base.so"
    assert len(calls) == 2
    # The verdict is cached per host CPU and artifact: no second probe.
    assert levels.select(lib).level == "zen4"
    assert len(calls) == 2


def test_passing_best_level_keeps_the_artifact_dir(lib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_probe(monkeypatch, set(), ["sapphirerapids", "zen4", "x64"])
    sel = levels.select(lib)
    assert sel.lib_dir == lib and sel.level == "sapphirerapids"
    assert sel.describe() == ["cpu level sapphirerapids: passed the smoke probe"]


def test_a_new_artifact_is_probed_again(lib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_probe(monkeypatch, set(), ["sapphirerapids", "zen4", "x64"])
    levels.select(lib)
    (lib / "manifest.json").write_text(json.dumps({"files": {"x": "2"}}))
    levels.select(lib)
    assert len(calls) == 2


def test_every_level_crashing_is_an_error(lib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_probe(monkeypatch, {"sapphirerapids", "zen4", "x64"}, ["sapphirerapids", "zen4", "x64"])
    with pytest.raises(BindingError, match=r"no CPU level .* passed the smoke probe"):
        levels.select(lib)


def test_forced_level(lib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_probe(monkeypatch, set(), ["sapphirerapids", "zen4", "x64"])
    monkeypatch.setenv(levels.LEVEL_ENV, "x64")
    sel = levels.select(lib)
    assert sel.forced and sel.level == "x64" and levels.cpu_levels(sel.lib_dir) == ["x64"]
    assert calls == []
    monkeypatch.setenv(levels.LEVEL_ENV, "zen5")
    with pytest.raises(BindingError, match="not a CPU level"):
        levels.select(lib)


def test_single_level_build_needs_no_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_probe(monkeypatch, set(), ["x64"])
    (tmp_path / "libllama.so").write_bytes(b"")
    sel = levels.select(tmp_path)
    assert sel.lib_dir == tmp_path and sel.level is None and calls == []


def test_backend_dir_takes_another_builds_levels(lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$HARNESS_BINDING_LIB_DIR alone is used as given (the probe child, cross-variant runs); with a
    forced level, that level of that dir (another build's levels on the installed binding)."""
    calls = _fake_probe(monkeypatch, set(), ["sapphirerapids", "zen4", "x64"])
    other = tmp_path / "other-build" / "lib"
    other.mkdir(parents=True)
    for name in ("libggml-base.so", "libggml-cpu-x64.so", "libggml-cpu-zen4.so"):
        (other / name).write_bytes(b"patched " + name.encode())
    monkeypatch.delenv(levels.LIB_DIR_ENV, raising=False)
    assert levels.backend_dir(lib) == lib  # the probe passed ggml's pick: the artifact's own dir
    monkeypatch.setenv(levels.LIB_DIR_ENV, str(other))
    assert levels.backend_dir(lib) == other
    monkeypatch.setenv(levels.LEVEL_ENV, "zen4")
    forced = levels.backend_dir(lib)
    assert levels.cpu_levels(forced) == ["zen4"]
    assert (forced / "libggml-cpu-zen4.so").read_bytes() == b"patched libggml-cpu-zen4.so"
    assert len(calls) == 1  # the other dir's forced level needs no probe
    monkeypatch.setenv(levels.LEVEL_ENV, "sapphirerapids")
    with pytest.raises(BindingError, match=r"not a CPU level of .*other-build"):
        levels.backend_dir(lib)


def test_a_level_dir_left_by_a_deleted_installation_is_relinked(lib: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Another installation of the same artifact (a CI checkout's venv: same manifest, same key) made
    # the forced dir, then was deleted: its links dangle, and ggml skips a dangling level silently.
    other = tmp_path / "other-venv" / "lib"
    other.mkdir(parents=True)
    for p in lib.iterdir():
        (other / p.name).write_bytes(p.read_bytes())
    monkeypatch.setenv(levels.LEVEL_ENV, "x64")
    first = levels.select(other)
    stale_extra = first.lib_dir / "libggml-cpu-zen4.so"
    stale_extra.symlink_to(other / "libggml-cpu-zen4.so")  # a level the forced dir must not expose
    for p in other.iterdir():
        p.unlink()
    other.rmdir()

    sel = levels.select(lib)
    assert sel.lib_dir == first.lib_dir  # the same dir, keyed by the artifact's content
    assert levels.cpu_levels(sel.lib_dir) == ["x64"]
    for link in sel.lib_dir.iterdir():
        assert link.resolve() == (lib / link.name).resolve() and link.exists(), link
