"""CPU-level fallback: load the best CPU level that has passed a smoke probe on this host.

A portable cpu artifact holds one ggml CPU backend per SIMD level
(``lib/libggml-cpu-<level>.so``); ggml loads the one with the best score for this CPU.
A level can pass the score check and still crash here (a miscompiled kernel, an
instruction the loader does not check). So, as GPT4All does for its variant libraries,
the first load on a host runs a one-time smoke probe in a child process: load, note the
level ggml picked, greedy-decode a few tokens of the tiny quantized model. A level that
crashes is excluded with its reason and the probe runs again on the rest, until one
passes. The verdict is cached per host CPU fingerprint and artifact (its manifest's hash).

``$HARNESS_CPU_LEVEL`` forces one level (tests, and users who know better);
``$HARNESS_BINDING_LIB_DIR`` replaces the artifact's plugin dir: alone it bypasses the selection
altogether (the probe child and the cross-variant runs use it), with ``$HARNESS_CPU_LEVEL`` the
forced level comes from that dir (another build's CPU levels of the same pin on the installed
binding, e.g. an artifact built with a temporary patch): :func:`backend_dir`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from harness.core import crash, paths, progress
from harness.core.errors import BindingError
from harness.core.pyexec import python_argv

LEVEL_ENV = "HARNESS_CPU_LEVEL"
LIB_DIR_ENV = "HARNESS_BINDING_LIB_DIR"
_PREFIX, _SUFFIX = "libggml-cpu-", ".so"
PROBE_TIMEOUT_S = 300
#: Above 1 token per batch, so the quantized matmuls take their tiled (AMX) path too.
PROBE_PROMPT = "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is"
PROBE_TOKENS = 8

_PROBE_CHILD = r"""
import json, sys
from harness.core import crash
from harness.runtime import Runtime
model = sys.argv[1]
crash.note(running="the CPU-level smoke probe")
with Runtime.load(model, n_ctx=256, max_num_seqs=1) as eng:
    level = eng.info()["cpu_variant"]
    crash.note(cpu_level=level)
    c = eng.complete(sys.argv[2], temperature=0.0, max_tokens=int(sys.argv[3]))
    print(json.dumps({"cpu_level": level, "n_generated": c.n_generated}))
"""


def level_libraries(lib: Path) -> list[Path]:
    """The CPU level libraries (``libggml-cpu-<level>.so``) in an artifact's ``lib/``, by name."""
    return sorted(lib.glob(f"{_PREFIX}*{_SUFFIX}"))


def cpu_levels(lib: Path) -> list[str]:
    """The CPU levels an artifact's ``lib/`` holds (empty for a build with one built-in level)."""
    return [p.name[len(_PREFIX):-len(_SUFFIX)] for p in level_libraries(lib)]


def level_library(lib: Path, level: str) -> Path:
    return lib / f"{_PREFIX}{level}{_SUFFIX}"


def level_dir(lib: Path, keep: set[str] | list[str], into: Path) -> Path:
    """A lib dir exposing only the CPU levels in ``keep`` (every other file linked as is).

    The dir is keyed by the artifact's content, so two installations of one artifact (a CI checkout's
    venv and a developer's) share it: every link is pointed at ``lib``'s own files again, and a link
    to a file ``lib`` does not expose is removed, so a dir left by an installation since deleted never
    hands ggml dangling links (which it skips silently, loading another level)."""
    into.mkdir(parents=True, exist_ok=True)
    wanted: dict[str, Path] = {}
    for p in lib.iterdir():
        if p.name.startswith(_PREFIX) and p.name.endswith(_SUFFIX) \
                and p.name[len(_PREFIX):-len(_SUFFIX)] not in keep:
            continue
        wanted[p.name] = p.resolve()
    for link in into.iterdir():
        if link.name not in wanted and link.is_symlink():
            link.unlink()
    for name, target in wanted.items():
        link = into / name
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        tmp = into / f".{name}.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, link)  # atomic: a process loading from the dir sees the old link or the new
    return into


def artifact_key(lib: Path) -> str:
    """The artifact's identity: its manifest (which lists every file's sha256), else the level files."""
    manifest = lib / "manifest.json"
    h = hashlib.sha256()
    if manifest.is_file():
        h.update(manifest.read_bytes())
    else:
        for p in level_libraries(lib):
            st = p.stat()
            h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The smoke probe's result for one artifact on one host CPU."""

    chosen: str | None
    """The level ggml picked among the levels left, or None when every level failed."""
    excluded: dict[str, str] = field(default_factory=dict)
    """level -> why it is not used ("crashed in the smoke probe (SIGILL)")."""
    host: str = ""
    artifact: str = ""
    seconds: float = 0.0
    error: str = ""
    """Set when the probe itself could not run (the verdict then excludes nothing)."""

    def as_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "excluded": dict(self.excluded), "host": self.host,
                "artifact": self.artifact, "seconds": self.seconds, "error": self.error}


@dataclass(frozen=True, kw_only=True)
class Selection:
    """What :func:`select` hands the engine: the plugin dir for ggml and why."""

    lib_dir: Path
    level: str | None
    forced: bool = False
    verdict: Verdict | None = None

    def describe(self) -> list[str]:
        """Human lines, e.g. "cpu level sapphirerapids: crashed in the smoke probe (SIGILL); using zen4"."""
        if self.forced:
            return [f"cpu level {self.level}: forced by ${LEVEL_ENV}"]
        v = self.verdict
        if v is None:
            return []
        using = f"using {v.chosen}" if v.chosen else "no level passed"
        lines = [f"cpu level {lvl}: {why}; {using}" for lvl, why in v.excluded.items()]
        if v.error:
            lines.append(f"cpu level probe could not run ({v.error}); ggml chooses as usual")
        elif not lines:
            lines.append(f"cpu level {v.chosen}: passed the smoke probe")
        return lines


def _probe_model() -> Path:
    from harness.engine import registry

    impl = registry.default("text")
    if impl.probe_model is None:
        msg = f"engine {impl.name} provides no model for the CPU-level smoke probe"
        raise BindingError(msg)
    return impl.probe_model()


@dataclass(frozen=True, kw_only=True)
class ProbeRun:
    ok: bool
    level: str | None
    crash: crash.Crash | None
    detail: str


def probe_once(lib_dir: Path, model: Path) -> ProbeRun:
    """One probe child on ``lib_dir``: did it decode, which level did it load, how did it end."""
    env = {**os.environ, LIB_DIR_ENV: str(lib_dir)}
    env.pop(LEVEL_ENV, None)
    r = crash.run_child([*python_argv("-c", _PROBE_CHILD), str(model), PROBE_PROMPT, str(PROBE_TOKENS)],
                        env=env, timeout=PROBE_TIMEOUT_S)
    if r.returncode is None:
        return ProbeRun(ok=False, level=r.note.get("cpu_level"), crash=None, detail=f"hung for {PROBE_TIMEOUT_S} s")
    if r.crash is not None:
        return ProbeRun(ok=False, level=r.crash.cpu_level, crash=r.crash, detail=r.crash.describe())
    if r.returncode:
        return ProbeRun(ok=False, level=r.note.get("cpu_level"), crash=None,
                        detail=r.last_line(f"exit code {r.returncode}"))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return ProbeRun(ok=True, level=str(out["cpu_level"]), crash=None, detail="")


def run_probe(lib: Path, scratch: Path) -> Verdict:
    """Probe ``lib``'s levels: exclude each level that crashes, until ggml's pick among the rest passes."""
    t0 = time.perf_counter()
    levels = cpu_levels(lib)
    model = _probe_model()
    excluded: dict[str, str] = {}
    remaining = list(levels)
    for attempt in range(len(levels) + 1):
        d = level_dir(lib, remaining, scratch / f"try{attempt}")
        run = probe_once(d, model)
        if run.ok:
            return Verdict(chosen=run.level, excluded=excluded, seconds=round(time.perf_counter() - t0, 2))
        if run.crash is None and run.level is None:
            # Not a crash and no level loaded: the probe itself is broken (no model, no ggml backend).
            return Verdict(chosen=None, excluded=excluded, error=run.detail,
                           seconds=round(time.perf_counter() - t0, 2))
        culprits = [run.level] if run.level in remaining else []
        if not culprits:
            # Died before it could say which level it loaded: try each remaining level alone.
            for lvl in remaining:
                alone = probe_once(level_dir(lib, [lvl], scratch / f"alone-{attempt}-{lvl}"), model)
                if not alone.ok and (alone.crash is not None or alone.level == lvl):
                    excluded[lvl] = _why(alone)
                    culprits.append(lvl)
            if not culprits:
                return Verdict(chosen=None, excluded=excluded, error=f"probe failed: {run.detail}",
                               seconds=round(time.perf_counter() - t0, 2))
        else:
            excluded[run.level or "?"] = _why(run)
        remaining = [lvl for lvl in remaining if lvl not in culprits]
        if not remaining:
            break
    return Verdict(chosen=None, excluded=excluded, seconds=round(time.perf_counter() - t0, 2))


def _why(run: ProbeRun) -> str:
    if run.crash is not None:
        return f"crashed in the smoke probe ({run.crash.signal_name})"
    return f"failed the smoke probe ({run.detail})"


def _verdict_path(key: str) -> Path:
    return paths.cache_root() / "cpu-levels" / f"{key}.json"


def verdict(lib: Path, *, refresh: bool = False) -> Verdict:
    """The cached verdict for this artifact on this host CPU, probing once when there is none."""
    from harness.core.host import cpu_fingerprint

    host, art = cpu_fingerprint(), artifact_key(lib)
    path = _verdict_path(f"{art}-{host}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file() and not refresh:
            data = json.loads(path.read_text())
            return Verdict(chosen=data.get("chosen"), excluded=dict(data.get("excluded") or {}),
                           host=host, artifact=art, seconds=float(data.get("seconds") or 0), error=data.get("error", ""))
        progress.info(f"CPU-level smoke probe of {lib} on this host (once) ...")
        scratch = paths.cache_root() / "cpu-levels" / f"{art}-{host}.probe"
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            v = run_probe(lib, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        v = dataclasses.replace(v, host=host, artifact=art)
        if not v.error:  # a probe that could not run is retried next time
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(v.as_dict(), indent=2))
            tmp.replace(path)
        return v


def backend_dir(lib: Path, *, probe: bool = True) -> Path:
    """The plugin dir an engine hands ggml for its artifact's ``lib``.

    ``$HARNESS_BINDING_LIB_DIR`` alone is used as it is (ggml loads every level in it and keeps its
    own pick); with ``$HARNESS_CPU_LEVEL`` too, that level of that dir; else :func:`select` on
    ``lib``. The dir's levels must be of the binding's pin (ggml refuses a plugin of another
    ggml backend API version).
    """
    override = os.environ.get(LIB_DIR_ENV, "").strip()
    if override and not os.environ.get(LEVEL_ENV, "").strip():
        return Path(override)
    return select(Path(override) if override else lib, probe=probe).lib_dir


def select(lib: Path, *, probe: bool = True) -> Selection:
    """The plugin dir ggml should load from, honouring ``$HARNESS_CPU_LEVEL`` and the probe verdict.

    ``probe=False`` (an engine without a smoke probe of its own) honours only the forced level.
    """
    levels = cpu_levels(lib)
    forced = os.environ.get(LEVEL_ENV, "").strip()
    if forced:
        if forced not in levels:
            msg = (f"${LEVEL_ENV}={forced} is not a CPU level of {lib} "
                   f"(levels: {', '.join(levels) or 'none: this build has one built-in level'}); "
                   f"unset it or pick one of those")
            raise BindingError(msg)
        d = level_dir(lib, [forced], paths.cache_root() / "cpu-levels" / "forced" / artifact_key(lib) / forced)
        return Selection(lib_dir=d, level=forced, forced=True)
    if len(levels) < 2 or not probe:
        return Selection(lib_dir=lib, level=levels[0] if len(levels) == 1 else None)
    v = verdict(lib)
    if not v.excluded:
        return Selection(lib_dir=lib, level=v.chosen, verdict=v)
    keep = [lvl for lvl in levels if lvl not in v.excluded]
    if not keep or v.chosen is None:
        why = "; ".join(f"{lvl}: {r}" for lvl, r in v.excluded.items())
        msg = (f"no CPU level of {lib} passed the smoke probe on this host ({why}); "
               f"force one with ${LEVEL_ENV}=<level> to see it fail, or report the crash")
        raise BindingError(msg)
    tag = "-".join(sorted(v.excluded))
    d = level_dir(lib, keep, paths.cache_root() / "cpu-levels" / "dirs" / f"{v.artifact}-{v.host}-{tag}")
    return Selection(lib_dir=d, level=v.chosen, verdict=v)
