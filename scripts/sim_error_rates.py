"""The simulation gate's error rates: injected code-path regressions caught, A/A false alarms.

    python scripts/sim_error_rates.py --model $HARNESS_MODEL [--reps 20] [--gate 1] [--shape 8,24,2,10]

Three comparisons, each repeated ``--reps`` times, every run in a fresh process; each repetition draws
its own random environment size, shared by its runs as a qualification's measurement shares one (the
stack moves between repetitions; nothing else differs, which is the point: the instrument's figure
depends on the binary and its input, not on the host's load):

- **A/A**: the installed binding against itself: repetition i's measurement against repetition i+1's
  (the last against the first), every one an independent set of runs. A FAILED verdict is a false alarm.
- **kernel +4-6%**: the binding on a cpu artifact built with
  ``scripts/data/9100-test-only-haswell-q4-1-dot-3pct-more-work.patch`` on top of the pinned series
  (the haswell level's Q4_1 x Q8_1 dot product computes one block in 33, at least one per row, a
  second time: 4-6% more blocks on SmolLM2's rows; real loads and multiply-adds, the result unchanged). Built through the harness's own pipeline into
  ``<cache>/sim-study/kernel``; with ccache only the patched file recompiles.
- **binding +2%**: a binding whose per-token callback (``Engine::on_token``) runs a multiply-add
  chain sized to 2% of the base binding's decode instructions per token, measured first; built
  from a copy of the engine's recipe and unpacked beside the installed one (as an old pin's is).

Each repetition measures every arm through the simulation plan (3 runs each: base, longer prompt,
longer generation; ``--repeat-run`` adds the base again for a per-run resolution) and compares A with B
at ``--gate`` percent on prefill and decode, on both figures (estimated cycles and instructions: either
resolving below the floor fails). Detection: the verdict is FAILED on a metric the regression touches
(kernel: prefill and decode; binding: decode). Writes
``<out>/sim-error-rates.json`` and ``.md``.

Blind spot, by construction: a slowdown made of waiting (the wall-clock study's ``sleep``-based
arm, ``fake:slowdown=``) costs no instruction and no simulated miss: simulation does not see it.
Nor does it see threads (one thread), memory bandwidth beyond the miss counts, or the device.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import _injection  # scripts/_injection.py (scripts/ is on sys.path when run as a script)

ENGINE = "llamacpp"
PATCH = Path(__file__).with_name("data") / "9100-test-only-haswell-q4-1-dot-3pct-more-work.patch"
#: A first guess at the instructions of one iteration of the injected chain; the calibration measures
#: the real figure on a first build (the compiler's loop: ~7.2 on GCC 12 -O2) and rebuilds with the
#: iteration count that gives the asked share.
CHAIN_INSTRUCTIONS = 4
ON_TOKEN = "void Engine::on_token(Slot & s, llama_token tok) {\n    auto & r = *s.req;\n    r.t.n_generated++;\n"


def kernel_artifact(work: Path) -> Path:
    """The cpu artifact of the pinned engine with the 3% kernel patch after its series."""
    from harness.build.matrix import get_variant
    from harness.build.pipeline import build_row, prepare_build
    from harness.core import paths
    from harness.engine.descriptor import parse_engine

    recipe = work / "kernel-recipe"
    src = paths.project_root()
    # the engine's one folder (descriptor, patches, ABI surface, binding source), without its plugin and specs
    shutil.copytree(src / "engines" / ENGINE, recipe / "engines" / ENGINE, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("plugin", "e2e", "__pycache__"))
    shutil.copy2(PATCH, recipe / "engines" / ENGINE / "patches" / PATCH.name)
    spec = parse_engine(recipe / "engines" / ENGINE / "engine.yaml")
    import os

    old = os.environ.get("HARNESS_DIST")
    os.environ["HARNESS_DIST"] = str(work / "kernel-dist")
    try:
        return build_row(prepare_build(spec), get_variant("cpu")).artifact
    finally:
        if old is None:
            os.environ.pop("HARNESS_DIST", None)
        else:
            os.environ["HARNESS_DIST"] = old


def injected_binding(work: Path, iterations: int) -> dict[str, str]:
    """The binding whose per-token callback runs ``iterations`` of a multiply-add chain per decoded token."""
    code = ("    {  // TEST ONLY (scripts/sim_error_rates.py): extra work per decoded token\n"
            "        static volatile unsigned long long sim_study_sink = 0;\n"
            "        unsigned long long h = sim_study_sink;\n"
            f"        for (unsigned long long i = 0; i < {iterations}ULL; ++i) h = h * 6364136223846793005ULL + i;\n"
            "        sim_study_sink = h;\n    }\n")
    return _injection.injected_binding(work, f"sim{iterations:010d}", ON_TOKEN, code, source="engine_loop.cpp")


def calibrate_injection(work: Path, out: Path, plan: Any, per_token_ir: float, pct: float, target: Any,
                        jobs: int | None) -> int:
    """The chain iterations per decoded token that add ``pct`` percent to the base binding's decode
    instructions: a first build at :data:`CHAIN_INSTRUCTIONS`'s guess is measured, the instructions one
    iteration really costs are read off it, and the count is corrected (written to
    ``runs/calibration/injection.json``)."""
    from harness.bench import simulation
    from harness.core import progress

    want = per_token_ir * pct / 100.0
    first = max(1, round(want / CHAIN_INSTRUCTIONS))
    fig = simulation.measure([target("calibration-injected", **injected_binding(work, first))], plan,
                             out / "runs" / "calibration", jobs=jobs)[0]
    per_iteration = (fig.decode["Ir"] - per_token_ir) / first
    if per_iteration <= 0:
        raise SystemExit(f"the injected chain added {fig.decode['Ir'] - per_token_ir:+,.0f} instructions per token: "
                         "did the binding build with it?")
    iterations = max(1, round(want / per_iteration))
    progress.info(f"decode: {per_token_ir:,.0f} instructions per token; one chain iteration costs "
                  f"{per_iteration:.2f} instructions; binding +{pct:g}%: {iterations:,} iterations per token")
    (out / "runs" / "calibration" / "injection.json").write_text(json.dumps(
        {"iterations": iterations, "instructions_per_iteration": per_iteration, "first_guess": first,
         "decode_instructions_per_token": per_token_ir, "pct": pct}, indent=2) + "\n")
    return iterations


def load_runs(d: Path, plan: Any) -> dict[str, Any]:
    """Arm name -> figures, from the cachegrind files a measurement left in ``d`` (arms with every run)."""
    import re

    from harness.bench import simulation
    from harness.core.errors import BenchError

    runs: dict[str, list[simulation.SimRun]] = {}
    pat = re.compile(r"^(?P<name>.+)-(?P<role>(?:base|prompt|generation)\d*)-p(?P<pn>\d+)-g(?P<gn>\d+)\.cachegrind\.out$")
    for f in sorted(d.glob("*.cachegrind.out")):
        m = pat.match(f.name)
        if m:
            try:  # a run stopped mid-way has no summary line yet
                counts = simulation.parse_cachegrind(f.read_text())
            except BenchError:
                continue
            runs.setdefault(m["name"], []).append(simulation.SimRun(role=m["role"], pn=int(m["pn"]), gn=int(m["gn"]),
                                                                    counts=counts, seconds=0.0, env_pad=-1))
    roles = {r for r, _, _ in plan.shapes()}
    out: dict[str, Any] = {}
    for name, rs in runs.items():
        if roles <= {r.role for r in rs}:
            try:  # a run cut short by a stopped study: that arm of that repetition is incomplete
                out[name] = simulation.figures_from_runs(name, plan, rs)
            except BenchError:
                continue
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a Q4_1 GGUF (SmolLM2-135M Q4_1: $HARNESS_MODEL)")
    p.add_argument("--reps", type=int, default=20, help="repetitions of each comparison (default 20)")
    p.add_argument("--gate", type=float, default=1.0, help="percent B may be slower (default 1)")
    p.add_argument("--shape", default="8,24,2,10",
                   help="simulation run lengths P1,P2,G1,G2 (default 8,24,2,10: qualify's for SmolLM2)")
    p.add_argument("--repeat-run", action="store_true",
                   help="also run each arm's shapes twice per repetition (the gate's resolution); by "
                   "default the repetitions themselves show the spread, and each ratio is compared as a point")
    p.add_argument("--binding-pct", type=float, default=2.0, help="injected binding work, percent of decode (default 2)")
    p.add_argument("--out", type=Path, default=None, help="report dir (default reports/<stamp>-sim-error-rates)")
    p.add_argument("--jobs", type=int, default=None, help="runs at once (default: the CPUs)")
    p.add_argument("--analyze", action="store_true",
                   help="measure nothing: read the runs already in --out (runs/repNN/, runs/calibration/) and write "
                   "the report from every complete repetition (a study stopped early keeps what it measured)")
    args = p.parse_args(argv)

    from harness.bench import simulation
    from harness.core import paths, progress

    plan = dataclasses.replace(simulation.SimPlan.parse(args.shape), repeats=1 if args.repeat_run else 0)
    level = simulation.level_for_host()
    out = args.out or paths.reports_dir() / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-sim-error-rates"
    out.mkdir(parents=True, exist_ok=True)
    work = paths.cache_root() / "sim-study"
    work.mkdir(parents=True, exist_ok=True)
    gate = {"prefill": args.gate, "decode": args.gate}
    t0 = time.perf_counter()

    def target(name: str, **opts: Any) -> simulation.SimTarget:
        return simulation.target_for("in-process", {"model": args.model, "variant": "cpu", "engine": ENGINE,
                                                    "name": name, **opts}, level=level)

    arms = {"A": {}, "kernel": {}, "binding": {}}
    comparisons = {"aa": "A", "kernel": "kernel", "binding": "binding"}
    touched = {"aa": (), "kernel": ("prefill", "decode"), "binding": ("decode",)}
    if args.analyze:
        kernel = work / "kernel-dist"
        base_fig = load_runs(out / "runs" / "calibration", plan)["calibration"]
        per_token_ir = base_fig.decode["Ir"]
        iterations = int(json.loads((out / "runs" / "calibration" / "injection.json").read_text())["iterations"])
        figs_by_rep = [figs for d in sorted((out / "runs").glob("rep*"))
                       if set(arms) <= set(figs := load_runs(d, plan))]
        if not figs_by_rep:
            raise SystemExit(f"no complete repetition under {out / 'runs'}")
    else:
        progress.info("building the kernel artifact (a few % more Q4_1 blocks) (ccache: the patched file only) ...")
        kernel = kernel_artifact(work)
        progress.info(f"kernel artifact: {kernel}")
        # calibrate the binding injection on the base binding's decode instructions per token
        base_fig = simulation.measure([target("calibration")], plan, out / "runs" / "calibration", jobs=args.jobs)[0]
        per_token_ir = base_fig.decode["Ir"]
        iterations = calibrate_injection(work, out, plan, per_token_ir, args.binding_pct, target, args.jobs)
        arms = {"A": {}, "kernel": {"lib_dir": str(kernel / "lib")}, "binding": injected_binding(work, iterations)}
        figs_by_rep = []
        for rep in range(1, args.reps + 1):
            targets = [target(name, **opts) for name, opts in arms.items()]
            figs_by_rep.append({f.name: f for f in simulation.measure(targets, plan, out / "runs" / f"rep{rep:02d}",
                                                                      jobs=args.jobs)})
            progress.info(f"rep {rep}/{args.reps} measured ({time.perf_counter() - t0:.0f} s)")
    rows: list[dict[str, Any]] = []
    for i, figs in enumerate(figs_by_rep):
        row: dict[str, Any] = {"rep": i + 1}
        for comp, b in comparisons.items():
            other = figs_by_rep[(i + 1) % len(figs_by_rep)]["A"] if comp == "aa" else figs[b]
            row[comp] = [c.as_dict() for c in simulation.compare(figs["A"], other, gate)]
        rows.append(row)
        progress.info(f"rep {i + 1}: " + "; ".join(
            f"{comp} " + ",".join(f"{c['metric']} {c['speed']:.4f}x {c['verdict']}" for c in row[comp])
            for comp in comparisons))

    def rate(comp: str) -> dict[str, Any]:
        failed = [any(c["verdict"] == "FAILED" for c in r[comp] if c["metric"] in (touched[comp] or ("prefill", "decode")))
                  for r in rows]
        def fig(c: dict[str, Any], name: str) -> float:
            return float(next(f["speed"] for f in c["figures"] if f["name"] == name))

        speeds = {m: [fig(next(c for c in r[comp] if c["metric"] == m), "estimated cycles") for r in rows]
                  for m in ("prefill", "decode")}
        ir = {m: [fig(next(c for c in r[comp] if c["metric"] == m), "instructions") for r in rows]
              for m in ("prefill", "decode")}
        by: dict[str, int] = {}
        for r in rows:
            for c in r[comp]:
                if c["verdict"] == "FAILED":
                    by[f"{c['metric']} on {c['decided_by']}"] = by.get(f"{c['metric']} on {c['decided_by']}", 0) + 1
        return {"failed": sum(failed), "of": len(rows), "failed_by": by,
                "speed_range": {m: [min(v), max(v)] for m, v in speeds.items()},
                "instructions_speed_range": {m: [min(v), max(v)] for m, v in ir.items()},
                "resolution_pct_max": max(c["resolution_pct"] for r in rows for c in r[comp])}

    summary = {comp: rate(comp) for comp in comparisons}
    doc = {"model": args.model, "level": level, "plan": plan.as_dict(), "gate_pct": args.gate,
           "binding_iterations": iterations, "decode_instructions_per_token": per_token_ir,
           "kernel_artifact": str(kernel), "valgrind": simulation.valgrind_version(), "formula": simulation.FORMULA,
           "seconds": round(time.perf_counter() - t0, 1), "summary": summary, "reps": rows,
           "blind_spot": "a slowdown made of waiting (sleep) costs no instruction: invisible to simulation"}
    (out / "sim-error-rates.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = [f"# Simulation gate error rates ({len(rows)} repetitions, gate {args.gate:g}%)", "",
          f"Model {Path(args.model).name}, CPU level {level}, one thread, runs P{plan.p1}/G{plan.g1}, "
          f"P{plan.p2}/G{plan.g1}, P{plan.p1}/G{plan.g2}{' each twice, the least per event' if plan.repeats else ''} per arm and "
          f"repetition, each in a fresh process, one random environment size per repetition; {doc['valgrind']}; "
          f"{doc['seconds'] / 60:.1f} min. Speed B/A per token (> 1: B costs less), estimated cycles and instructions; "
          "a verdict fails when either figure lies below the floor.", "",
          "| comparison | FAILED verdicts | expected | failed on | est. cycles prefill (min-max) | decode | "
          "instructions prefill | decode | widest resolution |",
          "|---|---:|---|---|---|---|---|---|---:|"]
    expect = {"aa": "0 (false alarms)", "kernel": f"{len(rows)} (detections)", "binding": f"{len(rows)} (detections)"}
    for comp, s in summary.items():
        pr, de = s["speed_range"]["prefill"], s["speed_range"]["decode"]
        ipr, ide = s["instructions_speed_range"]["prefill"], s["instructions_speed_range"]["decode"]
        on = ", ".join(f"{k} {v}" for k, v in sorted(s["failed_by"].items())) or "-"
        md.append(f"| {comp} | {s['failed']}/{s['of']} | {expect[comp]} | {on} | {pr[0]:.4f}-{pr[1]:.4f} | "
                  f"{de[0]:.4f}-{de[1]:.4f} | {ipr[0]:.4f}-{ipr[1]:.4f} | {ide[0]:.4f}-{ide[1]:.4f} | "
                  f"±{s['resolution_pct_max']:.4f}% |")
    inj = json.loads((out / "runs" / "calibration" / "injection.json").read_text())
    md += ["", f"Binding injection: {iterations:,} iterations of a multiply-add chain per decoded token, "
           f"{inj['instructions_per_iteration']:.2f} instructions each (measured on a first build of "
           f"{inj['first_guess']:,}): {iterations * inj['instructions_per_iteration']:,.0f} instructions, "
           f"{100 * iterations * inj['instructions_per_iteration'] / per_token_ir:.2f}% of the base decode's "
           f"{per_token_ir:,.0f} per token.",
           "", "Blind spot: a slowdown made of waiting (the wall-clock study's sleep-based arm) executes nothing: "
           "simulation does not see it, nor threads, bandwidth beyond the miss counts, or the device. "
           "Wall-clock ABBA runs beside it for those.", ""]
    (out / "sim-error-rates.md").write_text("\n".join(md))
    print("\n".join(md))
    print(f"report: {out}")
    ok = (summary["aa"]["failed"] == 0 and summary["kernel"]["failed"] == len(rows)
          and summary["binding"]["failed"] == len(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
