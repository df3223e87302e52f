"""One step of ``git bisect run``: ``python -m harness.bisect.step STATE``.

git runs it with the commit to test in ``BISECT_HEAD`` (the bisect's clone is bare: nothing is
checked out). It answers as ``git bisect run`` reads an exit status: 0 good, 1 bad, 125 skip (the
commit does not build, its patch series does not apply, or the gate could not decide), 128 stop (the
harness itself failed: the reason is left in the state dir for the parent to raise).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from harness.bisect import search
    from harness.core.errors import HarnessError

    state = Path(argv[0])
    # git runs a step with its own GIT_DIR (the bisect's clone): the step's own git commands (a commit's
    # checkout into the source cache) must not inherit it
    for key in [k for k in os.environ if k.startswith("GIT_")]:
        del os.environ[key]
    commit = subprocess.run(["git", "-C", str(state / "repo.git"), "rev-parse", "BISECT_HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    try:
        config = search.Config.load(state)
        step = search.probe_commit(state, config, commit)
    except HarnessError as e:
        search.record_error(state, e)
        print(f"{commit[:12]}: stopped: {e}", flush=True)
        return search.ABORT
    print(f"{commit[:12]} {step.verdict}{' (stamped)' if step.reused else ''}: {step.text}", flush=True)
    return {"good": search.GOOD, "bad": search.BAD}.get(step.verdict, search.SKIP)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
