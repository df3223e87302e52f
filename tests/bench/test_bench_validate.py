"""How long `harness validate` takes on 1000 model configs (pytest-benchmark; not collected by default).

Run: python -m pytest tests/bench/test_bench_validate.py -p no:cacheprovider
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.config.validate import Report, Validator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
N = 1000


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("configs")
    texts = [p.read_text() for p in sorted(EXAMPLES.glob("*.yaml"))]
    for i in range(N):
        text = texts[i % len(texts)]
        name = text.split("\nname: ", 1)[1].split("\n", 1)[0]
        text = text.replace(f"\nname: {name}\n", f"\nname: {name}-{i}\n")
        if i % 10 == 0:  # some configs with findings, so the error paths are timed too
            text += "contex_size: 10\n"
        (root / f"{i // 100:02d}").mkdir(exist_ok=True)
        (root / f"{i // 100:02d}" / f"model-{i:04d}.yaml").write_text(text)
    return root


def test_validate_1000_configs(benchmark: Any, configs: Path) -> None:
    validator = Validator(engines={"llamacpp", "stable-diffusion.cpp"})
    report: Report = benchmark(validator.validate_paths, [configs])
    assert report.files == N and report.configs == N
    assert report.errors == N // 10
    assert benchmark.stats.stats.mean < 5.0, "1000 configs must validate in a few seconds"
