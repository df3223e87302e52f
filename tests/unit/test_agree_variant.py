"""Agreement rows of another variant (vulkan against cpu): the variant's arm puts every layer on its
device, and the in-process arm hands ``n_gpu_layers`` to the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.agree import corpus as corpora
from harness.agree import run as agree_run
from harness.core.errors import UsageError


class _Engine:
    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs

    def info(self) -> dict[str, Any]:
        return {"cpu_variant": "sapphirerapids"}

    def close(self) -> None:
        pass


def test_the_in_process_arm_hands_the_layer_count_to_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.runtime import Runtime
    from harness_plugins.llamacpp import bench

    loads: list[dict[str, Any]] = []

    def load(model: str, **kwargs: Any) -> _Engine:
        loads.append({"model": model, **kwargs})
        return _Engine(kwargs)

    monkeypatch.setattr(Runtime, "load", staticmethod(load))
    monkeypatch.setattr(bench, "n_vocab_of", lambda path: 49152)
    bench.BindingArm({"model": "/m/x.gguf", "variant": "vulkan", "n_gpu_layers": -1, "threads": 2,
                      "n_batch": 512, "n_ubatch": 512})
    bench.BindingArm({"model": "/m/x.gguf", "variant": "cpu", "threads": 2})
    assert loads[0]["n_gpu_layers"] == -1 and loads[0]["variant"] == "vulkan"
    assert (loads[0]["n_batch"], loads[0]["n_ubatch"]) == (512, 512)
    assert "n_gpu_layers" not in loads[1], "without the option the engine keeps its own default"


def test_a_gpu_variants_row_runs_every_layer_on_its_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cross-variant stage's variant row: the engine's default (0 layers on the device) would
    leave the weights in host memory and most of the work on the CPU backend."""
    from harness_plugins.llamacpp import crossvariant

    asked: list[tuple[str, str, str | None]] = []

    def fake(a: str, b: str, **kw: Any) -> Any:
        asked.append((a, b, kw["kind"]))
        raise UsageError("not run in this test")

    pin = corpora.CorpusPin(name="docutils-prose", doc="", package="docutils", version="0.21.2",
                            filename="docutils-0.21.2.tar.gz", sha256="0", members={})
    monkeypatch.setattr(agree_run, "agree", fake)
    monkeypatch.setattr(corpora, "load_corpus", lambda *a, **k: corpora.Corpus(
        name="docutils-prose", text="x", archive=Path("x"), pin=pin))
    out = crossvariant.agreement_rows(Path("/m/x.gguf"), "sapphirerapids", ["haswell"], ["vulkan"], threads=2)
    ref = "in-process:variant=cpu,level=sapphirerapids"
    assert (ref, "in-process:variant=vulkan,n_gpu_layers=-1", "variant") in asked
    assert (ref, "in-process:variant=cpu,level=haswell", "level") in asked
    assert {e["label"] for e in out["errors"]} == {"cpu/haswell", "vulkan", "cpu/sapphirerapids batch 4 vs 1"}


def test_the_table_of_the_recorded_vulkan_row() -> None:
    """Recorded on this project's host (Sapphire Rapids, 2 threads; lavapipe: Mesa 22.3.6 llvmpipe):
    ``harness agree in-process:variant=cpu in-process:variant=vulkan,n_gpu_layers=-1 --kind variant
    --tokens 4096``. The vulkan arm really ran its own binding on the device (about 70x slower than
    the CPU backend), and the row lies inside the descriptor's variant thresholds."""
    import json

    from harness.agree.report import markdown
    from harness.agree.stats import Interval, Summary
    from harness.agree.thresholds import for_engine

    data = json.loads((Path(__file__).parent / "data" / "agree-variant-vulkan-lavapipe.json").read_text())
    b = data["arms"]["B"]["describe"]
    assert b["variant"] == "vulkan" and b["binding"].endswith("/harness_llamacpp_vulkan")
    assert b["options"]["n_gpu_layers"] == -1
    tps = data["timing"]["eval_tokens_per_s"]
    assert tps["A"] > 50 * tps["B"], "the vulkan arm ran on llvmpipe, not on the CPU backend"
    md = markdown(data)
    for row in ("| mean KLD (nats) | 0.00583 | [0.00533, 0.00637] |", "| p99 KLD | 0.0283 | [0.0233, 0.0336] |",
                "| top-1 agreement | 95.41% | [94.70%, 96.09%] |",
                "| perplexity ratio B/A | 0.999792 | [0.995526, 1.003962] |"):
        assert row in md
    s = data["summary"]
    summary = Summary(**{k: v for k, v in s.items() if k not in ("ci", "confidence")},
                      ci={k: Interval(low=v[0], high=v[1]) for k, v in s["ci"].items()})
    assert for_engine("llamacpp")["variant"].violations(summary) == []
