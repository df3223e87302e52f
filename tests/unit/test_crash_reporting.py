"""A child that dies by a signal is reported as a crash: signal, CPU level, what it ran.

A fake binding (tests/fakes/binding_core.py) kills its own process with SIGILL on its
first request, as a miscompiled CPU level does; a second fake answers normally. Each
place that runs engine code in a child must name the signal and keep the other results.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from harness.core import crash
from harness.core.errors import EngineCrashError

FAKE_CORE = Path(__file__).parents[1] / "fakes" / "binding_core.py"


@pytest.fixture
def fake_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    from harness.engine.descriptor import load_engine
    from harness_plugins.llamacpp.engine import _committed_fingerprint
    from harness_plugins.llamacpp.tiny import write_tiny_llama

    pin = load_engine("llamacpp").pin
    root = tmp_path / "bindings"
    for variant in ("crashy", "steady"):
        pkg = root / f"harness_fake_{variant}"
        (pkg / "lib").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        shutil.copy(FAKE_CORE, pkg / "_core.py")
        (pkg / "identity.json").write_text(json.dumps({
            "engine": "llamacpp", "pin": pin, "abi_fingerprint": _committed_fingerprint(),
            "platform": "cpu", "variant": variant}))
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    env = {"HARNESS_BINDING_PATH": str(root), "HARNESS_CACHE": str(tmp_path / "cache"),
           "HARNESS_NO_PROGRESS": "1", "FAKE_MODEL": str(model)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def test_signal_names() -> None:
    assert crash.signal_of(-4) == signal.SIGILL
    assert crash.signal_of(132) == signal.SIGILL
    assert crash.signal_of(1) is None
    assert crash.signal_of(0) is None
    assert crash.signal_text(signal.SIGILL) == "SIGILL (illegal instruction)"
    assert crash.signal_text(signal.SIGSEGV) == "SIGSEGV (segmentation fault)"


def test_note_survives_the_crash(tmp_path: Path) -> None:
    code = ("import os, signal; from harness.core import crash; crash.note(cpu_level='haswell'); "
            "crash.note(running='spec x'); os.kill(os.getpid(), signal.SIGILL)")
    with crash.note_file() as (note, env):
        r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, check=False)
        died = crash.crash_of(r.returncode, note)
    assert died is not None
    assert died.describe() == "SIGILL (illegal instruction), CPU level haswell, while running spec x"
    assert crash.crash_of(0, None) is None


def test_complete_names_the_signal(fake_env: dict[str, str]) -> None:
    argv = [sys.executable, "-m", "harness", "complete", fake_env["FAKE_MODEL"], "--prompt", "The capital"]
    r = subprocess.run([*argv, "--variant", "crashy"], capture_output=True, text=True, check=False)
    assert r.returncode == EngineCrashError.exit_code, r.stdout + r.stderr
    out = " ".join((r.stdout + r.stderr).split())
    assert "harness complete crashed: SIGILL (illegal instruction), CPU level fakelevel" in out
    ok = subprocess.run([*argv, "--variant", "steady"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "Paris" in ok.stdout


def test_cross_variant_reports_crash_and_keeps_others(fake_env: dict[str, str]) -> None:
    from harness_plugins.llamacpp.crossvariant import cross_variant

    r = cross_variant(Path(fake_env["FAKE_MODEL"]), variants=["crashy", "steady"], threads=3)
    assert r["threads"] == 3, "the thread count is recorded for the report"
    rows = {x["label"]: x for x in r["runs"]}
    assert rows["crashy"]["status"] == "crashed"
    assert rows["crashy"]["error"] == "crashed: SIGILL (illegal instruction) on level fakelevel"
    assert rows["steady"]["status"] == "ran" and rows["steady"]["ok"]
    assert "Paris" in rows["steady"]["text"]
    assert not r["passed"]


def test_cross_variant_checks_the_levels_of_another_build(fake_env: dict[str, str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """$HARNESS_BINDING_LIB_DIR: the levels checked are that build's (a patched artifact of this pin);
    only_levels narrows them, the variant's own pick runs anyway."""
    from harness.runtime import levels
    from harness_plugins.llamacpp.crossvariant import cross_variant

    other = tmp_path / "patched" / "lib"
    other.mkdir(parents=True)
    for name in ("x64", "haswell", "zen4"):
        (other / f"libggml-cpu-{name}.so").write_bytes(name.encode())
    monkeypatch.setenv(levels.LIB_DIR_ENV, str(other))
    r = cross_variant(Path(fake_env["FAKE_MODEL"]), variants=["steady"], threads=1, agreement=False,
                      only_levels=["haswell", "zen4"])
    rows = {x["label"]: x for x in r["runs"]}
    assert list(rows) == ["steady", "steady/haswell", "steady/zen4"]
    assert rows["steady/haswell"]["cpu_level"] == "haswell" and rows["steady/haswell"]["ok"]
    assert rows["steady"]["cpu_level"] == "fakelevel" and r["passed"]


def test_bench_worker_death_names_the_signal(fake_env: dict[str, str]) -> None:
    from harness.bench.arms import ArmSpec, ArmWorker

    common = f"model={fake_env['FAKE_MODEL']},n_ctx=256,threads=1,max_num_seqs=1"
    with ArmWorker(ArmSpec.parse(f"in-process:{common},variant=steady"), "A") as good:
        good.warmup()  # the other arm keeps working
        with ArmWorker(ArmSpec.parse(f"in-process:{common},variant=crashy"), "B") as bad:
            bad.wait_ready()
            with pytest.raises(EngineCrashError) as e:
                bad.warmup()
        good.warmup()
    assert "worker died: SIGILL (illegal instruction), CPU level fakelevel, during warmup" in str(e.value)


def test_e2e_runner_keeps_results_around_a_crash(fake_env: dict[str, str], tmp_path: Path) -> None:
    from harness.qualify.e2e import run_specs

    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "test_a.py").write_text(
        "import os\nfrom harness.runtime import Runtime\n"
        "def test_before():\n    assert True\n"
        "def test_crash():\n    Runtime.load(os.environ['FAKE_MODEL'], variant='crashy').complete('x')\n"
        "def test_after():\n    assert True\n")
    (specs / "test_b.py").write_text("def test_fine():\n    assert True\n")
    res = run_specs([specs], env=dict(os.environ), cwd=tmp_path)
    a, b = res.files
    assert a.crash is not None and a.crash.signal == signal.SIGILL
    assert a.crash.running == "specs/test_a.py::test_crash"
    assert a.crash.cpu_level == "fakelevel"
    assert a.passed == 1  # test_before's result survived the crash
    assert b.ok and b.passed == 1
    assert not res.ok
    assert res.crashes == [f"{specs / 'test_a.py'}: SIGILL (illegal instruction), CPU level fakelevel, "
                           "while running specs/test_a.py::test_crash"]


def test_e2e_runner_counts_what_a_marker_deselects(tmp_path: Path) -> None:
    """Qualification deselects ``harness_selftest`` specs: pytest's own count reaches the result, and a
    file left with no test is not a failure."""
    from harness.qualify.e2e import run_specs
    from harness.qualify.stages.e2e import SELFTEST

    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "test_mixed.py").write_text(
        "import pytest\n"
        f"@pytest.mark.{SELFTEST}\ndef test_instrument():\n    assert True\n"
        "def test_pin():\n    assert True\n")
    (specs / "test_only_selftest.py").write_text(
        f"import pytest\npytestmark = pytest.mark.{SELFTEST}\ndef test_a():\n    assert True\n")
    res = run_specs([specs], pytest_args=["-p", "no:warnings", "-m", f"not {SELFTEST}"], cwd=tmp_path)
    assert res.ok, res.as_dict()
    assert (res.passed, res.deselected) == (1, 2), res.as_dict()
    assert [f.deselected for f in res.files] == [1, 1]
    assert "2 deselected" in res.summary()


def test_e2e_cli_takes_pytest_args_after_dashdash(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.cli import main

    spec = tmp_path / "test_pick.py"
    spec.write_text("def test_one():\n    assert True\n\ndef test_two():\n    assert False\n")
    monkeypatch.chdir(tmp_path)
    assert main(["e2e", str(spec), "--json", "--", "-k", "one"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] == 1 and out["failed"] == []
    assert main(["e2e", str(spec), "--json"]) == 1
    with pytest.raises(SystemExit):
        main(["host", "--", "-k", "one"])


SERVE_CONFIG = "name: tiny\nbackend: llamacpp\nparameters:\n  model: {model}\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_serve(fake_env: dict[str, str], tmp_path: Path, variant: str,
                 *extra: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    """``harness serve`` of the tiny model on a fake binding, in a session of its own (no terminal),
    returned once it answers /health: the process, the base URL, the file its stderr goes to."""
    config = tmp_path / "serve.yaml"
    model = Path(fake_env["FAKE_MODEL"])
    config.write_text(SERVE_CONFIG.format(model=model.name))
    port = _free_port()
    log = tmp_path / f"serve-{variant}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "harness", "serve", str(config), "--variant", variant,
                                 "--models-dir", str(model.parent), "--port", str(port), "--log-level", "info",
                                 *extra],
                                stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True,
                                # SIGINT as a shell leaves it for a foreground command: a test run in the
                                # background (CI under nohup, `cmd &`) inherits it ignored, and Python and
                                # uvicorn then keep ignoring it
                                preexec_fn=_default_sigint)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"harness serve exited with {proc.returncode}: {log.read_text()}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            if r.status == 200:
                return proc, url, log
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"harness serve did not answer /health in 60 s: {log.read_text()}")


def _health(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
        return dict(json.loads(r.read())["models"]["tiny"])


def test_serve_crash_is_answered_reported_by_signal_and_request(fake_env: dict[str, str], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    monkeypatch.setenv("FAKE_CRASH_SIGNAL", "SIGSEGV")
    monkeypatch.setenv("FAKE_CRASH_AFTER", "2")  # a stream dies after two deltas
    monkeypatch.setenv("FAKE_WAIT_S", "60")  # a non-streaming request is still running then
    proc, url, log = _start_serve(fake_env, tmp_path, "crashy", "--max-queue", "4")
    try:
        waiting: dict[str, httpx.Response] = {}

        def blocking() -> None:
            waiting["r"] = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": "The capital"},
                                      timeout=60)

        t = threading.Thread(target=blocking)
        t.start()
        deadline = time.monotonic() + 30
        while _health(url)["in_flight"] < 1:
            assert time.monotonic() < deadline, "the blocking request never got in"
            time.sleep(0.05)
        # a stream in flight when the engine dies: its deltas, then an error event, then a proper end
        # (no connection cut mid-answer: httpx would raise RemoteProtocolError)
        with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=60,
                          json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}) as r:
            assert r.status_code == 200
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        t.join(60)
        assert proc.wait(timeout=30) == EngineCrashError.exit_code, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    *chunks, error = events
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == " Paris, and"
    assert error["error"]["code"] == "engine_crashed", error
    assert "crashed: SIGSEGV (segmentation fault), CPU level fakelevel" in error["error"]["message"]
    # the request that was waiting is answered too
    assert waiting["r"].status_code == 503 and waiting["r"].json()["error"]["code"] == "engine_crashed"
    out = " ".join(log.read_text().split())
    assert ("harness serve: the engine of model tiny crashed: SIGSEGV (segmentation fault), CPU level fakelevel, "
            "while serving 2 requests:") in out, out
    assert f"{chunks[0]['id']} (POST /v1/chat/completions, streamed, 1 message)" in out
    assert "(POST /v1/completions, 11 characters)" in out
    assert "error: EngineCrashError" in out


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_serve_stops_cleanly_on_a_signal(fake_env: dict[str, str], tmp_path: Path, sig: signal.Signals,
                                         code: int) -> None:
    proc, _, log = _start_serve(fake_env, tmp_path, "steady")
    worker = int(re.findall(r"engine worker pid (\d+)", " ".join(log.read_text().split()))[-1])
    assert worker != proc.pid, "the engine runs in a worker process"
    proc.send_signal(sig)  # to the server alone, as kill or a service manager sends it
    assert proc.wait(timeout=30) == code, log.read_text()
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)  # the worker stopped (and was reaped) before the server exited
    text = log.read_text()
    assert "crashed" not in text and "Traceback" not in text, text
