"""A deliberately broken kernel: the agreement gate catches what the Paris check cannot.

``data/9000-test-only-sandybridge-q4-1-dot-drops-low-bits.patch`` makes one CPU level's Q4_1 x
Q8_1 dot product (``ggml_vec_dot_q4_1_q8_1``, the kernel of every Q4_1 matmul of SmolLM2 on
that level) drop the low mantissa bits of its result: sandybridge only (AVX without F16C; it is
never ggml's own pick on a host that runs it, so the reference level stays healthy). ivybridge
runs the same AVX source without the defect and is the control.

The patch goes on top of the pinned series in a temporary recipe (``engines/``, ``abi/`` and
``patches/`` of llamacpp copied, the patch added) and the cpu row is built through the harness's
own pipeline (fetch, ``git apply`` of the series, ABI check, build): the series hash names its own
working copy and build dir, and the artifact goes to ``<cache>/e2e/broken-kernel/dist``, so no
cached artifact or installed binding is touched. With ccache, only the patched file recompiles
(once per CPU level). The installed binding then runs that artifact's CPU levels
(``$HARNESS_BINDING_LIB_DIR``), and qualification's cross-variant check and verdict run on them.

Measured on this project's Sapphire Rapids host (2 threads, 4096 tokens of the corpus against
sapphirerapids): broken sandybridge mean KLD 0.0226, p99 0.169, top-1 91.6%, perplexity ratio
1.0161 (every level limit broken) and still " Paris."; the ivybridge control 0.0039, top-1
96.2%, 1.0010. Time: the build 30 s with a cold series (409 of 433 compilations from ccache), 1 s
stamped; the cross-variant run ~100-112 s (three greedy runs, two level rows, the batch row):
under 2 minutes warm, so it runs with the e2e suite.
"""

from __future__ import annotations

import platform
import shutil
import time
from pathlib import Path

import pytest

from harness.qualify.specs import model_path, require_variant
from harness.runtime import levels

pytestmark = [pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 CPU levels"),
              pytest.mark.harness_selftest]

ENGINE = "llamacpp"
PATCH = Path(__file__).with_name("data") / "9000-test-only-sandybridge-q4-1-dot-drops-low-bits.patch"
BROKEN, CONTROL = "sandybridge", "ivybridge"


def build_with_patch(patch: Path, recipe: Path, dist: Path) -> Path:
    """The cpu artifact of the pinned engine built with ``patch`` after its series; returns its dir.

    ``recipe`` receives the temporary recipe (descriptor, ABI surface, series + ``patch``);
    ``dist`` the artifact. Both stamps (working copy, artifact) make a second call a no-op.
    """
    from harness.build.matrix import get_variant
    from harness.build.pipeline import build_row, prepare_build
    from harness.core import paths
    from harness.engine.descriptor import parse_engine

    src = paths.project_root()
    # the engine's one folder (descriptor, patches, ABI surface, binding source), without its plugin and specs
    shutil.copytree(src / "engines" / ENGINE, recipe / "engines" / ENGINE, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("plugin", "e2e", "__pycache__"))
    shutil.copy2(patch, recipe / "engines" / ENGINE / "patches" / patch.name)
    spec = parse_engine(recipe / "engines" / ENGINE / "engine.yaml")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_DIST", str(dist))
        # the copy is this checkout's own recipe plus the test's patch: trusted, so it shares the engine's
        # compiler cache (an untrusted recipe gets a cache of its own: a cold build of every level)
        mp.setenv("HARNESS_TRUST", ENGINE)
        return build_row(prepare_build(spec), get_variant("cpu")).artifact


@pytest.fixture(scope="module")
def broken_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from harness.core import paths

    t0 = time.perf_counter()
    artifact = build_with_patch(PATCH, tmp_path_factory.mktemp("recipe"),
                                paths.cache_root() / "e2e" / "broken-kernel" / "dist")
    print(f"broken-kernel artifact: {artifact} ({time.perf_counter() - t0:.1f} s)")
    lib = artifact / "lib"
    assert {BROKEN, CONTROL} <= set(levels.cpu_levels(lib))
    return lib


def test_a_broken_kernel_fails_the_agreement_gate_and_passes_the_paris_check(
        variant: str, broken_lib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_variant(variant)
    if variant != "cpu":
        pytest.skip("the broken artifact is a cpu build: its levels run on the cpu binding")
    from harness.qualify.result import StageFailed
    from harness.qualify.stages.levels import cross_variant_result
    from harness_plugins.llamacpp.crossvariant import cross_variant

    monkeypatch.setenv(levels.LIB_DIR_ENV, str(broken_lib))
    monkeypatch.delenv(levels.LEVEL_ENV, raising=False)
    t0 = time.perf_counter()
    r = cross_variant(model_path("HARNESS_CHAT_MODEL"), variants=["cpu"], only_levels=[BROKEN, CONTROL])
    seconds = time.perf_counter() - t0
    runs = {x["label"]: x for x in r["runs"]}
    broken = runs[f"cpu/{BROKEN}"]
    if broken["status"] == "not-run":
        pytest.skip(f"this CPU cannot run {BROKEN} (AVX)")
    agreement = r["agreement"]
    if agreement["reference"] in (f"cpu/{BROKEN}", f"cpu/{CONTROL}"):
        pytest.skip(f"ggml's own pick here is {agreement['reference']}: no healthy reference level")
    # the greedy check cannot tell: the broken level still answers the capital of France
    assert broken["status"] == "ran" and broken["ok"], broken
    assert r["passed"], r["runs"]
    rows = {x["label"]: x for x in agreement["results"]}
    bad, good = rows[f"cpu/{BROKEN}"], rows[f"cpu/{CONTROL}"]
    figures = {k: {f: x["summary"][f] for f in ("kld_mean", "kld_p99", "kld_max", "top1", "ppl_ratio")}
               for k, x in (("broken", bad), ("control", good))}
    print(f"cross-variant with the broken artifact: {seconds:.1f} s; {figures}")
    # the agreement check can: the broken level is outside the level thresholds, the control inside
    assert not bad["passed"] and bad["violations"], figures
    assert good["passed"] and not good["violations"], figures
    assert bad["summary"]["kld_mean"] > 2 * good["summary"]["kld_mean"], figures
    # and qualification's verdict fails the stage naming the level and its worst position, figures kept
    with pytest.raises(StageFailed) as failed:
        cross_variant_result(r)
    summary = failed.value.result.summary
    print(summary)
    s = bad["summary"]
    assert (f"Outside the agreement thresholds: cpu/{BROKEN} against {agreement['reference']} (level): "
            f"{', '.join(bad['violations'])}, worst position corpus token {s['kld_max_token']} "
            f"(window {s['kld_max_window']}, position {s['kld_max_position']}") in summary, summary
    assert f"cpu/{CONTROL} against" not in summary.split("Outside the agreement thresholds:")[1], summary
    assert failed.value.result.data["agreement"]["results"] == agreement["results"]
