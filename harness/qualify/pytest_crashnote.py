"""pytest plugin (``-p harness.qualify.pytest_crashnote``): tell the parent which spec is running.

Loaded by :mod:`harness.qualify.e2e` into each spec process. Before each test it records the
test id in the crash note, after each phase the outcomes so far, so a process killed by
a signal still reports the spec it died in and the results it had.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.core import crash

_done: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    crash.note(running=nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _done[report.outcome].append(report.nodeid)
        crash.note(**{k: list(v) for k, v in _done.items()})
