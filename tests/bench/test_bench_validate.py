"""How long `harness validate` takes on 1000 model configs (pytest-benchmark; not collected by default).

The configs are the examples and the LocalAI corpus (tests/data/localai), renamed apart,
with the built-in plugins' engine rules on; every tenth has an unknown key, so the error
paths are timed too. The goal: 1000 configs in under 2 s.

Run: python -m pytest tests/bench/test_bench_validate.py -p no:cacheprovider
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from harness.config.validate import Report, Validator
from harness.engine.plugin import make_manager

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "examples" / "models").glob("*.yaml")),
           *sorted((ROOT / "tests" / "data" / "localai").glob("*.yaml"))]
N = 1000
_NAME = re.compile(r"^name: (.+)$", re.M)


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("configs")
    # One config per file, named at the top level (the list and gallery forms are timed in
    # the unit tests): renaming keeps every model name unique.
    texts = [t for t in (p.read_text() for p in SOURCES) if _NAME.search(t) and "config_file:" not in t]
    for i in range(N):
        text = _NAME.sub(lambda m, i=i: f"name: {m.group(1).strip()}-{i}", texts[i % len(texts)], count=1)
        if i % 10 == 0:
            text += "contex_size: 10\n"
        (root / f"{i // 100:02d}").mkdir(exist_ok=True)
        (root / f"{i // 100:02d}" / f"model-{i:04d}.yaml").write_text(text)
    return root


def test_validate_1000_configs(benchmark: Any, configs: Path) -> None:
    validator = Validator(engines={"llamacpp", "stable-diffusion.cpp"}, pm=make_manager(autoload=False))
    report: Report = benchmark(validator.validate_paths, [configs])
    assert report.files == N and report.configs == N
    assert report.errors == N // 10
    assert benchmark.stats.stats.mean < 2.0, "1000 configs must validate in under 2 s"
