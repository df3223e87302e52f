"""The descriptor's ``qualify:`` section, typed (harness.engine.qualify_settings): defaults in one place,
the shipped descriptors read whole."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.core.types import EngineSpec, SourceSpec
from harness.engine import qualify_settings as qs
from harness.engine.descriptor import load_engine


def _spec(raw: dict[str, object]) -> EngineSpec:
    return EngineSpec(name="toy", root=Path("/nonexistent/engines/toy"), source=SourceSpec(kind="git", version="1"),
                      upstream={}, cmake={}, targets=(), artifacts={}, abi={}, raw=raw)


def test_a_descriptor_that_says_nothing_gets_every_default() -> None:
    s = qs.qualify_settings(_spec({}))
    assert s == qs.QualifySettings()
    assert (s.ceiling_min_ratio, s.bench.budget_s, s.bench.max_blocks) == (0.97, 240.0, 12)
    assert s.bench.models == () and s.bench.simulation is None and not s.cross_variant


def test_values_are_typed_and_zero_means_off() -> None:
    s = qs.qualify_settings(_spec({"qualify": {"cross_variant": True, "bench_peer": "peer",
                                               "ceiling": {"min_ratio": 0.9},
                                               "bench": {"until_halfwidth": 0, "budget_s": 0, "max_blocks": "8",
                                                         "simulation": {"M": {"p1": 8, "p2": 24, "g1": 2, "g2": 10}}}}}))
    assert s.cross_variant and s.bench_peer == "peer" and s.ceiling_min_ratio == 0.9
    assert s.bench.until_halfwidth is None and s.bench.budget_s is None and s.bench.max_blocks == 8
    assert s.bench.simulation == {"M": qs.SimShape(p1=8, p2=24, g1=2, g2=10)}


def test_the_shipped_descriptor_reads_whole() -> None:
    s = qs.qualify_settings(load_engine("llamacpp"))
    assert s.cross_variant and s.bench_peer and "thresholds" in s.agreement
    assert s.bench.simulation and all(dataclasses.astuple(v) for v in s.bench.simulation.values())


def test_a_bench_model_can_have_its_own_wall_clock_shape() -> None:
    """The bandwidth model's shape is its own (qualify.bench.shapes); --pn/--gn set every model's."""
    from harness.qualify.bench_plan import bench_plan

    raw = {"qualify": {"bench": {"models": ["smollm2", "bandwidth"],
                                 "shapes": {"bandwidth": {"pn": 128, "gn": 64}, "tiny": {"gn": 32}}}}}
    s = qs.qualify_settings(_spec(raw))
    assert s.bench.shapes == {"bandwidth": qs.BenchShape(pn=128, gn=64), "tiny": qs.BenchShape(pn=512, gn=32)}
    plan = bench_plan(_spec(raw), threads=1)
    assert (plan.for_model("smollm2").pn, plan.for_model("smollm2").gn) == (512, 128)
    big = plan.for_model("bandwidth")
    assert (big.pn, big.gn) == (128, 64) and big.config().pn == 128 and big.as_dict()["pn"] == 128
    given = bench_plan(_spec(raw), threads=1, pn=256)
    assert (given.for_model("bandwidth").pn, given.for_model("bandwidth").gn) == (256, 128)


def test_a_bench_model_is_a_pinned_fixture() -> None:
    """A name no engine folder's fixtures.yaml pins fails the plan, before any build, with a did-you-mean."""
    import pytest

    from harness.core.errors import UsageError
    from harness.qualify.bench_plan import bench_plan

    raw = {"qualify": {"bench": {"models": ["smollm"]}}}
    with pytest.raises(UsageError, match=r"fixture model 'smollm'.*did you mean 'smollm2'"):
        bench_plan(_spec(raw), threads=1)
    assert bench_plan(_spec({"qualify": {}}), threads=1).models == ()  # no bench models: no bench stages


def test_the_schema_takes_shapes_and_refuses_a_bad_one(tmp_path: Path) -> None:
    import pytest
    import yaml

    from harness.core.errors import ConfigError
    from harness.engine.descriptor import parse_engine

    src = load_engine("llamacpp").root / "engine.yaml"
    doc = yaml.safe_load(src.read_text())
    doc["qualify"]["bench"]["shapes"] = {"bandwidth": {"pn": 0}}
    bad = tmp_path / "llamacpp" / "engine.yaml"
    bad.parent.mkdir()
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="pn"):
        parse_engine(bad)
