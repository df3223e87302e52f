"""Hardware counters: the third instrument, where the host exposes them.

Instructions retired and core cycles of one request, read from the kernel's ``perf_event_open``
(user space only, children counted through ``inherit``), for the same commands and run lengths as
the simulation instrument (:mod:`harness.bench.simulation`): per token is a difference of two run
lengths. Instructions are near-deterministic; cycles are real cycles, so they see what simulation
cannot (the real caches, the real memory) but not time stolen by other tenants.

Most cloud VMs do not expose a PMU to guests (this project's 2-core VMs among them): :func:`probe`
says so with the kernel's answer, and the instrument is reported as not available, not faked.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import errno
import os
import platform
import struct
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core import progress
from harness.core.errors import BenchError, HostError

PERF_TYPE_HARDWARE = 0
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
#: attr.flags bits: disabled, inherit, exclude_kernel, exclude_hv
_DISABLED, _INHERIT, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 1, 1 << 5, 1 << 6
_IOC_ENABLE, _IOC_DISABLE, _IOC_RESET = 0x2400, 0x2401, 0x2403
#: perf_event_open's syscall number per machine
_SYSCALL = {"x86_64": 298, "amd64": 298, "aarch64": 241, "arm64": 241}
_ATTR_SIZE = 64  # PERF_ATTR_SIZE_VER0


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _open(config: int) -> int:
    """A disabled user-space counter of this process and the children it starts; raises OSError."""
    nr = _SYSCALL.get(platform.machine().lower())
    if nr is None:
        raise OSError(errno.ENOSYS, f"perf_event_open's syscall number on {platform.machine()} is not known here")
    # struct perf_event_attr (VER0): type, size, config, sample_period, sample_type, read_format, flags,
    # wakeup_events, bp_type, config1
    attr = struct.pack("IIQQQQQIIQ", PERF_TYPE_HARDWARE, _ATTR_SIZE, config, 0, 0, 0,
                       _DISABLED | _INHERIT | _EXCLUDE_KERNEL | _EXCLUDE_HV, 0, 0, 0)
    buf = ctypes.create_string_buffer(attr, _ATTR_SIZE)
    libc = _libc()
    fd = libc.syscall(ctypes.c_long(nr), buf, ctypes.c_int(0), ctypes.c_int(-1), ctypes.c_int(-1), ctypes.c_ulong(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


def probe() -> Availability:
    """Whether this host lets a process count its own instructions and cycles."""
    if platform.system() != "Linux":
        return Availability(False, f"hardware counters are read through Linux's perf_event_open; this is {platform.system()}")
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
    level = paranoid.read_text().strip() if paranoid.is_file() else "?"
    fds: list[int] = []
    try:
        for config in (PERF_COUNT_HW_INSTRUCTIONS, PERF_COUNT_HW_CPU_CYCLES):
            fds.append(_open(config))
    except OSError as e:
        name = errno.errorcode.get(e.errno or 0, str(e.errno))
        why = {"ENOENT": "the kernel has no hardware PMU for this machine (a VM that does not expose one)",
               "EOPNOTSUPP": "the PMU does not support these events here",
               "EACCES": f"not permitted (kernel.perf_event_paranoid={level}; 2 or lower lets a user count itself)",
               "EPERM": f"not permitted (kernel.perf_event_paranoid={level}; 2 or lower lets a user count itself)"}
        return Availability(False, f"perf_event_open: {name}: {why.get(name, e.strerror)}")
    finally:
        for fd in fds:
            os.close(fd)
    return Availability(True, f"perf_event_open: instructions and cycles (kernel.perf_event_paranoid={level})")


@dataclass(frozen=True, kw_only=True)
class CounterRun:
    role: str
    pn: int
    gn: int
    instructions: int
    cycles: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def count(argv: Sequence[str], env: dict[str, str], *, timeout: float = 3600.0) -> tuple[int, int, float]:
    """(instructions, cycles, seconds) of ``argv``, user space, children included."""
    fds = [_open(PERF_COUNT_HW_INSTRUCTIONS), _open(PERF_COUNT_HW_CPU_CYCLES)]
    libc = _libc()
    try:
        for fd in fds:
            libc.ioctl(fd, _IOC_RESET, 0)
            libc.ioctl(fd, _IOC_ENABLE, 0)
        t0 = time.perf_counter()
        r = subprocess.run(list(argv), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, check=False, timeout=timeout)
        seconds = time.perf_counter() - t0
        for fd in fds:
            libc.ioctl(fd, _IOC_DISABLE, 0)
        values = [struct.unpack("Q", os.read(fd, 8))[0] for fd in fds]
    finally:
        for fd in fds:
            os.close(fd)
    if r.returncode:
        tail = r.stderr.decode(errors="replace")[-2000:]
        raise BenchError(f"counted run {argv[0]} exited {r.returncode}: {tail}")
    return values[0], values[1], seconds


@dataclass(frozen=True, kw_only=True)
class CounterCheck:
    metric: str
    a_instructions: float
    b_instructions: float
    a_cycles: float
    b_cycles: float

    @property
    def instructions_speed(self) -> float:
        return self.a_instructions / self.b_instructions

    @property
    def cycles_speed(self) -> float:
        return self.a_cycles / self.b_cycles

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "instructions_speed": self.instructions_speed,
                "cycles_speed": self.cycles_speed}


def measure(targets: Sequence[Any], plan: Any) -> dict[str, Any]:
    """Each simulation target's plan runs, counted natively one after the other; per-token figures
    and B/A speed ratios (instructions and cycles) for prefill and decode. Needs :func:`probe` true."""
    avail = probe()
    if not avail.available:
        raise HostError(f"the counters instrument is not available here: {avail.reason}")
    # by position, never by name: two arms may share one (two builds of one pin)
    per: list[dict[str, tuple[float, float]]] = []
    runs: dict[str, list[CounterRun]] = {}
    for i, t in enumerate(targets):
        got: dict[str, CounterRun] = {}
        for role, pn, gn in plan.shapes():
            cmd = t.command(pn, gn)
            ins, cyc, sec = count(cmd.argv, dict(cmd.env))
            got[role] = CounterRun(role=role, pn=pn, gn=gn, instructions=ins, cycles=cyc, seconds=sec)
            progress.info(f"counters: {t.name} {role} (pn={pn} gn={gn}) {ins / 1e9:.3f} G instructions, "
                          f"{cyc / 1e9:.3f} G cycles")
        runs[t.name if t.name not in runs else f"{t.name} ({i + 1})"] = list(got.values())
        passes = int(getattr(t, "prompt_passes", 1))
        base = got["base"]
        per.append({
            "prefill": ((got["prompt"].instructions - base.instructions) / ((plan.p2 - plan.p1) * passes),
                        (got["prompt"].cycles - base.cycles) / ((plan.p2 - plan.p1) * passes)),
            "decode": ((got["generation"].instructions - base.instructions) / (plan.g2 - plan.g1),
                       (got["generation"].cycles - base.cycles) / (plan.g2 - plan.g1))})
    a, b = per[0], per[1]
    checks = [CounterCheck(metric=m, a_instructions=a[m][0], b_instructions=b[m][0], a_cycles=a[m][1],
                           b_cycles=b[m][1]) for m in ("prefill", "decode")]
    return {"instrument": "counters", "available": avail.as_dict(),
            "runs": {k: [r.as_dict() for r in v] for k, v in runs.items()},
            "checks": [c.as_dict() for c in checks]}
