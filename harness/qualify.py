"""Qualification: the whole pipeline for one engine pin on this host, with one report.

fetch -> patch (+check) -> ABI check -> build default variants -> backend -> models
-> e2e specs per variant -> cross-variant check -> ABBA bench vs the peer -> report.

Every stage is recorded (passed / failed / skipped, seconds, figures). A failed
stage skips the stages that need it; the run fails if any stage failed.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import paths
from harness.build import artifact_dir, ccache_summary
from harness.errors import AuditError, EngineCrashError, HarnessError, HostError
from harness.matrix import get_variant
from harness.qualify_bench import (
    bench_plan,
    bench_section,
    ceiling_bench,
    old_pin_bench,
    peer_bench,
    stage_name,
)
from harness.runtime.levels import LEVEL_ENV
from harness.stages import Qualification, SkippedStage, Stage, StageFailed, StageResult
from harness.types import EngineSpec, PatchedTree

__all__ = ["Carried", "Qualification", "SkippedStage", "Stage", "StageFailed", "StageResult", "qualify",
           "render_markdown", "write_qualification"]


@dataclass
class Carried:
    """What earlier stages hand later ones, typed (a stage that needs one runs only after its
    producer passed: ``needs=`` in :meth:`Qualification.run`)."""

    tree: PatchedTree | None = None
    abi_fingerprint: str | None = None
    variants: tuple[str, ...] = ()
    runnable_extra: tuple[str, ...] = ()
    model_env: dict[str, str] = field(default_factory=dict)

    def patched(self) -> PatchedTree:
        if self.tree is None:  # needs=("patch",) makes this unreachable
            raise HarnessError("the patch stage has not produced a tree")
        return self.tree


def qualify(engine_name: str | None = None, *, bench_blocks: int | None = None, bench_pn: int = 512,
            bench_gn: int = 128, bench_concurrency: tuple[int, ...] = (1, 4), out: Path | None = None,
            run_bench: bool = True, old_pin: str | None = None, old_rev: str | None = None,
            threads: int | None = None, fail_on_slower: Sequence[str] | None = None,
            until_halfwidth: float | None = None, max_blocks: int | None = None,
            variant: str | None = None, arch: Sequence[str] | None = None) -> tuple[Qualification, Path]:
    """Every stage for the engine's pin; with ``old_pin``/``old_rev`` also the pin move's PR material:
    the ABI/API diff from the old pin and an old-vs-new ABBA run of the engine's own benchmark tool
    on the cpu variant. ``engine_name`` None: the default text engine.

    The bench stages run on every model of the descriptor's ``qualify.bench.models``, adaptively
    (``until_halfwidth``, ``max_blocks``; 0 for a fixed ``bench_blocks``), and fail on the gate
    (``fail_on_slower``, default from the descriptor); ``threads`` defaults to the physical cores.
    ``variant``: the matrix rows to build and test (fnmatch patterns), instead of the default rows.

    ``arch``: the architectures whose cross-built rows (``target:`` in the matrix) are built and
    qualified under emulation; None: every cross row this host can build and run (its toolchain
    is installed); ``[]``: none."""
    from harness import host as hostmod
    from harness import pipeline
    from harness.abi.check import check_engine
    from harness.build import build
    from harness.engines import load_engine
    from harness.matrix import buildability, engine_support, load_matrix, select
    from harness.plugin import get_manager

    pm = get_manager()
    from harness import registry

    engine = load_engine(engine_name or registry.default("text").name)
    plan = bench_plan(engine, blocks=bench_blocks, pn=bench_pn, gn=bench_gn, concurrency=bench_concurrency,
                      until_halfwidth=until_halfwidth, max_blocks=max_blocks, fail_on_slower=fail_on_slower,
                      threads=threads)
    q = Qualification(engine=engine.name)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    report = (out or paths.reports_dir()) / f"{stamp}-qualify-{engine.name}"
    report.mkdir(parents=True, exist_ok=True)
    host = hostmod.probe()
    q.context.update({"engine": engine.name, "pin": engine.pin, "upstream": engine.upstream,
                      "host": hostmod.as_dict(host), "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "threads": plan.threads, "threads_source": plan.threads_source, "bench_plan": plan.as_dict(),
                      # a level forced for the whole run (HARNESS_CPU_LEVEL): `report merge` names it per host
                      "cpu_level_forced": os.environ.get(LEVEL_ENV) or None, "variant_pattern": variant})
    carried = Carried()

    def s_fetch() -> StageResult:
        tree = pipeline.fetch(engine, pm)
        return StageResult(f"{engine.pin} at {tree.path}", {"path": str(tree.path), "sha256": tree.digest})

    def s_patch() -> StageResult:
        outcomes = pipeline.check_patches(engine, pm)
        bad = [o for o in outcomes if o.status != "applies"]
        tree = pipeline.patched_tree(engine, pm)
        carried.tree = tree
        rows = [{"patch": o.patch.name, "status": o.status, "detail": o.detail} for o in outcomes]
        if bad:
            raise HarnessError("; ".join(f"{o.patch.name}: {o.status}" for o in bad))
        return StageResult(f"{len(outcomes)} patch(es) applied (series {tree.series_hash[:12]})", {"patches": rows, "series_hash": tree.series_hash})

    def s_abi() -> StageResult:
        r = check_engine(engine, carried.patched().path)
        carried.abi_fingerprint = r.fingerprint
        return StageResult(f"matches the committed surface ({r.functions} functions, {r.structs} structs, "
                f"{len(r.targets)} targets) in {r.seconds:.2f} s", {"fingerprint": r.fingerprint, "seconds": r.seconds})

    def s_build() -> StageResult:
        built: list[dict[str, Any]] = []
        skipped: list[dict[str, str]] = []
        if variant:  # the rows asked for (a CI entry's); those the engine does not build are skipped, saying why
            rows = []
            for v in select(load_matrix(), variant):
                why = engine_support(engine, v)
                if why:
                    skipped.append({"variant": v.name, "reason": why})
                else:
                    rows.append(v)
        else:  # the matrix's default rows this engine builds (its variants: list and intent map decide)
            rows = [v for v in load_matrix() if v.default and engine_support(engine, v) is None]
        for v in rows:
            b = buildability(pm, v, host)
            if not b.buildable:
                skipped.append({"variant": v.name, "reason": "; ".join(b.reasons)})
                continue
            r = build(pm, engine, v, carried.patched(), host, abi_fingerprint=carried.abi_fingerprint)
            built.append({"variant": v.name, "artifact": str(r.artifact), "built": r.built,
                          "seconds": round(r.seconds, 1), "build_seconds": r.manifest.get("build_seconds"),
                          "ccache": r.manifest.get("ccache"), "ccache_summary": ccache_summary(r.manifest)})
        if not built:
            raise HarnessError("no default variant is buildable here: " + "; ".join(s["reason"] for s in skipped))
        carried.variants = tuple(str(b["variant"]) for b in built)
        # Rows qualify runs where they can run (extra.qualify: runnable, e.g. vulkan on lavapipe): built,
        # given a backend and covered by the cross-variant check; the e2e suite stays on the default rows.
        for v in ([] if variant else load_matrix()):  # a CI entry's --variant names every row it wants
            if v.extra.get("qualify") != "runnable" or engine_support(engine, v) is not None or v.target:
                continue
            b = buildability(pm, v, host)
            if not (b.buildable and b.runnable):
                skipped.append({"variant": v.name, "reason": "; ".join(b.reasons) or "no device to run it on"})
                continue
            r = build(pm, engine, v, carried.patched(), host, abi_fingerprint=carried.abi_fingerprint)
            built.append({"variant": v.name, "artifact": str(r.artifact), "built": r.built,
                          "seconds": round(r.seconds, 1), "build_seconds": r.manifest.get("build_seconds"),
                          "ccache": r.manifest.get("ccache"), "ccache_summary": ccache_summary(r.manifest)})
            carried.runnable_extra += (v.name,)
        return StageResult(", ".join(f"{b['variant']} ({'built' if b['built'] else 'cached'}"
                                     + (f"; {b['ccache_summary']}" if b["built"] and b["ccache_summary"] else "") + ")"
                                     for b in built)
                + (f"; not buildable here: {', '.join(s['variant'] for s in skipped)}" if skipped else ""), {"built": built, "skipped": skipped})

    def s_backend() -> StageResult:
        from harness.backend import build_backend

        rows: list[dict[str, Any]] = []
        for v in (*carried.variants, *carried.runnable_extra):
            art = artifact_dir(engine, get_variant(v))
            r = build_backend(engine, art)
            rows.append({"variant": v, "wheel": str(r.wheel), "built": r.built, "seconds": round(r.seconds, 1)})
        return StageResult(", ".join(f"{r['variant']}: {Path(r['wheel']).name}" for r in rows), {"backends": rows})

    def s_levels() -> StageResult:
        if not engine.raw.get("qualify", {}).get("cross_variant"):
            raise SkippedStage(f"not configured for {engine.name} (qualify.cross_variant in its engine.yaml)")
        if "cpu" not in carried.variants:
            raise SkippedStage("the cpu variant (the one with CPU levels) was not built")
        from harness.runtime import discovery, levels

        fingerprint = discovery.committed_fingerprint(engine.name)
        lib = discovery.choose(engine.name, engine.pin, fingerprint, "cpu").location / "lib"
        v = levels.verdict(lib, refresh=True)  # a qualification always probes afresh
        if v.error:
            raise HarnessError(f"the CPU-level smoke probe could not run: {v.error}")
        if v.excluded:
            raise EngineCrashError("; ".join(f"cpu level {lvl}: {why}" for lvl, why in v.excluded.items())
                                   + f"; users fall back to {v.chosen}")
        return StageResult(f"{v.chosen} (ggml's choice here) passed the smoke probe in {v.seconds:.1f} s", v.as_dict())

    def s_models() -> StageResult:
        from harness.models.fixtures import engine_env, env_vars, fetch_all

        fetch_all(None)
        env = {**env_vars(), **engine_env()}
        carried.model_env = env
        return StageResult(f"{len(env)} model variables", {"env": env})

    def s_e2e() -> StageResult:
        specs = [str(p) for ps in pm.hook.harness_e2e_specs(engine=engine.name) for p in ps or []]
        if not specs:
            raise SkippedStage(f"no plugin lists e2e specs for {engine.name}")
        from harness.e2e import run_specs

        per: dict[str, Any] = {}
        failed = []
        for v in carried.variants:
            env = {**os.environ, **carried.model_env, "HARNESS_NO_PROGRESS": "1",
                   "HARNESS_ARTIFACT": str(artifact_dir(engine, get_variant(v)))}
            # One process per spec file: a crash names its signal, spec and CPU level, and
            # the other files' results are kept.
            res = run_specs([Path(p) for p in specs], pytest_args=["-q", "--variant", v], env=env,
                            cwd=paths.project_root())
            per[v] = {"passed": res.passed, "failures": len(res.failed), "errors": 0, "skipped": res.skipped,
                      "failed_tests": res.failed, "crashes": res.crashes, "files": res.as_dict()["files"]}
            if not res.ok:
                failed.append(v)
        if failed:
            raise HarnessError("e2e failures on " + ", ".join(
                f"{v} ({per[v]['failures']} failed: {'; '.join(per[v]['failed_tests'])}"
                + (f"; crashed: {'; '.join(per[v]['crashes'])}" if per[v]["crashes"] else "") + ")" for v in failed))
        return StageResult("; ".join(f"{v}: {c.get('passed')} passed, {c.get('skipped')} skipped" for v, c in per.items()), {"variants": per})

    def s_audit() -> StageResult:
        if "cpu" not in carried.variants:
            raise SkippedStage("the cpu variant (the one with CPU levels) was not built")
        from harness.audit.cli import audit_engine, findings_lines

        r = audit_engine(engine.name, "cpu")
        bad = findings_lines(r["levels"])
        if bad:
            raise AuditError("; ".join(bad))
        return StageResult(f"{len(r['levels'])} CPU levels clean ({r['arch']}, {r['seconds']:.1f} s)", r)

    def s_cross() -> StageResult:
        if not engine.raw.get("qualify", {}).get("cross_variant"):
            raise SkippedStage(f"not configured for {engine.name} (qualify.cross_variant in its engine.yaml)")
        from harness import registry

        impl = registry.get(engine.name)
        if impl.cross_variant is None:
            raise SkippedStage(f"engine {engine.name} provides no cross-variant check")
        r = impl.cross_variant(Path(carried.model_env["HARNESS_CHAT_MODEL"]), threads=plan.threads)
        if not r["passed"]:
            bad = [f"{x['label']}: {x['error']}" if x["status"] in ("crashed", "failed")
                   else f"{x['label']}: garbage output (no '{r['expect']}')" for x in r["runs"] if not x["ok"]]
            raise HarnessError("; ".join(bad))
        ran = [x for x in r["runs"] if x["status"] == "ran"]
        not_run = [x["cpu_level"] for x in r["runs"] if x["status"] == "not-run"]
        div = [x["label"] for x in ran if x["diverges_at"] is not None]
        return StageResult(f"{len(ran)} runs answered '{r['expect']}'" + (f"; token sequences diverge on {', '.join(div)}" if div
                                                                 else "; identical token sequences")
                + (f"; audited (static), not run here: {', '.join(not_run)}" if not_run else ""), r)

    def s_emulated(row: str) -> StageResult:
        from harness.emulate import emulate

        impl = registry.get(engine.name)
        models: dict[str, Path] = {}
        expect: dict[str, str] = {}
        if impl.probe_model is not None:
            models["tiny"] = impl.probe_model()
        chat = carried.model_env.get("HARNESS_CHAT_MODEL")
        if chat:
            models["SmolLM2"], expect["SmolLM2"] = Path(chat), "Paris"
        # Four greedy tokens (the answer is the first) and no llama-bench: under emulation SmolLM2
        # decodes at 0.1-1 tok/s, so the full table (`harness emulate --bench`, nox -s cross-aarch64)
        # would add some 20 minutes to every qualification.
        r = emulate(engine.name, row, models=models, expect=expect, bench_model=None, threads=plan.threads,
                    n_tokens=4)
        if not r["passed"]:
            raise HarnessError("; ".join(r["failures"]))
        iso = [x["level"] for x in r["levels"] if x["isolated"]]
        return StageResult(f"{len(r['levels'])} {r['triple']} levels ran under qemu {r['qemu']} "
                           f"({len(iso)} isolated by a CPU model; not isolated: {', '.join(r['not_isolated']) or 'none'});"
                           f" build {r['build']['seconds']} s, runs {r['seconds']} s", r)

    def s_bench(model_var: str) -> StageResult:
        if not run_bench:
            raise SkippedStage("disabled (--no-bench)")
        peer = engine.raw.get("qualify", {}).get("bench_peer")
        if not peer:
            raise SkippedStage(f"no peer baseline for {engine.name} (qualify.bench_peer in its engine.yaml)")
        if "cpu" not in carried.variants:
            raise SkippedStage("the cpu variant (our bench arm) was not built in this run")
        model = carried.model_env.get(model_var)
        if not model:
            raise SkippedStage(f"no {model_var} model (`harness models fetch` writes the fixtures)")
        from harness.bench.roofline import measure_host

        return peer_bench(engine, peer, model, plan, out=report / "bench", report_root=report,
                          host=hostmod.as_dict(host), host_measure=measure_host())

    def s_ceiling(model_var: str) -> StageResult:
        if not run_bench:
            raise SkippedStage("disabled (--no-bench)")
        if "cpu" not in carried.variants:
            raise SkippedStage("the cpu variant (the binding's and the tool's artifact) was not built in this run")
        model = carried.model_env.get(model_var)
        if not model:
            raise SkippedStage(f"no {model_var} model (`harness models fetch` writes the fixtures)")
        from harness.bench.roofline import measure_host

        return ceiling_bench(engine, artifact_dir(engine, get_variant("cpu")), model, plan,
                             out=report / "ceiling", report_root=report, host=hostmod.as_dict(host),
                             host_measure=measure_host())

    def s_old_abi() -> StageResult:
        if not (old_pin or old_rev):
            raise SkippedStage("no old pin given (--old-pin VERSION or --old-rev GITREV)")
        from harness import recipes

        return old_pin_abi_diff(engine, recipes.resolve(engine.name, pin=old_pin, rev=old_rev), carried.patched().path)

    def s_old_bench() -> StageResult:
        if not (old_pin or old_rev):
            raise SkippedStage("no old pin given (--old-pin VERSION or --old-rev GITREV)")
        if not run_bench:
            raise SkippedStage("disabled (--no-bench)")
        if "cpu" not in carried.variants:
            raise SkippedStage("the cpu variant was not built")
        opts: dict[str, str] = {"pin": old_pin} if old_pin else {"rev": str(old_rev)}
        from harness.bench.roofline import measure_host

        # the last bench model: the bandwidth-bound one where the descriptor lists it, where kernels show
        model = next((carried.model_env[v] for v in reversed(plan.models) if v in carried.model_env), None)
        if model is None:
            raise SkippedStage(f"none of the bench models ({', '.join(plan.models)}) is in place")
        return old_pin_bench(engine, opts, artifact_dir(engine, get_variant("cpu")), model,
                             report / "bench-old-pin", host=hostmod.as_dict(host), plan=plan,
                             host_measure=measure_host())

    q.run("fetch", s_fetch)
    q.run("patch", s_patch, needs=("fetch",))
    q.run("abi-check", s_abi, needs=("patch",))
    q.run("build", s_build, needs=("abi-check",))
    q.run("backend", s_backend, needs=("build",))
    q.run("models", s_models)
    q.run("cpu-levels", s_levels, needs=("backend",))
    q.run("isa-audit", s_audit, needs=("build",))
    q.run("e2e", s_e2e, needs=("backend", "models"))
    q.run("cross-variant", s_cross, needs=("backend", "models"))
    from harness.emulate import cross_rows

    rows_here, rows_not = cross_rows(engine.name, list(arch) if arch is not None else None)
    if variant and arch is None:  # a CI entry's rows: the cross rows its pattern names, not every one
        wanted = {v.name for v in select(load_matrix(), variant)}
        rows_here = [r for r in rows_here if r.name in wanted]
    for row in rows_here:
        q.run(f"emulated-{row.name}", functools.partial(s_emulated, row.name), needs=("abi-check", "models"))
    if arch:  # asked for by name: a row that cannot run here is a failure, with the reason
        for s in rows_not:
            q.run(f"emulated-{s['variant']}", functools.partial(_cannot, s["reason"]))
    for var in plan.models:
        # the binding against the engine's own benchmark tool first: a binding below its engine's
        # ceiling makes every comparison with a peer a statement about the binding, not the engine
        q.run(stage_name(var).replace("bench", "ceiling", 1), functools.partial(s_ceiling, var),
              needs=("backend", "models"))
        q.run(stage_name(var), functools.partial(s_bench, var), needs=("backend", "models"))
    q.run("old-pin-abi", s_old_abi, needs=("patch",))
    q.run("old-pin-bench", s_old_bench, needs=("build", "models"))
    return q, write_qualification(q, report)


def _cannot(reason: str) -> StageResult:
    raise HostError(reason)


def old_pin_abi_diff(engine: EngineSpec, old: EngineSpec, new_tree: Path) -> StageResult:
    """The full API/ABI diff old pin -> this pin, and how much of it the backend's used set sees."""
    from harness import pipeline
    from harness.abi import surface as surf
    from harness.abi.check import load_committed
    from harness.abi.cli import snapshot_pin
    from harness.abi.diff import diff, render_markdown

    t0 = time.perf_counter()
    a = snapshot_pin(str(pipeline.fetch(old).path), engine, None)
    b = snapshot_pin(str(new_tree), engine, None)
    changes = diff(a, b)
    used = set(load_committed(engine.name, engine.surface_path).get("used") or [])
    used_changes = diff(surf.filter_surface(a, used), surf.filter_surface(b, used)) if used else []
    seconds = time.perf_counter() - t0
    footer = (f"_{len(changes)} differences ({len(used_changes)} in what the backend uses) on "
              f"{', '.join(b['targets'])}; `harness abi diff {old.pin} {engine.pin}`, {seconds:.1f} s._")
    md = render_markdown(changes, old=f"{engine.name} {old.pin}", new=f"{engine.name} {engine.pin}", footer=footer)
    return StageResult(f"{old.pin} -> {engine.pin}: {len(changes)} differences, {len(used_changes)} in the backend's used set", {
        "old_pin": old.pin, "old_recipe_commit": old.recipe_commit or None, "differences": len(changes),
        "used_differences": len(used_changes), "markdown": md, "seconds": round(seconds, 2)})


def write_qualification(q: Qualification, d: Path) -> Path:
    """qualify.json + qualify.md into ``d`` (the bench report, if any, is already in d/bench/)."""
    d.mkdir(parents=True, exist_ok=True)
    doc = {**q.context, "passed": q.passed, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "stages": [{"name": s.name, "status": s.status, "seconds": s.seconds, "summary": s.summary, "data": s.data}
                      for s in q.stages]}
    (d / "qualify.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (d / "qualify.md").write_text(render_markdown(doc))
    return d


BENCH_TITLES = {"bench": "Benchmark on {model}: our cpu build (B) vs the peer baseline (A)",
                "old-pin-bench": "Benchmark: this pin (B) vs the old pin (A), each artifact's own benchmark tool"}


def render_markdown(doc: dict[str, Any]) -> str:
    h = doc["host"]
    lines = [
        f"# Qualification: {doc['engine']} {doc['pin']} ({'PASSED' if doc['passed'] else 'FAILED'})",
        "",
        f"upstream build {doc['upstream'].get('build')} ({doc['upstream'].get('commit')}); "
        f"host {h['os']} {h['arch']}, {h['cpu_model']} [{h['microarch']}], {h['cores']} cores, "
        f"{h['memory_bytes'] / 2**30:.1f} GiB; started {doc['started_at']}"
        + (f"; threads {doc['threads']} ({doc.get('threads_source') or 'given'})" if doc.get("threads") else ""),
        "",
        "| stage | status | seconds | summary |",
        "|---|---|---:|---|",
    ]
    for s in doc["stages"]:
        summary = (s["summary"].splitlines() or [""])[0].replace("|", "\\|")
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | {summary} |")
    for s in doc["stages"]:
        if s["name"] == "e2e" and s["data"].get("variants"):
            lines += ["", "## e2e specs per variant", "", "| variant | passed | failed | errors | skipped |", "|---|---:|---:|---:|---:|"]
            for v, c in s["data"]["variants"].items():
                lines.append(f"| {v} | {c.get('passed')} | {c.get('failures')} | {c.get('errors')} | {c.get('skipped')} |")
        if s["name"] == "e2e":
            crashes = [c for v in s["data"].get("variants", {}).values() for c in v.get("crashes") or []]
            if crashes:
                lines += ["", "Crashed spec processes (the other files' results are kept):", "",
                          *[f"- {c}" for c in crashes]]
        if s["name"] == "isa-audit" and s["data"].get("levels"):
            lines += ["", f"## Static ISA audit of every CPU level ({s['data']['arch']}, {s['data']['seconds']} s)", "",
                      "Instructions decoded with iced-x86 vs the features ggml's loader checks before it picks the level "
                      "(read from the pinned source). Levels this host cannot run are covered here.", "",
                      "| level | result | checked by the loader | instructions | findings / notes |", "|---|---|---|---:|---|"]
            from harness.audit.cli import findings_lines

            for a in s["data"]["levels"]:
                notes = findings_lines([a]) + [f"AMX tile config ({t['storage']}): {t['detail']}"
                                               for t in a["tile_configs"] if t["ok"]] + a["notes"]
                lines.append(f"| {a['level']} | {'clean' if a['clean'] else 'FINDINGS'} | "
                             f"{' '.join(a['checked']) or 'baseline x86-64'} | {a['instructions']:,} | "
                             f"{'; '.join(notes).replace('|', '/')} |")
        if s["name"] == "cross-variant" and s["data"].get("runs"):
            lines += ["", f"## Cross-variant greedy check: {s['data']['prompt']!r}", "",
                      "| run | CPU level | status | answer ok | diverges at token | note |", "|---|---|---|---|---:|---|"]
            for r in s["data"]["runs"]:
                div = "" if r["diverges_at"] is None else str(r["diverges_at"])
                status = {"not-run": "audited (static), not run here"}.get(r.get("status", "ran"), r.get("status", "ran"))
                lines.append(f"| {r['label']} | {r['cpu_level'] or ''} | {status} | {'yes' if r['ok'] else 'NO'} | "
                             f"{div} | {r['error']} |")
        if s["name"].startswith("emulated-") and s["data"].get("levels"):
            from harness.emulate import table_lines

            d = s["data"]
            lines += ["", f"## {d['build']['variant']}: every CPU level under qemu-user ({d['triple']}, qemu {d['qemu']})",
                      "", f"Prompt {d['prompt']!r}, greedy, {d['n_tokens']} tokens, {d['threads']} threads; each level "
                      "forced (only its library in the plugin dir) under the QEMU CPU model that has its features; "
                      "tokens/s are under emulation (informational). ABI: "
                      f"{d['abi']['used_functions']} used functions exported by the {d['abi']['machine']} libraries, "
                      f"{len(d['abi']['headers'])} shipped headers identical to the checked ones.", "",
                      *table_lines(d)]
        if s["name"].startswith("ceiling") and s["data"].get("markdown"):
            d = s["data"]
            title = (f"Engine ceiling on {d.get('model', '?')}: the binding (B) vs the engine's own benchmark tool (A), "
                     f"same artifact, cpu level {d.get('cpu_level') or '?'}, floor {d.get('min_ratio', 0):.2f}x")
            lines += bench_section(title, d)
            if d.get("commands"):
                lines += ["", "Commands (arm A, each run in a fresh process per measurement):", "",
                          *[f"    {c}" for c in d["commands"]]]
        if (s["name"] in BENCH_TITLES or s["name"].startswith("bench")) and s["data"].get("markdown"):
            title = BENCH_TITLES.get(s["name"], BENCH_TITLES["bench"]).format(model=s["data"].get("model", "?"))
            lines += bench_section(title, s["data"])
        if s["name"] == "old-pin-abi" and s["data"].get("markdown"):
            lines += ["", *s["data"]["markdown"].splitlines()]
    return "\n".join(lines) + "\n"
