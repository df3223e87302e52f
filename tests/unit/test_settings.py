"""Every HARNESS_* environment variable is declared once in harness/core/settings.py, and the README's
table is the generated one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from harness.core import settings

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bHARNESS_[A-Z0-9_]*[A-Z0-9]\b")
GENERATOR = ROOT / "scripts" / "generate_settings_table.py"


def _sources() -> list[Path]:
    """What reads or sets the variables: the package, the plugins, scripts, nox, the e2e specs (the unit
    tests' own names, like a fixture set's HARNESS_D, are not settings)."""
    files = [ROOT / "noxfile.py", ROOT / "scripts" / "bootstrap.sh", ROOT / ".ci" / "run"]
    for top, patterns in (("harness", ("*.py", "*.yaml")), ("plugins", ("*.py", "*.yaml")),
                          ("scripts", ("*.py", "*.sh")), ("engines", ("*.py", "*.yaml"))):
        files += [p for pattern in patterns for p in (ROOT / top).rglob(pattern)]
    return [p for p in files if p.is_file() and p.resolve() != Path(settings.__file__).resolve()]


def _used() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in _sources():
        for name in set(NAME.findall(path.read_text(encoding="utf-8", errors="replace"))):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_variable_in_the_sources_is_declared() -> None:
    used = _used()
    assert "HARNESS_CACHE" in used and "HARNESS_JOBS" in used  # the scan sees the package
    undeclared = {n: sorted(w)[:3] for n, w in used.items() if n not in settings.BY_NAME and n not in settings.NOT_ENVIRONMENT}
    assert not undeclared, f"declare these in harness/core/settings.py (SETTINGS): {undeclared}"


def test_every_declaration_is_used() -> None:
    used = _used()
    stale = sorted(n for n in (*settings.BY_NAME, *settings.NOT_ENVIRONMENT) if n not in used)
    assert not stale, f"declared in harness/core/settings.py but read nowhere: {stale}"


def test_each_name_once_with_a_default_a_doc_and_a_group() -> None:
    names = [s.name for s in settings.SETTINGS]
    assert len(names) == len(set(names)) and not set(names) & settings.NOT_ENVIRONMENT
    for s in settings.SETTINGS:
        assert NAME.fullmatch(s.name) and s.default and s.doc and s.group in settings.GROUPS, s
        assert "|" not in s.default + s.doc, f"{s.name}: '|' breaks the README's table"


def test_get_reads_the_environment() -> None:
    jobs = settings.setting("HARNESS_JOBS")
    assert jobs.get({"HARNESS_JOBS": "3"}) == "3"
    assert jobs.get({"HARNESS_JOBS": ""}) is None and jobs.get({}) is None


def test_readme_table_is_the_generated_one() -> None:
    r = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True,
                       cwd=ROOT, check=False)
    assert r.returncode == 0, f"{r.stderr.strip()} (or: nox -s generate_settings)"
    table = (ROOT / "README.md").read_text(encoding="utf-8")
    assert settings.markdown_table() in table and all(f"| `{s.name}` |" in table for s in settings.SETTINGS)
