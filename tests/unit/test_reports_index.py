"""reports/README.md is the generated index of the committed reference reports.

Compared without its "cited by" column: that one moves with any file naming a folder (a test, a
help text), which should not fail an unrelated change; rerun the script to refresh it.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT / "reports" / "README.md"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("index_reports", ROOT / "scripts" / "index_reports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _without_citations(text: str) -> list[str]:
    return [re.sub(r" \| [^|]*\|$", " |", line) if line.startswith("| `reference-") else line
            for line in text.splitlines() if "cited by no file" not in line]


def test_the_index_is_current() -> None:
    script = _script()
    generated = script.render(script.folders())
    assert _without_citations(INDEX.read_text(encoding="utf-8")) == _without_citations(generated), (
        "reports/README.md is stale: python scripts/index_reports.py")


def test_every_reference_folder_has_a_row_and_every_host_kind_a_reference() -> None:
    text = INDEX.read_text(encoding="utf-8")
    folders = sorted(d.name for d in (ROOT / "reports").iterdir() if d.is_dir() and d.name.startswith("reference-"))
    assert re.findall(r"^\| `(reference-[^`]+)` \|", text, re.M) == folders
    per_host = text.split("## The reference qualification per host kind", 1)[1].split("\n## ", 1)[0]
    refs = re.findall(r"^\| [^|]+ \| [^|]+ \| `(reference-[^`]+)` \|", per_host, re.M)
    assert refs, "no reference qualification for any host kind"
    for name in refs:
        assert any((ROOT / "reports" / name).rglob("qualify.json")), name
