"""Speculative decoding in the backend's batching loop: greedy output unchanged, distribution kept.

SmolLM2-135M-Instruct (HARNESS_CHAT_MODEL) with n-gram drafting (ngram-simple) and with a draft
model (draft-simple: SmolLM2 drafting for itself, the only same-vocabulary pair among the
fixtures), against the same model without speculation; the tiny random llama
(HARNESS_TINY_MODEL) for the statistical test, drafted by a tiny llama of another seed (same
vocabulary, different weights: its drafts are often wrong, which is what the test needs).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import errors
from harness.runtime import Engine

from ..conftest import model_path, require_variant

GREEDY: dict[str, Any] = {"temperature": 0.0, "max_tokens": 64}

PASSAGE = ("The river begins as a thin line of snowmelt high in the northern hills. In early spring the "
           "water runs clear and cold over grey stones and fallen pine needles. Farmers in the valley below "
           "watch the level rise each week and plan their planting around it.")

#: Copy-heavy prompts (drafts get accepted) and free ones (drafts mostly rejected or absent).
PROMPTS = (
    f"Passage:\n{PASSAGE}\n\nRepeat the passage above word for word.\n\nPassage:\n",
    f"{PASSAGE}\n\nQuestion: What do the farmers in the valley watch?\nAnswer, quoting the text:",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "def factorial(n):\n",
    "The capital of France is",
    "Once upon a time",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
)


def _load(variant: str, **kw: Any) -> Engine:
    return Engine.load(model_path("HARNESS_CHAT_MODEL"), variant=variant, n_ctx=4096, max_num_seqs=4,
                       threads=2, **kw)


@pytest.fixture(scope="module")
def plain(variant: str) -> Iterator[Engine]:
    require_variant(variant)
    with _load(variant) as eng:
        yield eng


@pytest.fixture(scope="module")
def ngram(variant: str) -> Iterator[Engine]:
    require_variant(variant)
    with _load(variant, spec_type="ngram-simple", n_draft=8, ngram_n=3) as eng:
        yield eng


@pytest.fixture(scope="module")
def drafted(variant: str) -> Iterator[Engine]:
    require_variant(variant)
    with _load(variant, draft_model=str(model_path("HARNESS_CHAT_MODEL")), n_draft=4) as eng:
        yield eng


@pytest.fixture(scope="module")
def reference(plain: Engine) -> dict[str, str]:
    return {p: plain.complete(p, GREEDY).text for p in PROMPTS}


def _spec(request: pytest.FixtureRequest, kind: str) -> Engine:
    eng: Engine = request.getfixturevalue(kind)
    return eng


@pytest.mark.parametrize("kind", ["ngram", "drafted"])
def test_greedy_output_is_identical(request: pytest.FixtureRequest, kind: str, reference: dict[str, str]) -> None:
    eng = _spec(request, kind)
    before = eng.stats()
    for p in PROMPTS:
        c = eng.complete(p, GREEDY)
        assert c.text == reference[p], (kind, p)
        assert c.n_steps <= c.n_generated
    after = eng.stats()
    assert after["drafted"] > before["drafted"], "the spec must exercise drafting"
    assert after["accepted"] > before["accepted"], "some drafts must be accepted (copy prompts)"
    assert eng.info()["spec_type"] == {"ngram": "ngram-simple", "drafted": "draft-simple"}[kind]


def test_copy_prompt_takes_fewer_forward_passes(ngram: Engine) -> None:
    c = ngram.complete(PROMPTS[0], GREEDY)
    assert c.n_drafted > 0 and c.acceptance_rate is not None and c.acceptance_rate > 0.5, c
    assert c.tokens_per_step is not None and c.tokens_per_step > 1.5, c


@pytest.mark.parametrize("kind", ["ngram", "drafted"])
def test_four_concurrent_streams_are_identical(request: pytest.FixtureRequest, kind: str,
                                               reference: dict[str, str]) -> None:
    eng = _spec(request, kind)
    prompts = PROMPTS[:4]
    got: dict[int, str] = {}
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            got[i] = "".join(eng.stream(prompts[i], GREEDY))
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    for i, p in enumerate(prompts):
        assert got[i] == reference[p], (kind, p)


def test_stop_strings_and_max_tokens_as_without_speculation(ngram: Engine, plain: Engine,
                                                            reference: dict[str, str]) -> None:
    full = reference[PROMPTS[0]]
    words = full.split()
    assert len(words) > 8, full
    stop = " " + words[6]  # a word the copy reaches in the middle of an accepted draft
    want = plain.complete(PROMPTS[0], GREEDY, stop=[stop])
    got = ngram.complete(PROMPTS[0], GREEDY, stop=[stop])
    assert (got.text, got.finish_reason) == (want.text, want.finish_reason) == (full[: full.index(stop)], "stop")
    streamed = "".join(ngram.stream(PROMPTS[0], GREEDY, stop=[stop]))
    assert streamed == want.text
    for n in (1, 5, 13):
        c = ngram.complete(PROMPTS[0], temperature=0.0, max_tokens=n, ignore_eos=True)
        assert c.n_generated == n and c.finish_reason == "length"
        assert c.text == plain.complete(PROMPTS[0], temperature=0.0, max_tokens=n, ignore_eos=True).text


def test_json_schema_as_without_speculation(ngram: Engine, plain: Engine) -> None:
    schema = {"type": "object", "properties": {"river": {"type": "string"}, "hills": {"type": "string"}},
              "required": ["river", "hills"]}
    prompt = f"{PASSAGE}\n\nAs JSON, where does the river begin?\n"
    want = plain.complete(prompt, temperature=0.0, max_tokens=48, json_schema=schema)
    got = ngram.complete(prompt, temperature=0.0, max_tokens=48, json_schema=schema)
    assert got.text == want.text


def test_cancel_mid_stream_frees_the_slot(ngram: Engine, reference: dict[str, str]) -> None:
    s = ngram.stream(PROMPTS[0], temperature=0.0, max_tokens=200)
    it = iter(s)
    first = next(it)
    s.close()
    assert first
    assert s.result is None or s.result.finish_reason == "cancelled"
    assert ngram.complete(PROMPTS[0], GREEDY).text == reference[PROMPTS[0]]
    assert ngram.stats()["active"] == 0


def test_draft_model_of_another_vocabulary_is_refused(variant: str) -> None:
    require_variant(variant)
    with pytest.raises(errors.ModelError, match="cannot draft for this model"):
        _load(variant, draft_model=str(model_path("HARNESS_TINY_MODEL")))


def test_config_with_speculative_settings_loads_and_speculates(variant: str, tmp_path: Path,
                                                               reference: dict[str, str]) -> None:
    require_variant(variant)
    model = model_path("HARNESS_CHAT_MODEL")
    (tmp_path / model.name).symlink_to(model)
    cfg = tmp_path / "smol-spec.yaml"
    cfg.write_text(f"name: smol-spec\nbackend: llama-cpp\ncontext_size: 4096\nparameters:\n  model: {model.name}\n"
                   f"  temperature: 0\ndraft_model: {model.name}\nn_draft: 6\n")
    with Engine.load(config=cfg, models_dir=tmp_path, threads=2) as eng:
        info = eng.info()
        assert info["spec_type"] == "draft-simple" and info["n_draft"] == 6, info
        c = eng.complete(PROMPTS[0], max_tokens=64)
        assert c.text == reference[PROMPTS[0]]
        assert c.n_accepted > 0
    ng = tmp_path / "smol-ngram.yaml"
    ng.write_text(f"name: smol-ngram\nparameters:\n  model: {model.name}\n  temperature: 0\n"
                  "options:\n  - spec_type:ngram-simple\n  - spec_ngram_size_n:2\n  - draft_max:5\n")
    with Engine.load(config=ng, models_dir=tmp_path, threads=2) as eng:
        info = eng.info()
        assert (info["spec_type"], info["n_draft"], info["ngram_n"]) == ("ngram-simple", 5, 2), info
        assert eng.complete(PROMPTS[0], max_tokens=64).text == reference[PROMPTS[0]]


# -- the accept rule keeps the target distribution ----------------------------------------------

#: Significance level of the chi-square test: the spec fails when the two samples differ at 0.1%.
ALPHA = 0.001
SAMPLES = 1200
SAMPLING: dict[str, Any] = {"temperature": 1.0, "top_k": 3, "top_p": 1.0, "min_p": 0.0, "max_tokens": 3,
                            "ignore_eos": True}


def _samples(eng: Engine, prompt: list[int], seeds: range) -> Counter[str]:
    """The 3-token continuation of one request per seed. With max_tokens 3 the engine drafts one
    token after the first (whose logits come from the prompt) and verifies it, so the second
    token is decided by the accept rule and the third follows from it."""
    out: Counter[str] = Counter()
    lock = threading.Lock()
    seeds_left = list(seeds)
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            while True:
                with lock:
                    if not seeds_left:
                        return
                    seed = seeds_left.pop()
                c = eng.complete(prompt, SAMPLING, seed=seed)
                assert c.n_generated == 3, c
                with lock:
                    out[c.text] += 1
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    return out


def test_sampled_distribution_is_kept(variant: str, tmp_path: Path) -> None:
    """Two-sample chi-square test (alpha 0.001) of the distribution of the continuation whose second
    token is the first one verified against a draft, with and
    without a draft model, on disjoint seeds (so a speculating run cannot simply replay the same
    random numbers). The draft is another tiny llama: wrong often enough that an accept rule which
    favoured the draft would shift the distribution far past the threshold."""
    scipy_stats = pytest.importorskip("scipy.stats")
    require_variant(variant)
    from harness_plugins.llamacpp.tiny import write_tiny_llama

    target = model_path("HARNESS_TINY_MODEL")
    draft = tmp_path / "tiny-draft-s1.gguf"
    write_tiny_llama(draft, seed=1)
    kw: dict[str, Any] = {"variant": variant, "n_ctx": 512, "max_num_seqs": 4, "threads": 2}
    with Engine.load(target, **kw) as eng:
        prompt = eng.tokenize("the cat sat on the mat and the cat")
        off = _samples(eng, prompt, range(SAMPLES))
    with Engine.load(target, draft_model=str(draft), n_draft=3, spec_min_acceptance=0.0, **kw) as eng:
        on = _samples(eng, prompt, range(SAMPLES, 2 * SAMPLES))
        stats = eng.stats()
    assert stats["drafted"] >= SAMPLES, "every request must have had a draft verified"
    assert 0 < stats["accepted"] < stats["drafted"], "the draft must be right sometimes and wrong sometimes"
    # categories with too few expected counts are pooled, as the chi-square approximation needs
    common = [t for t in set(off) | set(on) if off[t] + on[t] >= 20]
    table = [[off[t] for t in common] + [sum(off.values()) - sum(off[t] for t in common)],
             [on[t] for t in common] + [sum(on.values()) - sum(on[t] for t in common)]]
    if table[0][-1] + table[1][-1] == 0:
        table = [row[:-1] for row in table]
    assert len(table[0]) >= 3, f"too few categories to test: {table}"
    result = scipy_stats.chi2_contingency(table)
    assert result.pvalue > ALPHA, f"distributions differ (p={result.pvalue:.2e}): {table}"
