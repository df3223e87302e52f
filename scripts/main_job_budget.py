"""The main job's cost, measured as a benchmark (never a timed test): ``bash scripts/bootstrap.sh qualify``
from a fresh clone of HEAD, timed stage by stage against a budget.

    python scripts/main_job_budget.py [--cold] [--budget-min 40] [--out DIR]

``--cold`` makes every cache the job fills empty, as on a fresh machine: its own HARNESS_CACHE
(sources, builds, models, toolchains), an empty ccache, a new bootstrap venv, no pip cache, and the
clone's own ``.nox``. Without it the job runs on this user's caches (a warm re-run). The clone is
made with ``git clone`` of this checkout's HEAD, so uncommitted work is not measured.

Writes ``<out>/budget.json`` and ``.md``: the wall time, each stage's seconds from the job's
``qualify.json``, the verdict, the load average before and after (a figure taken while something
else ran is not evidence), and whether the job ended within the budget. Exits 0 when it did and
ended PASSED or FAILED (a decision), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cold", action="store_true", help="empty caches, as on a fresh machine (see above)")
    p.add_argument("--budget-min", type=float, default=40.0, help="the budget in minutes (default 40)")
    p.add_argument("--out", type=Path, default=None, help="report dir (default reports/<stamp>-main-job-budget)")
    p.add_argument("--keep", action="store_true", help="keep the clone and its caches (default: removed)")
    args = p.parse_args(argv)

    root = Path(__file__).resolve().parents[1]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = (args.out or root / "reports" / f"{stamp}-main-job-budget").resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="main-job-budget-"))
    clone = work / "clone"
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", str(root), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", head], check=True)
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    if args.cold:
        env.update(HARNESS_CACHE=str(work / "cache"), CCACHE_DIR=str(work / "ccache"),
                   BOOTSTRAP_VENV=str(work / "bootstrap-venv"), PIP_NO_CACHE_DIR="1")
    report = out / "qualify"
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    with (out / "job.log").open("w") as log:
        r = subprocess.run(["bash", "scripts/bootstrap.sh", "qualify", "--", "--out", str(report)], cwd=clone, env=env,
                           stdout=log, stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()
    found = sorted(report.rglob("qualify.json"))
    doc: dict[str, object] = {"commit": head, "cold": args.cold, "budget_min": args.budget_min,
                              "wall_s": round(wall, 1), "exit": r.returncode, "load_before": load_before,
                              "load_after": load_after, "cpus": os.cpu_count(), "stages": [], "verdict": None}
    if found:
        q = json.loads(found[-1].read_text())
        doc["stages"] = [{"name": s["name"], "status": s["status"], "seconds": s.get("seconds", 0)}
                         for s in q.get("stages", [])]
        doc["verdict"] = "PASSED" if q.get("passed") else ("FAILED" if r.returncode != 18 else "UNDECIDED")
        doc["report"] = str(found[-1].parent)
    within = wall <= 60 * args.budget_min
    decided = doc["verdict"] in ("PASSED", "FAILED")
    doc["within_budget"] = within
    (out / "budget.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = [f"# Main job budget ({'cold' if args.cold else 'warm'}, commit {head[:12]})", "",
          f"`bash scripts/bootstrap.sh qualify`: {wall / 60:.1f} min against {args.budget_min:g} "
          f"({'within' if within else 'OVER'}); verdict {doc['verdict'] or 'no qualify.json'} (exit {r.returncode}); "
          f"{os.cpu_count()} CPUs; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after.", "",
          "| stage | status | seconds |", "|---|---|---:|"]
    md += [f"| {s['name']} | {s['status']} | {s['seconds']:.0f} |" for s in doc["stages"]]  # type: ignore[attr-defined]
    (out / "budget.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"report: {out}")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0 if within and decided else 1


if __name__ == "__main__":
    sys.exit(main())
