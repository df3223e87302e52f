"""Every engine process the harness starts gets glibc's malloc hugepages alike (harness.core.hugepages):
the bench arms' workers (so the in-process, xllamacpp and vllm.cpp arms, which run in them), the
llama-bench runs, the servers of the HTTP arms, ``harness serve``'s engine worker; and the switch
that turns them off reaches them all, and the report.

The expectations are written out (``glibc.malloc.hugetlb=1``), not computed by the module under test;
where this host's C library has no such tunable (macOS, musl, glibc < 2.35) the "on" cases skip.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.bench.abba import BenchConfig, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.report import load_results
from tests.unit.test_crash_reporting import fake_env  # noqa: F401 (fixture)

PROBE = ("harness_plugins.bench_fake", "tests.unit.bench_env_arm")
TUNABLES, SWITCH = "GLIBC_TUNABLES", "HARNESS_MALLOC_HUGETLB"
HUGETLB = "glibc.malloc.hugetlb=1"


def _has_tunable() -> bool:
    lib, version = platform.libc_ver()
    if platform.system() != "Linux" or lib != "glibc":
        return False
    major, minor = (int(p) for p in version.split(".")[:2])
    return (major, minor) >= (2, 35)


needs_tunable = pytest.mark.skipif(not _has_tunable(), reason="no glibc >= 2.35 here: nothing is added")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TUNABLES, raising=False)
    monkeypatch.delenv(SWITCH, raising=False)


@needs_tunable
def test_bench_workers_start_with_it_appended_to_the_users_tunables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TUNABLES, "glibc.malloc.arena_max=8")
    before = dict(os.environ)
    r = run_abba(ArmSpec.parse("env-probe"), ArmSpec.parse("env-probe:slowdown=1.01"),
                 BenchConfig(blocks=1, concurrency=(1,)), isolate=True, extra_plugins=PROBE)
    for role in "AB":
        assert r.describe[role]["environ"] == {TUNABLES: f"glibc.malloc.arena_max=8:{HUGETLB}", SWITCH: None}
        assert r.describe[role]["pid"] != os.getpid()
    assert dict(os.environ) == before  # only the workers' environment had it
    assert r.system is not None and r.system.malloc_hugetlb is True
    assert r.system.glibc_tunables == f"glibc.malloc.arena_max=8:{HUGETLB}"
    assert r.system.malloc_hugetlb_source == "the harness's default for engine processes"


def test_bench_no_malloc_hugetlb_starts_every_arm_without_it_and_the_report_says_so(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.core import host

    monkeypatch.setattr(host, "probe", lambda: None)
    monkeypatch.setattr(host, "as_dict", lambda h: {})
    rc = cli.main(["bench", "--a", "env-probe", "--b", "env-probe:slowdown=1.01", "--blocks", "1",
                   "--concurrency", "1", "--no-roofline", "--no-plots", "--no-malloc-hugetlb",
                   "--plugin", PROBE[0], "--plugin", PROBE[1], "--out", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    doc = load_results(out["results"])
    for role in "AB":
        # the switch goes with them: what an arm starts (llama-bench, a server) stays off too
        assert doc["arms"][role]["describe"]["environ"] == {TUNABLES: None, SWITCH: "0"}
    assert doc["system"]["malloc_hugetlb"] is False
    assert doc["system"]["malloc_hugetlb_source"] == "turned off by --no-malloc-hugetlb"
    md = Path(out["markdown"]).read_text()
    assert md.count("- glibc malloc hugepages for the arms' processes: off (turned off by --no-malloc-hugetlb)") == 2


# ---------------------------------------------------------------- processes an arm starts


LLAMA_BENCH = """#!/usr/bin/env python3
import json, os
with open(os.path.join(os.path.dirname(__file__), "env.txt"), "a") as f:
    f.write(repr(os.environ.get("GLIBC_TUNABLES")) + "\\n")
print(json.dumps([{"avg_ts": 100.0}]))
"""


def _artifact(tmp_path: Path, tool: str, script: str = "") -> Path:
    d = tmp_path / "dist" / "llamacpp-9.9.9-cpu"
    (d / "bin").mkdir(parents=True)
    exe = d / "bin" / tool
    exe.write_text(script or "#!/bin/sh\n")
    exe.chmod(0o755)
    (d / "manifest.json").write_text(json.dumps({"engine": "llamacpp", "pin": "9.9.9", "variant": "cpu"}))
    return d


@needs_tunable
def test_llama_bench_runs_with_it(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness_plugins.llamacpp.bench import LlamaBenchArm

    artifact = _artifact(tmp_path, "llama-bench", LLAMA_BENCH)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    arm = LlamaBenchArm({"artifact": str(artifact), "model": str(model)})
    arm.warmup()
    monkeypatch.setenv(SWITCH, "0")  # as in a worker of `harness bench --no-malloc-hugetlb`
    arm.warmup()
    assert (artifact / "bin" / "env.txt").read_text().splitlines() == [repr(HUGETLB)] * 2 + ["None"] * 2


class _Popen:
    """Stands for the server process: records what it was started with."""

    started: list[tuple[list[str], dict[str, str]]] = []  # noqa: RUF012

    def __init__(self, argv: list[str], *, env: dict[str, str], **_: Any) -> None:
        self.started.append((argv, env))
        self.returncode = 0

    def poll(self) -> int:
        return 0


@needs_tunable
@pytest.mark.parametrize("kind", ["server", "llama-server"])
def test_the_http_arms_servers_start_with_it(kind: str, cache: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from harness_plugins.llamacpp import bench_http

    monkeypatch.setattr(bench_http, "n_vocab_of", lambda path: 100)
    monkeypatch.setattr(bench_http._HttpArm, "_wait_ready", lambda self: None)
    monkeypatch.setattr(bench_http.subprocess, "Popen", _Popen)
    _Popen.started.clear()
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    cls = bench_http.ServerArm if kind == "server" else bench_http.LlamaServerArm
    options = {"model": str(model), "threads": 2}
    if kind == "llama-server":
        options["artifact"] = str(_artifact(tmp_path, "llama-server"))
    cls(options).close()
    monkeypatch.setenv(TUNABLES, "glibc.malloc.arena_max=8")
    cls(options).close()
    (argv, env), (_, env_user) = _Popen.started
    assert argv[0] == (sys.executable if kind == "server" else options["artifact"] + "/bin/llama-server")
    assert env[TUNABLES] == HUGETLB and env["PATH"] == os.environ["PATH"]
    assert env_user[TUNABLES] == f"glibc.malloc.arena_max=8:{HUGETLB}"


# ---------------------------------------------------------------- harness serve


def _environ_of(pid: int) -> dict[str, str]:
    """What ``pid`` was started with (glibc cuts GLIBC_TUNABLES there at each ``:``: one tunable reads whole)."""
    pairs = (item.partition(b"=") for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if item)
    return {k.decode(): v.decode(errors="replace") for k, _, v in pairs}


@needs_tunable
def test_the_serve_engine_worker_starts_with_it_unless_turned_off(fake_env: dict[str, str],  # noqa: F811
                                                                   tmp_path: Path) -> None:
    from harness.serve.remote import WorkerRuntime

    model = Path(fake_env["FAKE_MODEL"])
    config = tmp_path / "tiny.yaml"
    config.write_text(f"name: tiny\nbackend: llamacpp\nparameters:\n  model: {model.name}\n")
    seen = []
    for off in (None, False):
        rt = WorkerRuntime.start(config, name="tiny", models_dir=model.parent, variant="steady", max_queue=2,
                                 timeout=60, malloc_hugetlb=off)
        try:
            env = _environ_of(rt.pid)
            seen.append((env.get(TUNABLES), env.get(SWITCH)))
        finally:
            rt.close()
    assert seen == [(HUGETLB, None), (None, "0")]
    assert TUNABLES not in os.environ  # the server's own environment is left as it was


def test_serve_no_malloc_hugetlb_reaches_the_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from harness.core.errors import UsageError
    from harness.serve import server

    got: dict[str, Any] = {}

    def load_models(configs: list[Path], **kw: Any) -> None:
        got.update(kw)
        raise UsageError("stop here")

    monkeypatch.setattr(server, "load_models", load_models)
    config = tmp_path / "c.yaml"
    assert cli.main(["serve", str(config), "--no-malloc-hugetlb"]) == UsageError.exit_code
    assert got["malloc_hugetlb"] is False
    assert cli.main(["serve", str(config)]) == UsageError.exit_code
    assert got["malloc_hugetlb"] is None  # $HARNESS_MALLOC_HUGETLB decides: on by default
