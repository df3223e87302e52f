"""Run e2e spec files so that one crash cannot take the others down.

Each spec file runs in its own pytest process (``-p harness.qualify.pytest_crashnote`` records
the running test in a crash note). A process that dies by a signal is reported with the
signal, the spec that was running and the CPU level it had loaded; the results of the
other files, and of the tests that finished before the crash, are kept.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.core import progress
from harness.core.crash import Crash, run_child
from harness.core.errors import UsageError
from harness.core.pyexec import python_argv


@dataclass(frozen=True, kw_only=True)
class FileResult:
    """One spec file's process: counts, failed test ids, and the crash if it died."""

    path: str
    returncode: int
    seconds: float
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    skipped: int = 0
    deselected: int = 0
    """Tests a ``-m`` expression left out (pytest's own count)."""
    crash: Crash | None = None

    @property
    def ok(self) -> bool:
        return self.crash is None and self.returncode in (0, 5) and not self.failed


@dataclass(frozen=True, kw_only=True)
class E2EResult:
    files: list[FileResult]

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.files)

    @property
    def passed(self) -> int:
        return sum(f.passed for f in self.files)

    @property
    def skipped(self) -> int:
        return sum(f.skipped for f in self.files)

    @property
    def deselected(self) -> int:
        return sum(f.deselected for f in self.files)

    @property
    def failed(self) -> list[str]:
        return [t for f in self.files for t in f.failed]

    @property
    def crashes(self) -> list[str]:
        return [f"{f.path}: {f.crash.describe()}" for f in self.files if f.crash is not None]

    def summary(self) -> str:
        text = f"{self.passed} passed, {len(self.failed)} failed, {self.skipped} skipped"
        if self.deselected:
            text += f", {self.deselected} deselected"
        if self.crashes:
            text += f", {len(self.crashes)} crashed ({'; '.join(self.crashes)})"
        return text

    def as_dict(self) -> dict[str, object]:
        return {"passed": self.passed, "failed": self.failed, "skipped": self.skipped, "deselected": self.deselected,
                "crashes": self.crashes,
                "files": [{"path": f.path, "returncode": f.returncode, "seconds": f.seconds, "passed": f.passed,
                           "failed": f.failed, "skipped": f.skipped, "deselected": f.deselected,
                           "crash": f.crash.describe() if f.crash else None} for f in self.files]}


def spec_files(paths: Sequence[Path]) -> list[Path]:
    """Expand directories into their ``test_*.py`` files (sorted); files pass through."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(p.rglob("test_*.py"))
        elif p.is_file():
            out.append(p)
        else:
            msg = f"no spec file or directory {p}; expected an engine's e2e folder (engines/<name>/e2e) or a test_*.py file"
            raise UsageError(msg)
    return out


def _junit(xml: Path) -> tuple[int, list[str], int]:
    passed, failed, skipped = 0, [], 0
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


DESELECTED = re.compile(r"\b(\d+) deselected\b")


def _deselected(stdout: str) -> int:
    """pytest's own count of the tests a ``-m`` expression left out (its summary line)."""
    found = DESELECTED.findall(stdout)
    return int(found[-1]) if found else 0


def run_specs(specs: Sequence[Path], *, pytest_args: Sequence[str] = (), env: dict[str, str] | None = None,
              cwd: Path | None = None, capture: bool = True) -> E2EResult:
    """One pytest process per spec file; ``capture=False`` lets their output through (CI logs).

    With ``cwd``, test ids are relative to it (``--rootdir``): otherwise pytest roots them at the
    nearest project file above the specs, which moves with wherever the temp dir lives."""
    files = spec_files(specs)
    results: list[FileResult] = []
    base = dict(env if env is not None else os.environ)
    for n, spec in enumerate(files, 1):
        progress.info(f"e2e [{n}/{len(files)}] {spec}")
        with tempfile.TemporaryDirectory(prefix="harness-e2e-") as tmp:
            xml = Path(tmp) / "junit.xml"
            argv = [*python_argv("-m", "pytest"), "-p", "no:cacheprovider", "-p", "harness.qualify.pytest_crashnote",
                    "-p", "harness.qualify.specs", str(spec), f"--junitxml={xml}", *([f"--rootdir={cwd}"] if cwd is not None else []),
                    *pytest_args]
            t0 = time.perf_counter()
            r = run_child(argv, env=base, cwd=cwd, capture=capture)
            seconds = round(time.perf_counter() - t0, 2)
            returncode = -1 if r.returncode is None else r.returncode  # no timeout: never None
            died = r.crash
            if died is not None:
                facts = died.note
                res = FileResult(path=str(spec), returncode=returncode, seconds=seconds,
                                 passed=len(facts.get("passed") or []),
                                 failed=[*(facts.get("failed") or []), f"{died.running or spec} (crashed)"],
                                 skipped=len(facts.get("skipped") or []), crash=died)
                progress.info(f"[red]crashed[/] {progress.escape(f'{spec}: {died.describe()}')}", markup=True)
            elif xml.is_file():
                p, f, s = _junit(xml)
                res = FileResult(path=str(spec), returncode=returncode, seconds=seconds, passed=p, failed=f, skipped=s,
                                 deselected=_deselected(r.stdout) if capture else 0)
            else:
                tail = (r.stdout + r.stderr).strip().splitlines()[-1:] if capture else []
                res = FileResult(path=str(spec), returncode=returncode, seconds=seconds,
                                 failed=[f"{spec} (pytest exited {returncode} without results"
                                         + (f": {tail[0]}" if tail else "") + ")"])
        results.append(res)
    return E2EResult(files=results)
