"""vllm.cpp beside llama.cpp on the same weights: the pair fixture (``HARNESS_VLLM_MODEL``, the
random-weight HF Llama, and ``HARNESS_VLLM_PAIR_GGUF``, its conversion by the pinned llama.cpp's
converter: ``harness models fetch --engine vllmcpp``), both bindings built.

The greedy check (prompt token counts equal, every divergence a near-tie in llama.cpp's own
distribution), vllm.cpp's chat through the model's template, and vllm.cpp's bench arm.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.core.errors import BindingError
from harness.engine.descriptor import load_engine
from harness.qualify.specs import model_path
from harness.runtime import discovery

if TYPE_CHECKING:
    from harness_plugins.vllmcpp.engine import Engine


def _binding(engine: str) -> None:
    spec = load_engine(engine)
    try:
        discovery.choose(engine, spec.pin, discovery.committed_fingerprint(engine), "cpu")
    except BindingError as e:
        pytest.skip(f"no usable {engine} cpu binding: {e}")


@pytest.fixture(scope="module")
def pair() -> tuple[Path, Path]:
    _binding("vllmcpp")
    _binding("llamacpp")
    return model_path("HARNESS_VLLM_MODEL"), model_path("HARNESS_VLLM_PAIR_GGUF")


@pytest.fixture(scope="module")
def cross(pair: tuple[Path, Path]) -> dict[str, Any]:
    from harness_plugins.vllmcpp.crossengine import run

    return run(*pair, threads=2)


def test_both_engines_cut_every_prompt_the_same(cross: dict[str, Any]) -> None:
    rows = cross["rows"]
    assert rows and all(r["prompt_tokens"]["vllmcpp"] == r["prompt_tokens"]["llamacpp"] > 0 for r in rows), rows
    assert all(r["completion_tokens"]["llamacpp"] == cross["max_tokens"] for r in rows)


def test_llamacpp_side_is_its_own_greedy_chain(cross: dict[str, Any]) -> None:
    # the argmax chain rebuilt from evaluate() is what llama.cpp's sampler generates
    assert all(r["peer_sampler_agrees"] for r in cross["rows"]), [r["text"] for r in cross["rows"]]


def test_greedy_tokens_agree_or_part_only_at_a_near_tie(cross: dict[str, Any]) -> None:
    s = cross["summary"]
    detail = [(r["prompt"], r["diverges_at"], r["peer_margin_at_divergence"], r["text"]) for r in cross["rows"]
              if not r["identical"]]
    assert s["passed"], detail
    assert s["identical"] + sum(1 for r in cross["rows"] if r["near_tie"]) == s["prompts"], detail


@pytest.fixture(scope="module")
def engine(pair: tuple[Path, Path]) -> Iterator[Engine]:
    from harness_plugins.vllmcpp.engine import Engine

    eng = Engine.load(pair[0], max_num_seqs=4, max_model_len=512, threads=2)
    yield eng
    eng.close()


def test_chat_goes_through_the_model_template(engine: Engine) -> None:
    r = engine.chat([{"role": "user", "content": "Hello"}], max_tokens=8, temperature=0.0)
    choice = r["choices"][0]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    # "user: Hello\nassistant:" in GPT-2's tokens
    assert r["usage"]["prompt_tokens"] == 7 and 0 < r["usage"]["completion_tokens"] <= 8


def test_the_bench_arm_measures_the_asked_shape(pair: tuple[Path, Path]) -> None:
    from harness_plugins.vllmcpp.bench import VllmArm

    arm = VllmArm({"model": str(pair[0]), "threads": 2, "n_ctx": 512, "max_num_seqs": 2, "_role": "B"})
    try:
        arm.warmup()
        m = arm.measure(32, 8, 2)
        d = arm.describe()
    finally:
        arm.close()
    assert m["ttft_s"] > 0 and m["decode_tps"] > 0 and m["aggregate_tps"] > 0
    assert d["engine"] == "vllmcpp" and d["abi_version"] == 5 and d["model"]["n_params"] > 15_000_000
