"""Cross-built rows, qualified on the build host under emulation: build, ABI exports, the level table.

A matrix row with ``target:`` (``cpu-aarch64``) is built here with a cross toolchain. Its
artifact cannot run natively, so the engine's plugin runs each of its CPU levels under an
emulated CPU model that has that level's features (``EngineImpl.emulated_levels``). This module
is the engine-neutral driver that ``harness emulate`` and ``harness qualify`` share.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError, HostError, UsageError
from harness.core.types import EngineSpec, Variant


def cross_rows(engine: EngineSpec, arches: list[str] | None = None) -> tuple[list[Variant], list[dict[str, str]]]:
    """(the cross-built rows of the matrix this engine builds and this host can build, the others with why).

    ``arches`` (``["aarch64"]``) narrows to rows targeting those architectures.
    """
    from harness.build.matrix import buildability
    from harness.build.pipeline import rows_for
    from harness.core.host import probe
    from harness.engine.plugin import get_manager

    def wanted(v: Variant) -> bool:
        return bool(v.target) and (arches is None or v.target.split("-", 1)[0] in arches)

    pm, host = get_manager(), probe()
    ok: list[Variant] = []
    skipped: list[dict[str, str]] = []
    for v in rows_for(engine, where=wanted).rows:
        b = buildability(pm, v, host, engine)
        if b.buildable and b.runnable:
            ok.append(v)
        else:
            skipped.append({"variant": v.name, "reason": "; ".join(b.reasons) or "; ".join(b.notes)})
    return ok, skipped


def emulate(engine: EngineSpec, row: Variant, *, models: dict[str, Path], expect: dict[str, str] | None = None,
            bench_model: str | None = None, threads: int | None = None, levels: list[str] | None = None,
            n_tokens: int = 12) -> dict[str, Any]:
    """Build the cross row ``row`` (a no-op when stamped), check its exports and headers against the
    committed ABI surface, then run the engine's emulated level table."""
    from harness.abi.check import load_committed
    from harness.abi.exports import check_artifact
    from harness.build import pipeline
    from harness.build.matrix import buildability
    from harness.core.host import default_threads, probe
    from harness.engine import registry
    from harness.engine.plugin import get_manager

    if not row.target:
        msg = f"variant {row.name} is built for this host, not cross-built (no target: in the matrix): nothing to emulate"
        raise UsageError(msg)
    impl = registry.get(engine.name)
    if impl.emulated_levels is None:
        msg = f"engine {engine.name} provides no emulated level check (EngineImpl.emulated_levels)"
        raise UsageError(msg)
    pm, host = get_manager(), probe()
    b = buildability(pm, row, host, engine)
    if not b.buildable or not b.runnable:
        msg = f"variant {row.name} cannot be built and run here: " + "; ".join(b.reasons or b.notes)
        raise HostError(msg)
    t0 = time.perf_counter()
    inputs = pipeline.prepare_build(engine, pm, host)
    tree, abi = inputs.tree, inputs.abi
    built = pipeline.build_row(inputs, row)
    exports = check_artifact(built.artifact, dict(load_committed(engine.name, engine.surface_path)), tree=tree.path,
                             header_dirs=[str(d) for d in engine.abi.get("include_dirs", ["include"])])
    build_info = {"variant": row.name, "target": row.target, "artifact": str(built.artifact), "built": built.built,
                  "seconds": round(built.seconds, 1), "build_seconds": built.manifest.get("build_seconds"),
                  "abi_targets": list(abi.targets)}
    if not exports.ok:
        bad = [f"not exported: {', '.join(exports.missing)}"] if exports.missing else []
        bad += [f"header {h} {s}" for h, s in exports.headers.items() if s != "same"]
        msg = f"{row.name} artifact vs the committed ABI surface: " + "; ".join(bad)
        raise HarnessError(msg)
    table = impl.emulated_levels(built.artifact, tree=tree.path, models=models, expect=expect or {},
                                 bench_model=bench_model, threads=threads or default_threads(), only=levels,
                                 n_tokens=n_tokens)
    return {"build": build_info, "abi": {**exports.as_dict(), "surface_targets": list(abi.targets)},
            **table, "seconds_total": round(time.perf_counter() - t0, 1)}


def table_lines(r: dict[str, Any]) -> list[str]:
    """The per-level Markdown table: level, QEMU model, isolated, per model answer ok / diverges at / tok/s."""
    labels = list(r.get("models", {}))
    head = ["level", "QEMU CPU model", "isolated"]
    for label in labels:
        head += [f"{label}: answer ok", f"{label}: diverges at token", f"{label}: tok/s (emulated)"]
    if r.get("bench_shape"):
        head += [f"bench pp{r['bench_shape']['pp']} / tg{r['bench_shape']['tg']} tok/s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in r.get("levels", []):
        cells = [row["level"], f"`{row['qemu_model']}`" if row["qemu_model"] else "none",
                 "yes" if row["isolated"] else "no"]
        for label in labels:
            run = row["runs"].get(label, {})
            if run.get("status") == "ran":
                ok = "yes" if run.get("ok") else "NO"
            else:
                ok = f"{str(run.get('status', '?')).upper()}: {run.get('error', '')}".replace("|", "/")
            div = "" if run.get("diverges_at") is None else str(run["diverges_at"])
            if run.get("reference"):
                div = "(reference)"
            cells += [ok, div, "" if run.get("eval_tok_s") is None else f"{run['eval_tok_s']:.2f}"]
        if r.get("bench_shape"):
            bench = row.get("bench") or {}
            pp, tg = f"pp{r['bench_shape']['pp']}", f"tg{r['bench_shape']['tg']}"
            cells.append(f"{bench.get(pp)} / {bench.get(tg)}" if bench.get("status") == "ran"
                         else f"{str(bench.get('status', 'not run')).upper()}: {bench.get('error', '')}")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    notes = [f"- {row['level']}: {row['isolation_note']}" for row in r.get("levels", []) if row.get("isolation_note")]
    if notes:
        lines += ["", "Levels no QEMU CPU model isolates (run forced under the closest model):", "", *notes]
    return lines
