"""How long `harness validate` takes on 1,000 model configs (pytest-benchmark; not collected by default).

What is timed is what ``harness validate DIR`` does after start-up: walk the directory, read
each file, parse it as LocalAI's YAML parser does, and check it, with the validator the CLI
builds (the plugins' engines and their config rules on). The 1,000 files are the examples and
the LocalAI corpus (tests/data/localai) copied round-robin, full configs renamed apart, gallery
bodies as they are; every tenth full config has a key LocalAI does not know, so the diagnostic paths are
timed too. The issue's budget: 1,000 configs in under 0.5 s.

Run: python -m pytest tests/bench/test_bench_validate.py -p no:cacheprovider
"""

from __future__ import annotations

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
#: Misspelt keys (one per tenth full config, in turn): the did-you-mean path is timed on varied words.
UNKNOWN = ("contex_size: 10\n", "gpu_layer: 10\n", "thread: 4\n", "mmaps: true\n", "stopword: [x]\n",
           "flash_atention: true\n", "knwon_usecases: [chat]\n")


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
def configs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Counter[str]]:
    root = tmp_path_factory.mktemp("configs")
    texts = _texts()
    expected: Counter[str] = Counter()
    single = Validator()
    for i in range(N):
        text = texts[i % len(texts)]
        if "config_file:" not in text:  # a gallery file's own name: is not a model name
            text = _NAME.sub(lambda m, i=i: f"name: {m.group(1).strip()}-{i}", text, count=1)
            if i % 10 == 0:
                text = text.rstrip("\n") + "\n" + UNKNOWN[i // 10 % len(UNKNOWN)]
        (root / f"{i // 100:02d}").mkdir(exist_ok=True)
        path = root / f"{i // 100:02d}" / f"model-{i:04d}.yaml"
        path.write_text(text)
        # What one file alone gets is what it must get among the thousand.
        expected.update(d.severity for d in single.validate_paths([path]).diagnostics)
    return root, expected


def test_validate_1000_configs(benchmark: Any, configs: tuple[Path, Counter[str]]) -> None:
    root, expected = configs
    validator = Validator()  # as `harness validate` builds it

    report: Report = benchmark(validator.validate_paths, [root])
    assert report.files == N and report.configs == N
    assert Counter(d.severity for d in report.diagnostics) == expected
    assert expected["error"] == 0 and expected["warning"] >= N // 10
    mean = benchmark.stats.stats.mean
    assert mean < BUDGET_S, f"{N} configs took {mean:.3f} s on average (the budget: {BUDGET_S} s)"
