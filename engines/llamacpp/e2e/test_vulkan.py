"""The vulkan variant runs on a Vulkan device (lavapipe counts), not silently on its CPU backend.

Run with ``--variant vulkan`` (nox -s vulkan); on other variants every spec here skips.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.qualify.specs import model_path, require_variant
from harness.runtime import Runtime


def _vulkan_only(variant: str) -> None:
    require_variant(variant)
    if variant != "vulkan":
        pytest.skip("vulkan-only specs (run with --variant vulkan)")


@pytest.fixture(scope="module")
def smol(variant: str) -> Iterator[Runtime]:
    _vulkan_only(variant)
    with Runtime.load(model_path("HARNESS_CHAT_MODEL"), variant=variant, n_ctx=512, max_num_seqs=1, threads=2) as eng:
        yield eng


def test_tiny_model_decodes_on_the_vulkan_device(variant: str) -> None:
    _vulkan_only(variant)
    with Runtime.load(model_path("HARNESS_TINY_MODEL"), variant=variant, n_ctx=256, max_num_seqs=1, threads=2) as eng:
        assert "Vulkan0" in eng.info()["devices"], eng.info()["devices"]
        c = eng.complete("hello world", temperature=0.0, max_tokens=8, ignore_eos=True)
        assert c.n_generated == 8


def test_smollm2_short_shape_answers_paris_on_the_vulkan_device(smol: Runtime) -> None:
    info = smol.info()
    assert info["variant"] == "vulkan" and "Vulkan0" in info["devices"], info["devices"]
    c = smol.complete("The capital of France is", temperature=0.0, max_tokens=8)
    assert "Paris" in c.text, c.text
    assert c.n_prompt > 0 and c.n_generated > 0


def test_greedy_tokens_match_the_cpu_build_for_a_few_tokens(smol: Runtime) -> None:
    """Different kernels may round differently; the first tokens of a greedy answer should agree."""
    from harness.runtime import discovery
    from harness_plugins.llamacpp.engine import _committed_fingerprint

    if not any(c.variant == "cpu" and c.accepted for c in discovery.discover(
            "llamacpp", smol.candidate.identity["pin"], _committed_fingerprint())):
        pytest.skip("no cpu binding installed to compare with")
    vk = smol.complete("The capital of France is", temperature=0.0, max_tokens=4)
    vk_tokens = smol.tokenize(vk.text, add_special=False)
    import json
    import subprocess
    import sys

    child = ("import json, sys\nfrom harness.runtime import Runtime\n"
             "with Runtime.load(sys.argv[1], variant='cpu', n_ctx=512, max_num_seqs=1, threads=2) as e:\n"
             "    c = e.complete('The capital of France is', temperature=0.0, max_tokens=4)\n"
             "    print(json.dumps(e.tokenize(c.text, add_special=False)))\n")
    r = subprocess.run([sys.executable, "-c", child, str(model_path("HARNESS_CHAT_MODEL"))], capture_output=True,
                       text=True, timeout=300, check=True)
    cpu_tokens = json.loads(r.stdout.strip().splitlines()[-1])
    assert vk_tokens[:2] == cpu_tokens[:2], (vk.text, vk_tokens, cpu_tokens)
