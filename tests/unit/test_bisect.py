"""``harness bisect`` over a synthetic engine's 32 commits (:mod:`tests.unit.bisect_engine`).

Through the CLI as a release engineer runs it: the speed gate (CPU simulation, decode >= 0.97) names
the commit that adds 5% to the hot loop and skips the commit that does not compile; the agreement gate
(kld <= 0.001) names the commit that changes the outputs; a second run answers from its stamps with no
build; an endpoint that is not what it is said to be is refused.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from tests.unit import bisect_engine as bis

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("git", "cmake", "ninja", "cc", "valgrind")),
    reason="needs git, cmake, ninja, a C compiler and valgrind (bash scripts/install-system-deps.sh)")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], Path]:
    tmp = tmp_path_factory.mktemp("bisect")
    bare, commits = bis.make_repo(tmp)
    engines = tmp / "engines"
    bis.make_folder(engines, bare.as_uri(), commits[0])
    return bare, commits, engines


@pytest.fixture
def env(engine: tuple[Path, list[str], Path], tmp_path_factory: pytest.TempPathFactory,
        monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    import harness.engine.plugin as plugin
    from harness.engine import registry

    bare, commits, engines = engine
    cache = tmp_path_factory.getbasetemp() / "bisect-cache"  # shared by the tests: the stamps are the point
    monkeypatch.setenv("HARNESS_ENGINES_PATH", str(engines))
    monkeypatch.setenv("HARNESS_TRUST", "bis")
    monkeypatch.setenv("HARNESS_CACHE", str(cache))
    monkeypatch.setenv("HARNESS_NO_PROGRESS", "1")
    monkeypatch.delenv("HARNESS_DIST", raising=False)
    monkeypatch.delitem(__import__("sys").modules, "harness_plugins.bis", raising=False)
    plugin.get_manager.cache_clear()
    registry.reset()
    yield bare, commits
    plugin.get_manager.cache_clear()
    registry.reset()


def _bisect(capsys: pytest.CaptureFixture[str], bare: Path, *args: str) -> tuple[int, dict, str]:
    code = main(["bisect", "bis", "--repo", str(bare), "--sim-shape", "4,12,2,6,1", *args, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


def test_speed_gate_names_the_slow_commit_and_skips_the_broken_one(env: tuple[Path, list[str]],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bare, commits = env
    code, res, err = _bisect(capsys, bare, "--good", "c0", "--bad", f"c{bis.COMMITS}", "--gate", "decode>=0.97")
    assert code == 0, err
    assert res["first_bad"] == commits[bis.SLOW], res
    assert res["subject"].startswith(f"c{bis.SLOW}:")
    # the endpoints' figures: the bad one 5% slower per generated token (1 in 20 more iterations)
    assert res["bad"]["verdict"] == "bad" and res["bad"]["figure"] == pytest.approx(1 / 1.05, abs=0.01)
    # the commit that does not compile was chosen, built, failed and skipped, and is reported
    skipped = {s["commit"]: s["text"] for s in res["skipped"]}
    assert commits[bis.BROKEN] in skipped, res["steps"]
    assert "does not build" in skipped[commits[bis.BROKEN]]
    # binary: 32 commits, log2(32) = 5 decided steps, plus the skipped one (and the two endpoints)
    decided = [s for s in res["steps"] if s["verdict"] != "skip"]
    assert len(decided) <= math.ceil(math.log2(bis.COMMITS)) + 1
    assert all(s["figure"] is not None for s in decided)
    for s in decided:
        assert (s["verdict"] == "bad") == (s["commit"] in commits[bis.SLOW:]), s
    assert res["builds"] == 2 + len(decided)  # the broken commit is counted as tried, not built
    assert any(line.startswith("harness bench --a bis-bench:artifact=") for line in res["reproduce"])

    # the same command again: every probe from its stamp, no build, the same answer
    code, again, err = _bisect(capsys, bare, "--good", "c0", "--bad", f"c{bis.COMMITS}", "--gate", "decode>=0.97")
    assert code == 0, err
    assert again["first_bad"] == res["first_bad"] and again["builds"] == 0
    assert [s["commit"] for s in again["steps"]] == [s["commit"] for s in res["steps"]]


def test_agreement_gate_names_the_commit_that_changes_results(env: tuple[Path, list[str]],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bare, commits = env
    code, res, err = _bisect(capsys, bare, "--good", "c0", "--bad", f"c{bis.COMMITS}", "--gate", "kld<=0.001")
    assert code == 0, err
    assert res["first_bad"] == commits[bis.CHANGES], res
    assert res["bad"]["figure"] > 0.001
    # the slow commit computes the same outputs: agreement passes on it
    assert all(s["verdict"] == "good" for s in res["steps"] if s["commit"] in commits[bis.SLOW:bis.CHANGES])


def test_a_bad_endpoint_that_passes_is_refused(env: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    bare, _ = env
    code, _, err = _bisect(capsys, bare, "--good", "c0", "--bad", f"c{bis.SLOW - 1}", "--gate", "decode>=0.97")
    assert code == 20 and "passes the gate" in err and "nothing to bisect" in err


def test_endpoints_out_of_order_and_bad_gates_are_usage_errors(env: tuple[Path, list[str]],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    bare, _ = env
    code, _, err = _bisect(capsys, bare, "--good", f"c{bis.COMMITS}", "--bad", "c0", "--gate", "decode>=0.97")
    assert code == 2 and "not an ancestor" in err
    code, _, err = _bisect(capsys, bare, "--good", "c0", "--bad", "no-such-tag", "--gate", "decode>=0.97")
    assert code == 2 and "is not a commit" in err
    code, _, err = _bisect(capsys, bare, "--good", "c0", "--bad", "c3", "--gate", "decode<=0.97")
    assert code == 2 and "decode passes when it is >=" in err
    code, _, err = _bisect(capsys, bare, "--good", "c0", "--bad", "c3", "--gate", "speed")
    assert code == 2 and "is not a gate" in err
