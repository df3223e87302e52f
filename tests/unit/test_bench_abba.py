"""The ABBA runner with the deterministic fake arm: order, raw samples, A/A and a 10% slowdown."""

from __future__ import annotations

import pytest

from harness.bench.abba import BenchConfig, BenchResult, block_order, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.stats import analyze
from harness.core.errors import BenchError

FAKE = ("harness_plugins.bench_fake",)


def _run(a: str, b: str, *, aa: bool = False, **cfg: object) -> BenchResult:
    return run_abba(ArmSpec.parse(a), ArmSpec.parse(b), BenchConfig(**cfg),  # type: ignore[arg-type]
                    aa=aa, isolate=False, extra_plugins=FAKE)


def test_block_order_alternates_ab_ba() -> None:
    assert "".join(role for _, role in block_order(4)) == "ABBAABBA"
    assert block_order(3) == [(0, "A"), (0, "B"), (1, "B"), (1, "A"), (2, "A"), (2, "B")]


def test_samples_follow_abba_order_with_positions_and_times() -> None:
    r = _run("fake", "fake:slowdown=1.1", blocks=4, concurrency=(1, 4))
    assert len(r.samples) == 4 * 2 * 2
    turns = [(s.block, s.arm) for s in r.samples if s.concurrency == 1]
    assert turns == block_order(4)
    assert [s.position for s in r.samples if s.concurrency == 1] == [0, 1] * 4
    assert [s.sequence for s in r.samples if s.concurrency == 4] == list(range(8))
    stamps = [s.started_at for s in r.samples]
    assert stamps == sorted(stamps)
    assert all(s.finished_at >= s.started_at and s.pn == 512 and s.gn == 128 for s in r.samples)
    assert set(r.warmup_s) == {"A", "B"}
    assert r.config.as_dict()["order"] == list("ABBAABBA")


def test_result_round_trips_through_dict() -> None:
    r = _run("fake", "fake:seed=2", blocks=2, concurrency=(1,))
    again = BenchResult.from_dict(r.as_dict())
    assert again == r


@pytest.mark.parametrize("cfg", [{"blocks": 0}, {"pn": 0}, {"concurrency": ()}, {"concurrency": (1, 1)}])
def test_config_rejects_nonsense(cfg: dict[str, object]) -> None:
    with pytest.raises(BenchError, match="expected"):
        BenchConfig(**cfg)  # type: ignore[arg-type]


def test_aa_interval_contains_one() -> None:
    r = _run("fake", "fake", aa=True)
    an = analyze(r.samples, aa=True)
    assert an.aa_ok is True
    for key in ("ttft_ms@c1", "decode_tps@c1", "aggregate_tps@c4"):
        ratio = an.metrics[key].ratio
        assert ratio is not None and ratio.ratio.contains(1.0), key
        assert ratio.verdict == "no difference shown"
    assert not [f for f in an.findings if f.level == "error"]


def test_ten_percent_slower_is_detected_at_default_blocks() -> None:
    r = _run("fake", "fake:slowdown=1.10")
    assert r.config.blocks == 4
    an = analyze(r.samples)
    for c in (1, 4):
        dec = an.metrics[f"decode_tps@c{c}"].ratio
        ttft = an.metrics[f"ttft_ms@c{c}"].ratio
        assert dec is not None and ttft is not None
        assert dec.ratio.hi is not None and dec.ratio.hi < 1.0 and dec.verdict == "B slower"
        assert dec.ratio.point == pytest.approx(1 / 1.10, rel=0.03)
        assert ttft.ratio.lo is not None and ttft.ratio.lo > 1.0 and ttft.verdict == "B slower"


def test_faster_candidate_is_called_faster() -> None:
    an = analyze(_run("fake", "fake:slowdown=0.8").samples)
    assert an.metrics["decode_tps@c1"].ratio.verdict == "B faster"  # type: ignore[union-attr]
    assert an.metrics["ttft_ms@c1"].ratio.verdict == "B faster"  # type: ignore[union-attr]
