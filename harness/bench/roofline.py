"""This host's rooflines: memory bandwidth and GEMM FLOP/s, measured with numpy and cached.

Decode reads every weight once per generated token, so its ceiling is
``bandwidth / model bytes`` tokens/s; prefill is a GEMM, so its ceiling is
``FLOP/s / (2 * n_params)`` tokens/s. Reports state measured speeds as a
percentage of these: a decode at 90% of the bandwidth roofline has nothing
left to win from kernels, one at 30% does.

The figures are what numpy reaches (copy and triad over all cores, a float32
matmul on its BLAS), not the vendor's datasheet: an engine can beat them a
little, which is why percentages above 100 are reported as they are.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from harness.core import paths

CACHE_FILE = "host-measure.json"
SCHEMA = 1


def _best(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_bandwidth(*, size_mib: int = 256, repeats: int = 5, threads: int | None = None) -> dict[str, Any]:
    """Best-of-``repeats`` copy and triad bandwidth in GB/s (10^9 bytes/s), over ``threads`` slices.

    Arrays are ``size_mib`` MiB each, far beyond any last-level cache at the default. numpy
    releases the GIL in these loops, so the threads run in parallel like a multi-threaded decode.
    """
    threads = max(1, threads or min(os.cpu_count() or 1, 32))
    n = max(threads * 1024, size_mib * 2**20 // 8)
    a = np.zeros(n)
    b = np.full(n, 1.0)
    c = np.full(n, 2.0)
    bounds = [(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
    scalar = 3.0

    def copy(lo: int, hi: int) -> None:
        np.copyto(a[lo:hi], b[lo:hi])

    def triad(lo: int, hi: int) -> None:
        # two passes over a (numpy has no fused triad): c read, a written, then a and b read, a written
        np.multiply(c[lo:hi], scalar, out=a[lo:hi])
        np.add(a[lo:hi], b[lo:hi], out=a[lo:hi])

    with ThreadPoolExecutor(max_workers=threads) as ex:
        def run(kernel: Callable[[int, int], None]) -> Callable[[], None]:
            def go() -> None:
                for _ in ex.map(lambda lh: kernel(*lh), bounds):
                    pass
            return go

        run(copy)()  # fault the pages in before timing
        t_copy = _best(run(copy), repeats)
        t_triad = _best(run(triad), repeats)
    copy_gbs = 2 * a.nbytes / t_copy / 1e9
    triad_gbs = 5 * a.nbytes / t_triad / 1e9
    return {"copy_gbs": round(copy_gbs, 2), "triad_gbs": round(triad_gbs, 2),
            "bandwidth_gbs": round(max(copy_gbs, triad_gbs), 2), "array_mib": a.nbytes / 2**20,
            "threads": threads, "repeats": repeats}


def measure_gemm(*, n: int | None = None, repeats: int = 3, min_seconds: float = 0.1,
                 max_n: int = 4096) -> dict[str, Any]:
    """Best-of-``repeats`` float32 matmul in GFLOP/s (``2 n^3`` per product).

    Without ``n`` the size doubles from 1024 until one product takes ``min_seconds``,
    so a fast host is not measured on a problem that fits in its caches.
    """
    rng = np.random.default_rng(0)
    size = n or 1024
    while True:
        x = rng.standard_normal((size, size), dtype=np.float32)
        y = rng.standard_normal((size, size), dtype=np.float32)
        product = functools.partial(np.matmul, x, y, out=np.empty_like(x))
        product()  # BLAS thread start-up and page faults
        t = _best(product, 1)
        if n is not None or t >= min_seconds or size >= max_n:
            break
        size *= 2
    t = min(t, _best(product, repeats))
    return {"gemm_gflops": round(2 * size**3 / t / 1e9, 2), "n": size, "dtype": "float32",
            "repeats": repeats}


def host_id() -> str:
    """What the cache is keyed by: the node name, machine and core count."""
    return f"{platform.node()}|{platform.machine()}|{os.cpu_count() or 1}"


def _cache_path() -> Path:
    return paths.cache_root() / CACHE_FILE


def _blas() -> str:
    try:
        cfg: Any = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # numpy < 1.25 or an unusual build
        return "unknown"


def measure_host(force: bool = False, *, size_mib: int = 256, repeats: int = 5) -> dict[str, Any]:
    """Bandwidth and GEMM figures of this host, from the cache unless ``force``.

    Cached per host in ``<cache>/host-measure.json`` with the time of the measurement;
    the returned record has ``cached: true`` when it came from there.
    """
    path = _cache_path()
    key = host_id()
    data: dict[str, Any] = {"schema": SCHEMA, "hosts": {}}
    try:
        loaded = json.loads(path.read_text())
        if isinstance(loaded, dict) and loaded.get("schema") == SCHEMA:
            data = loaded
    except (OSError, ValueError):
        pass
    if not force and key in data["hosts"]:
        return {**data["hosts"][key], "cached": True}
    started = time.perf_counter()
    bw = measure_bandwidth(size_mib=size_mib, repeats=repeats)
    gemm = measure_gemm()
    record: dict[str, Any] = {
        "host_id": key,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "timestamp": time.time(),
        "bandwidth_gbs": bw["bandwidth_gbs"],
        "gemm_gflops": gemm["gemm_gflops"],
        "bandwidth": bw,
        "gemm": gemm,
        "numpy": np.__version__,
        "blas": _blas(),
        "seconds": round(time.perf_counter() - started, 2),
    }
    data["hosts"][key] = record
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return {**record, "cached": False}


def measure_rows(record: dict[str, Any]) -> list[tuple[str, str]]:
    """``(what, value)`` rows for ``harness host --measure``'s table."""
    bw, gemm = record.get("bandwidth", {}), record.get("gemm", {})
    when = record.get("measured_at", "?") + (" (cached; --force to re-measure)" if record.get("cached") else "")
    return [
        ("memory bandwidth", f"{record['bandwidth_gbs']:.1f} GB/s (copy {bw.get('copy_gbs', '?')}, "
                             f"triad {bw.get('triad_gbs', '?')}, {bw.get('threads', '?')} threads)"),
        ("gemm float32", f"{record['gemm_gflops']:.1f} GFLOP/s (n={gemm.get('n', '?')}, {record.get('blas', '?')})"),
        ("measured", when),
    ]


# ---------------------------------------------------------------------------
# rooflines
# ---------------------------------------------------------------------------


def decode_roofline_tps(model_bytes: float, bandwidth_gbs: float) -> float:
    """Tokens/s if every weight byte is read once per token at the measured bandwidth."""
    return bandwidth_gbs * 1e9 / model_bytes


def prefill_roofline_tps(n_params: float, gemm_gflops: float) -> float:
    """Prompt tokens/s at the measured GEMM rate, 2 FLOPs per parameter per token."""
    return gemm_gflops * 1e9 / (2.0 * n_params)


def decode_pct(decode_tps: float, model_bytes: float, bandwidth_gbs: float) -> float:
    return 100.0 * decode_tps / decode_roofline_tps(model_bytes, bandwidth_gbs)


def prefill_pct(prefill_tps: float, n_params: float, gemm_gflops: float) -> float:
    return 100.0 * prefill_tps / prefill_roofline_tps(n_params, gemm_gflops)


def roofline_pcts(describe: dict[str, Any], measure: dict[str, Any] | None, *, decode_tps: float,
                  prefill_tps: float) -> dict[str, float]:
    """``{"decode_pct": .., "prefill_pct": ..}`` for what the arm's model and the host measure allow."""
    if not measure:
        return {}
    model = describe.get("model") or {}
    out: dict[str, float] = {}
    model_bytes, n_params = model.get("bytes"), model.get("n_params")
    if model_bytes and measure.get("bandwidth_gbs"):
        out["decode_pct"] = decode_pct(decode_tps, float(model_bytes), float(measure["bandwidth_gbs"]))
    if n_params and measure.get("gemm_gflops"):
        out["prefill_pct"] = prefill_pct(prefill_tps, float(n_params), float(measure["gemm_gflops"]))
    return out
