"""Where a model goes before it loads: llama.cpp's own estimate of a load (weights, KV cache and
compute buffers per device and the host, from a metadata-only dry run), the devices each installed
variant can use, and layers fitted to a device's memory (``n_gpu_layers: auto``, llama.cpp's
``-ngl auto``). The figures are upstream's (``common/fit.h``, called by the binding's
``engine_memory.cpp``); the verdict (a device's need against its free memory, or a budget, less a
margin; the host's against the memory available) is the binding's, and :meth:`Engine.load` refuses
with it (:class:`harness.core.errors.InsufficientMemoryError`) before a weight is read.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core import errors
from harness.core.pyexec import python_argv
from harness.runtime import discovery, levels
from harness_plugins.llamacpp.engine import (
    ENGINE,
    _admit_cpu_type_devices,
    _committed_fingerprint,
    _model_error,
    handshake,
    prepare,
)

if TYPE_CHECKING:
    from harness.config.effective import Effective

#: Seconds one variant's device listing may take (it loads the variant's ggml backends).
DEVICES_TIMEOUT_S = 120.0


def estimate(model: str | Path, *, variant: str | None = None, effective: Effective | None = None,
             **engine_args: Any) -> dict[str, Any]:
    """The engine's estimate of loading ``model`` with these settings (no weight is read): ``rows``
    (per device the model uses, then ``host``: ``weights``, ``repacked`` (the CPU's repacked copy),
    ``kv_cache``, ``compute``, ``outputs`` (the context's output buffer), ``vocabulary`` (its heap), ``free``,
    ``total``, ``budget``, ``margin``, ``available`` and ``fits``), ``n_ctx``, ``n_layer``,
    ``n_gpu_layers`` (fitted when asked as auto), ``fit``, ``fits`` and ``verdict``; plus ``variant``,
    ``model`` and ``need`` (bytes per row)."""
    for key in ("stream_stall_timeout", "long_text_mode", "matryoshka"):
        engine_args.pop(key, None)
    path, cand, module, params = prepare(model, variant, effective, engine_args)
    if not hasattr(module, "estimate_memory"):
        raise errors.BindingError(f"the {cand.variant} binding of pin {module.PIN} has no memory estimate: it was "
                                  f"built before it had one; run harness build-binding {ENGINE} --variant "
                                  f"{cand.variant}")
    try:
        plan: dict[str, Any] = dict(module.estimate_memory(str(path), params))
    except Exception as e:
        raise _model_error(e, path) from e
    for row in plan["rows"]:
        row["need"] = sum(int(row.get(k, 0)) for k in ("weights", "repacked", "kv_cache", "compute", "outputs", "vocabulary"))
    plan.update(variant=cand.variant, model=str(path), device=params.get("device", ""),
                gpu_layers="auto" if params.get("gpu_layers_auto") else params.get("n_gpu_layers"))
    return plan


def variant_devices(variant: str) -> list[dict[str, Any]]:
    """The ggml devices of one installed variant, in this process (one variant's libraries per process)."""
    from harness.engine.descriptor import load_engine

    cand = discovery.choose(ENGINE, load_engine(ENGINE).pin, _committed_fingerprint(), variant)
    _admit_cpu_type_devices(cand)
    module = discovery.import_core(cand)
    handshake(module, cand)
    if not hasattr(module, "devices"):
        raise errors.BindingError(f"the {variant} binding of pin {module.PIN} cannot list its devices: it was built "
                                  f"before it could; run harness build-binding {ENGINE} --variant {variant}")
    return list(module.devices(str(levels.backend_dir(cand.location / "lib"))))


def devices() -> list[dict[str, Any]]:
    """Every installed, accepted variant and the devices it can use: one subprocess per variant (two
    variants' ggml libraries cannot share a process). A variant whose listing fails says why."""
    from harness.engine.descriptor import load_engine

    out: list[dict[str, Any]] = []
    for cand in discovery.discover(ENGINE, load_engine(ENGINE).pin, _committed_fingerprint()):
        entry: dict[str, Any] = {"engine": ENGINE, "variant": cand.variant, "accepted": cand.accepted,
                                 "forced_only": cand.forced_only, "devices": []}
        if not cand.accepted:
            entry["error"] = cand.reason
            out.append(entry)
            continue
        code = ("import json, sys\nfrom harness_plugins.llamacpp.placement import variant_devices\n"
                "print(json.dumps(variant_devices(sys.argv[1])))")
        try:
            r = subprocess.run(python_argv("-c", code, cand.variant), capture_output=True, text=True,
                               timeout=DEVICES_TIMEOUT_S, env={**os.environ, "HARNESS_NO_PROGRESS": "1"},
                               check=False)
        except subprocess.TimeoutExpired:
            entry["error"] = f"listing its devices took over {DEVICES_TIMEOUT_S:g} s"
            out.append(entry)
            continue
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            entry["error"] = f"listing its devices failed (exit {r.returncode}): {tail}"
        else:
            try:
                entry["devices"] = json.loads(r.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                entry["error"] = f"listing its devices printed no JSON: {r.stdout[-200:]!r}"
        out.append(entry)
    return out
