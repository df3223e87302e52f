"""The README's exit-code table is the error hierarchy's: one row per code, right class."""

from __future__ import annotations

import re
from pathlib import Path

from harness.core import errors


def test_readme_exit_code_table_matches_errors() -> None:
    text = (Path(__file__).parents[2] / "README.md").read_text()
    rows = dict(re.findall(r"^\| (\d+) \| `(\w+)` \|", text, re.M))
    own = {str(c.exit_code): c.__name__ for c in vars(errors).values()
           if isinstance(c, type) and issubclass(c, errors.HarnessError) and "exit_code" in vars(c)}
    own["1"] = "HarnessError"
    assert rows == own
