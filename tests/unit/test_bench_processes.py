"""The process as the sampling unit: a fresh worker per arm per block, and why it matters.

Two processes of one arm differ by a steady offset (memory layout, where the kernel put their
pages). The fake arm's ``process_sd`` draws such an offset per process; these tests show that one
process per arm turns that offset into a confident, wrong difference, and a fresh process per
block gives intervals that cover the truth.
"""

from __future__ import annotations

import os

from harness.bench import arms as armsmod
from harness.bench.abba import BenchConfig, BenchResult, run_abba
from harness.bench.arms import ArmSpec
from harness.bench.stats import analyze

FAKE = ("harness_plugins.bench_fake",)


def _run(a: str, b: str, *, aa: bool = False, isolate: bool = False, **cfg: object) -> BenchResult:
    return run_abba(ArmSpec.parse(a), ArmSpec.parse(b), BenchConfig(**cfg),  # type: ignore[arg-type]
                    aa=aa, isolate=isolate, extra_plugins=FAKE, record_system=False)


def test_each_block_is_measured_by_new_processes_by_default() -> None:
    r = _run("fake", "fake:slowdown=1.1", blocks=4, concurrency=(1, 4))
    assert [s.process for s in r.samples] == [s.block for s in r.samples]
    assert set(r.warmup_s) == {"A", "B"}


def test_reuse_keeps_one_process_per_arm() -> None:
    r = _run("fake", "fake:slowdown=1.1", blocks=4, concurrency=(1,), fresh_process=False)
    assert {s.process for s in r.samples} == {0}


def _covers(fresh: bool, seed: int) -> bool:
    """An A/A run whose only difference between processes is their offset: does decode's interval hold 1.0?"""
    arm = f"fake:process_sd=0.03,noise=0.002,seed={seed}"
    r = _run(arm, arm, aa=True, blocks=8, concurrency=(1,), fresh_process=fresh)
    return analyze(r.samples, aa=True).metrics["decode_tps@c1"].ratio.ratio.contains(1.0)  # type: ignore[union-attr]


def test_one_process_per_arm_reports_its_offset_as_a_difference_fresh_processes_do_not() -> None:
    seeds = range(20)
    reused = sum(_covers(False, s) for s in seeds)
    fresh = sum(_covers(True, s) for s in seeds)
    # one process per arm: a 3% offset against a 0.2% noise, so the interval misses 1.0 almost always
    assert reused <= 6, reused
    # a process per block: the interval is over processes and covers 1.0 about 95% of the time
    assert fresh >= 17, fresh


def test_workers_get_a_random_environment_size() -> None:
    sizes = set()
    for _ in range(20):
        with armsmod._worker_environment():
            sizes.add(len(os.environ[armsmod.ENV_PAD]))
            assert len(os.environ[armsmod.ENV_PAD]) <= armsmod.ENV_PAD_MAX
    assert len(sizes) > 10
    assert armsmod.ENV_PAD not in os.environ  # restored


def test_spawned_workers_see_their_padding_and_a_fresh_process_per_block() -> None:
    r = _run("fake", "fake", aa=True, blocks=3, concurrency=(1,), isolate=True)
    pads = {(s.arm, s.process): s.extra["env_pad_bytes"] for s in r.samples}
    assert sorted(pads) == [(role, p) for role in "AB" for p in range(3)]
    assert len(set(pads.values())) > 1  # six draws from 0..4096 bytes
