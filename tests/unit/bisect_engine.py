"""``bis``: a synthetic git engine for ``harness bisect``, with a history that holds three kinds of commit.

A C library (``libbis.so``: ``bis_step``, a hot loop, and ``bis_logit``, a next-token score) and two
programs: ``bis-bench PN GN`` runs the hot loop per prompt and per generated token (what CPU
simulation measures), ``bis-eval`` prints a next-token distribution per position (what the agreement
gate compares). The repository has :data:`COMMITS` commits after the good one (``c0``):

- ``c{SLOW}`` runs the hot loop 5% more often (1 in 20 iterations more): the speed gate's culprit;
- ``c{BROKEN}`` does not compile (fixed by the next commit): skipped;
- ``c{CHANGES}`` changes ``bis_logit``: the agreement gate's culprit;
- every other commit edits a note file.

Its folder (descriptor, plugin) goes on ``$HARNESS_ENGINES_PATH``: the plugin names ``bis-bench`` as the
engine's benchmark tool (a simulation target on ``artifact=DIR``) and compares two builds' outputs.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

COMMITS = 32
SLOW = 21
BROKEN = 16
CHANGES = 27

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.21)
project(bis C)
add_library(bis SHARED src/bis.c src/extra.c)
target_include_directories(bis PUBLIC include)
add_executable(bis-bench src/bench.c)
target_link_libraries(bis-bench bis)
add_executable(bis-eval src/eval.c)
target_link_libraries(bis-eval bis m)
"""
HEADER = """\
#ifndef BIS_H
#define BIS_H
#define BIS_ABI_VERSION 1
double bis_step(double x, int n);
double bis_logit(int pos, int tok);
int bis_extra(void);
#endif
"""
LIB = """\
#include "bis.h"

double bis_step(double x, int n) {
    volatile double acc = x;
    for (int i = 0; i < LOOP; ++i) {
        acc = acc * 1.0000001 + 0.5;
    }
    return acc;
}

double bis_logit(int pos, int tok) {
    return (double) ((pos * 7 + tok * 3) % 11) / LOGIT_SCALE;
}
"""
EXTRA = "#include \"bis.h\"\nint bis_extra(void) { return 1; }\n"
BENCH = """\
#include <stdio.h>
#include <stdlib.h>
#include "bis.h"

int main(int argc, char ** argv) {
    int pn = argc > 1 ? atoi(argv[1]) : 8, gn = argc > 2 ? atoi(argv[2]) : 8;
    double x = 1.0;
    for (int t = 0; t < pn; ++t) x = bis_step(x, 2000);
    for (int t = 0; t < gn; ++t) x = bis_step(x, 6000);
    printf("%f\\n", x);
    return 0;
}
"""
EVAL = """\
#include <math.h>
#include <stdio.h>
#include "bis.h"

int main(void) {
    for (int pos = 0; pos < 16; ++pos) {
        double z[4], s = 0;
        for (int t = 0; t < 4; ++t) { z[t] = exp(bis_logit(pos, t)); s += z[t]; }
        printf("%.9f %.9f %.9f %.9f\\n", z[0] / s, z[1] / s, z[2] / s, z[3] / s);
    }
    return 0;
}
"""
DESCRIPTOR = """\
name: bis
source:
  kind: git
  url: "{url}"
  commit: "{commit}"
upstream: {{repository: example/bis, commit: "{commit}"}}
cmake:
  base: {{CMAKE_BUILD_TYPE: Release, CMAKE_C_FLAGS: "-O1", CMAKE_BUILD_WITH_INSTALL_RPATH: "ON",
         CMAKE_INSTALL_RPATH: "$ORIGIN/../lib"}}
  intents:
    cpu_levels:
      runtime: {{}}
targets: [bis, bis-bench, bis-eval]
artifacts:
  lib: ["libbis.so*"]
  bin: [bis-bench, bis-eval]
  include: ["include:*.h"]
abi:
  headers: [include/bis.h]
  include_dirs: [include]
  targets: [x86_64-linux-gnu]
  version_macro: BIS_ABI_VERSION
bisect:
  levels:
    haswell: {{CMAKE_C_FLAGS: "-O1 -march=haswell"}}
    native: {{CMAKE_C_FLAGS: "-O1"}}
"""
PLUGIN = '''
"""Engine plugin ``bis``: its benchmark program as a simulation target, and two builds' outputs compared."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from harness.bench.simulation import SimCommand
from harness.engine.interface import BenchArmKind, EngineImpl
from harness.engine.plugin import hookimpl

NAME = "bis"


class BenchTarget:
    def __init__(self, options: dict[str, Any]) -> None:
        self.artifact = Path(str(options["artifact"]))
        self.name = str(options.get("name") or self.artifact.name)

    def command(self, pn: int, gn: int) -> SimCommand:
        return SimCommand(argv=(str(self.artifact / "bin" / "bis-bench"), str(pn), str(gn)), env={"LC_ALL": "C"})

    def describe(self) -> dict[str, Any]:
        manifest = hashlib.sha256((self.artifact / "manifest.json").read_bytes()).hexdigest()
        return {"kind": "bis-bench", "artifact": str(self.artifact), "manifest_sha256": manifest}


def _make(options: dict[str, Any]) -> Any:
    raise NotImplementedError("bis-bench is measured by simulation only")


def _outputs(artifact: Path) -> Any:
    out = subprocess.run([str(artifact / "bin" / "bis-eval")], capture_output=True, text=True, check=True).stdout
    return np.array([[float(v) for v in line.split()] for line in out.splitlines()])


def compare_outputs(a: Path, b: Path, *, model: Any = None, workdir: Path | None = None) -> dict[str, Any]:
    p, q = _outputs(a), _outputs(b)
    kld = float(np.mean(np.sum(p * (np.log(p) - np.log(q)), axis=1)))
    top1 = float(np.mean(p.argmax(axis=1) == q.argmax(axis=1)))
    return {"kld": kld, "top1": top1, "positions": int(p.shape[0])}


@hookimpl
def harness_engine_register() -> list[EngineImpl]:
    return [EngineImpl(name=NAME, old_pin_bench_arm="bis-bench", compare_outputs=compare_outputs,
                       bench_arms={"bis-bench": BenchArmKind(make=_make, sim_target=BenchTarget)})]
'''


def _git(*args: str, cwd: Path) -> str:
    r = subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                       capture_output=True, text=True)
    return r.stdout.strip()


def _lib(*, slow: bool, logit: str) -> str:
    loop = "n + n / 20" if slow else "n"
    return LIB.replace("LOOP", loop).replace("LOGIT_SCALE", logit)


def make_repo(tmp: Path) -> tuple[Path, list[str]]:
    """The bare repository and its commits ``c0`` .. ``c{COMMITS}`` (tagged so)."""
    work = tmp / "bis-src"
    (work / "include").mkdir(parents=True)
    (work / "src").mkdir()
    (work / "CMakeLists.txt").write_text(CMAKELISTS)
    (work / "include" / "bis.h").write_text(HEADER)
    (work / "src" / "bis.c").write_text(_lib(slow=False, logit="4.0"))
    (work / "src" / "extra.c").write_text(EXTRA)
    (work / "src" / "bench.c").write_text(BENCH)
    (work / "src" / "eval.c").write_text(EVAL)
    (work / "NOTES").write_text("notes\n")
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-qm", "c0: the good one", cwd=work)
    commits = [_git("rev-parse", "HEAD", cwd=work)]
    slow, logit = False, "4.0"
    for n in range(1, COMMITS + 1):
        if n == SLOW:
            slow, msg = True, f"c{n}: the hot loop runs 1 in 20 iterations more"
        elif n == CHANGES:
            logit, msg = "3.0", f"c{n}: bis_logit scaled otherwise (results change)"
        elif n == BROKEN:
            (work / "src" / "extra.c").write_text(EXTRA.replace("return 1;", "return 1"))  # no semicolon
            msg = f"c{n}: extra.c does not compile"
        elif n == BROKEN + 1:
            (work / "src" / "extra.c").write_text(EXTRA)
            msg = f"c{n}: extra.c compiles again"
        else:
            msg = f"c{n}: a note"
        (work / "src" / "bis.c").write_text(_lib(slow=slow, logit=logit))
        with (work / "NOTES").open("a") as f:
            f.write(f"note {n}\n")
        _git("commit", "-qam", msg, cwd=work)
        commits.append(_git("rev-parse", "HEAD", cwd=work))
        _git("tag", f"c{n}", cwd=work)
    _git("tag", "c0", commits[0], cwd=work)
    bare = tmp / "bis.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp)
    return bare, commits


def make_folder(engines: Path, url: str, commit: str) -> Path:
    folder = engines / "bis"
    (folder / "plugin").mkdir(parents=True)
    (folder / "engine.yaml").write_text(DESCRIPTOR.format(url=url, commit=commit))
    (folder / "plugin" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    return folder
