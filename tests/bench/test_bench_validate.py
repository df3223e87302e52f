"""How long `harness validate` takes on 1,000 model configs (pytest-benchmark; not collected by default).

What is timed is what ``harness validate DIR`` does after start-up: walk the directory, read
each file, parse it as LocalAI's YAML parser does, and check it, with the validator the CLI
builds (the plugins' engines and their config rules on). The 1,000 files are the examples and
the LocalAI corpus (tests/data/localai) copied round-robin, full configs renamed apart, gallery
bodies as they are; every tenth full config has a misspelt key, a different one each time, so the
diagnostic paths (did-you-mean included) are timed too. The issue's budget: 1,000 configs in under 0.5 s.

Run: python -m pytest tests/bench/test_bench_validate.py -p no:cacheprovider
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.config.validate import Report, Validator

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "examples" / "models").glob("*.yaml")),
           *sorted((ROOT / "tests" / "data" / "localai").glob("*.yaml"))]
N = 1000
BUDGET_S = 0.5
_NAME = re.compile(r"^name: (.+)$", re.M)


@functools.cache
def _misspellings() -> list[str]:
    """A letter dropped from each of LocalAI's top-level keys, every way, the results all different."""
    from harness.config.localai import vocabulary

    known = set(vocabulary().keys["config"])
    words = {key[:i] + key[i + 1:] for key in known for i in range(len(key))} - known - {""}
    return sorted(words)


def _misspelt(k: int) -> str:
    """The k-th misspelt key: the did-you-mean path runs on a new word every time, as typos come."""
    return _misspellings()[k * 7919 % len(_misspellings())]


def _texts() -> list[str]:
    # One config per file: a full config named at the top level (renamed apart, so every model
    # name stays unique) or a gallery body (no name). List files are timed in the unit tests.
    out = []
    for p in SOURCES:
        text = p.read_text()
        if text.lstrip().startswith("- "):
            continue
        if _NAME.search(text) or "config_file:" in text:
            out.append(text)
    return out


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Counter[str], int]:
    root = tmp_path_factory.mktemp("configs")
    texts = _texts()
    expected: Counter[str] = Counter()
    misspelt = 0
    single = Validator()
    for i in range(N):
        text = texts[i % len(texts)]
        if "config_file:" not in text:  # a gallery file's own name: is not a model name
            text = _NAME.sub(lambda m, i=i: f"name: {m.group(1).strip()}-{i}", text, count=1)
            if i % 10 == 0:
                text = text.rstrip("\n") + f"\n{_misspelt(i // 10)}: 1\n"
                misspelt += 1
        (root / f"{i // 100:02d}").mkdir(exist_ok=True)
        path = root / f"{i // 100:02d}" / f"model-{i:04d}.yaml"
        path.write_text(text)
        # What one file alone gets is what it must get among the thousand.
        expected.update(d.severity for d in single.validate_paths([path]).diagnostics)
    return root, expected, misspelt


def test_validate_1000_configs(benchmark: Any, configs: tuple[Path, Counter[str], int]) -> None:
    root, expected, misspelt = configs
    validator = Validator()  # as `harness validate` builds it

    report: Report = benchmark(validator.validate_paths, [root])
    assert report.files == N and report.configs == N
    assert Counter(d.severity for d in report.diagnostics) == expected
    assert expected["error"] == 0 and expected["warning"] >= misspelt >= N // 20
    mean = benchmark.stats.stats.mean
    assert mean < BUDGET_S, f"{N} configs took {mean:.3f} s on average (the budget: {BUDGET_S} s)"
