"""The cpu-aarch64 cross row: ARM levels read from ggml's source, the toolchain file, the exact reason
when the toolchain is missing, the choice of QEMU CPU model per level, and the ABI exports check.

The ggml excerpts below are copied in the shape of the pinned source (ggml/src/CMakeLists.txt's
GGML_CPU_ALL_VARIANTS block, ggml/src/ggml-cpu/arch/arm/cpu-feats.cpp's score function).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.build.matrix import buildability, get_variant
from harness.core.types import HostInfo, ToolInfo
from harness.engine.plugin import get_manager
from harness_plugins import cross_gnu
from harness_plugins.llamacpp import emulated
from harness_plugins.variant_cpu import harness_artifact_cpu_levels

CMAKE = """\
if (GGML_CPU_ALL_VARIANTS)
    if (NOT GGML_BACKEND_DL)
        message(FATAL_ERROR "GGML_CPU_ALL_VARIANTS requires GGML_BACKEND_DL")
    endif()
    if (GGML_SYSTEM_ARCH STREQUAL "x86")
        ggml_add_cpu_backend_variant(x64)
        ggml_add_cpu_backend_variant(sse42              SSE42)
    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")
        if (CMAKE_SYSTEM_NAME MATCHES "Linux")
            ggml_add_cpu_backend_variant(armv8.0_1)
            ggml_add_cpu_backend_variant(armv8.2_1    DOTPROD)
            ggml_add_cpu_backend_variant(armv8.2_2    DOTPROD FP16_VECTOR_ARITHMETIC)
            ggml_add_cpu_backend_variant(armv8.6_2    DOTPROD FP16_VECTOR_ARITHMETIC SVE MATMUL_INT8 SVE2)
            ggml_add_cpu_backend_variant(armv9.2_2    DOTPROD FP16_VECTOR_ARITHMETIC SVE MATMUL_INT8 SVE2 SME)
        elseif (CMAKE_SYSTEM_NAME MATCHES "Android")
            ggml_add_cpu_backend_variant(android_armv8.0_1)
        elseif (APPLE)
            ggml_add_cpu_backend_variant(apple_m1             DOTPROD)
        else()
            message(FATAL_ERROR "Unsupported ARM target OS: ${CMAKE_SYSTEM_NAME}")
        endif()
    elseif (GGML_SYSTEM_ARCH STREQUAL "PowerPC")
        ggml_add_cpu_backend_variant(power0)
    endif()
endif()
"""

FEATS = """\
#include "ggml-backend-impl.h"
#include "ggml-feats.h"
#if defined(__aarch64__) || defined(_M_ARM64)
static int ggml_backend_cpu_aarch64_score() {
    int score = 1;
    const ggml_feats_arch64_runtime_t af = ggml_feats_get_arch64_runtime();
#ifdef GGML_USE_DOTPROD
    if (!af.has_dotprod) { return 0; }
    score += 1<<1;
#endif
#ifdef GGML_USE_FP16_VECTOR_ARITHMETIC
    if (!af.has_fp16) { return 0; }
    score += 1<<2;
#endif
#ifdef GGML_USE_SVE
    if (!af.has_sve) { return 0; }
    score += 1<<3;
#endif
#ifdef GGML_USE_MATMUL_INT8
    if (!af.has_i8mm) { return 0; }
    score += 1<<4;
#endif
#ifdef GGML_USE_SVE2
    if (!af.has_sve2) { return 0; }
    score += 1<<5;
#endif
#ifdef GGML_USE_SME
    if (!af.has_sme) { return 0; }
    score += 1<<6;
#endif
    return score;
}
#endif
"""

HEADER = """\
typedef struct ggml_feats_arch64_runtime {
    bool has_dotprod;
    bool has_fp16;
    bool has_sve;
    int sve_cnt;
} ggml_feats_arch64_runtime_t;
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    src = tmp_path / "ggml" / "src"
    (src / "ggml-cpu" / "arch" / "arm").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(CMAKE)
    (src / "ggml-cpu" / "arch" / "arm" / "cpu-feats.cpp").write_text(FEATS)
    (src / "ggml-feats.h").write_text(HEADER)
    return tmp_path


def test_arm_levels_come_from_the_linux_block_with_their_hwcap_checks(tree: Path) -> None:
    levels = harness_artifact_cpu_levels(tree, "aarch64")
    assert levels is not None
    assert [lv.name for lv in levels] == ["armv8.0_1", "armv8.2_1", "armv8.2_2", "armv8.6_2", "armv9.2_2"]
    by = {lv.name: lv for lv in levels}
    assert by["armv8.0_1"].checked == ()
    assert by["armv8.2_2"].checked == ("dotprod", "fp16")
    assert by["armv9.2_2"].checked == ("dotprod", "fp16", "sve", "i8mm", "sve2", "sme")
    assert by["armv9.2_2"].library == "libggml-cpu-armv9.2_2.so" and not by["armv9.2_2"].unchecked_options
    assert by["armv8.2_1"].source == "ggml/src/CMakeLists.txt:11"


def test_the_probe_prints_every_field_ggml_detects(tree: Path) -> None:
    src = emulated.probe_source(emulated.feats_header(tree))
    assert '\\"dotprod\\": %d' in src and "f.has_sve" in src and "has_sve_cnt" not in src
    assert '#include "ggml-feats.h"' in src


LEVELS = {"armv8.0_1": frozenset(), "armv8.2_1": frozenset({"dotprod"}),
          "armv8.2_2": frozenset({"dotprod", "fp16"}),
          "armv8.6_2": frozenset({"dotprod", "fp16", "sve", "i8mm", "sve2"}),
          "armv9.2_1": frozenset({"dotprod", "fp16", "sve", "i8mm", "sme"}),
          "armv9.2_2": frozenset({"dotprod", "fp16", "sve", "i8mm", "sve2", "sme"})}
#: What the pinned ggml detects under QEMU 7.2's models (measured with the probe).
QEMU72 = {"a64fx": frozenset({"fp16", "sve"}), "cortex-a35": frozenset(),
          "cortex-a76": frozenset({"dotprod", "fp16"}),
          "max": frozenset({"dotprod", "fp16", "sve", "sve2", "i8mm", "sme"}),
          "max,sme=off": frozenset({"dotprod", "fp16", "sve", "sve2", "i8mm"})}


def test_each_level_gets_the_model_that_isolates_it_or_says_why_not() -> None:
    ch = cross_gnu.choose_cpu_models(LEVELS, QEMU72)
    assert (ch["armv8.0_1"].model, ch["armv8.0_1"].isolated) == ("cortex-a35", True)
    assert (ch["armv8.2_2"].model, ch["armv8.2_2"].isolated) == ("cortex-a76", True)
    assert (ch["armv8.6_2"].model, ch["armv8.6_2"].isolated) == ("max,sme=off", True)
    assert (ch["armv9.2_2"].model, ch["armv9.2_2"].isolated) == ("max", True)
    # dotprod without fp16: no QEMU 7.2 model; the closest has what armv8.2_2 checks
    assert (ch["armv8.2_1"].model, ch["armv8.2_1"].isolated, ch["armv8.2_1"].extra) == ("cortex-a76", False, ("fp16",))
    assert "no QEMU model isolates" in ch["armv8.2_1"].note and "armv8.2_2" in ch["armv8.2_1"].note
    assert (ch["armv9.2_1"].model, ch["armv9.2_1"].extra) == ("max", ("sve2",))
    # a level no model can run at all
    only_old = cross_gnu.choose_cpu_models(LEVELS, {"cortex-a35": frozenset()})
    assert only_old["armv8.2_2"].model is None and "no QEMU CPU model has dotprod, fp16" in only_old["armv8.2_2"].note


def test_a_model_with_unrelated_extras_is_still_preferred_when_the_loader_picks_the_level() -> None:
    # a64fx has fp16 and sve but no dotprod: the loader picks armv8.0_1 there, yet a35 is exact.
    ch = cross_gnu.choose_cpu_models(LEVELS, {"a64fx": QEMU72["a64fx"], "cortex-a35": frozenset()})
    assert ch["armv8.0_1"].model == "cortex-a35"
    ch = cross_gnu.choose_cpu_models(LEVELS, {"a64fx": QEMU72["a64fx"]})
    assert (ch["armv8.0_1"].model, ch["armv8.0_1"].isolated) == ("a64fx", False)
    assert "the loader still picks this level there" in ch["armv8.0_1"].note


def _host() -> HostInfo:
    return HostInfo(os="linux", arch="x86_64", cpu_model="t", microarch="zen4", simd=(), cores=2, memory_bytes=1,
                    tools={"cmake": ToolInfo(name="cmake", path="/usr/bin/cmake", version="3.25.1"),
                           "ninja": ToolInfo(name="ninja", path="/usr/bin/ninja", version="1.11.1")})


def test_matrix_names_exactly_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    b = buildability(get_manager(), get_variant("cpu-aarch64"), _host())
    assert not b.buildable and not b.runnable
    text = "; ".join(b.reasons)
    assert "clang++-19 not found (the aarch64-linux-gnu cross compiler (the pinned ggml's armv9.2 levels" in text
    assert "aarch64-linux-gnu-g++ not found (clang++-19 links with its libstdc++ and binutils)" in text
    assert text.count("bash scripts/install-system-deps.sh --cross-aarch64") >= 2
    assert any("qemu-aarch64-static not found" in n for n in b.notes)


def test_a_host_row_is_untouched_by_the_cross_plugin() -> None:
    assert cross_gnu.reasons(get_variant("cpu")) == ([], [])
    assert cross_gnu.harness_variant_configure(engine=None, variant=get_variant("cpu"), host=_host()) is None  # type: ignore[arg-type]


def test_the_toolchain_file_is_generated_and_content_addressed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    tc = cross_gnu.CrossToolchain(triple="aarch64-linux-gnu", cc="/usr/bin/clang-19", cxx="/usr/bin/clang++-19",
                                  sysroot=Path("/usr/aarch64-linux-gnu"), qemu="/usr/bin/qemu-aarch64-static",
                                  compiler_version="19.1.7", cxx_name="clang++-19")
    path = cross_gnu.toolchain_file(tc)
    text = path.read_text()
    assert path.parent == tmp_path / "toolchains" and path.name.startswith("cross-aarch64-linux-gnu-")
    for line in ("set(CMAKE_SYSTEM_NAME Linux)", "set(CMAKE_SYSTEM_PROCESSOR aarch64)",
                 "set(CMAKE_CXX_COMPILER /usr/bin/clang++-19)", "set(CMAKE_CXX_COMPILER_TARGET aarch64-linux-gnu)",
                 "set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)", "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
                 'set(CMAKE_CROSSCOMPILING_EMULATOR "/usr/bin/qemu-aarch64-static;-L;/usr/aarch64-linux-gnu")'):
        assert line in text
    assert cross_gnu.toolchain_file(tc) == path  # same content, same file
    gnu = cross_gnu.CrossToolchain(triple="aarch64-linux-gnu", cc="/usr/bin/aarch64-linux-gnu-gcc",
                                   cxx="/usr/bin/aarch64-linux-gnu-g++", sysroot=Path("/usr/aarch64-linux-gnu"),
                                   qemu=None, compiler_version="12", cxx_name="aarch64-linux-gnu-g++")
    other = cross_gnu.toolchain_file(gnu)
    assert other != path and "COMPILER_TARGET" not in other.read_text() and "EMULATOR" not in other.read_text()
    assert gnu.compiler_args == [] and tc.compiler_args == ["--target=aarch64-linux-gnu"]


def test_cross_rows_build_the_programs_they_run_under_emulation() -> None:
    from harness.build.cmake import row_bins, row_targets
    from harness.engine.descriptor import load_engine

    eng = load_engine("llamacpp")
    assert "llama-completion" in row_targets(eng, get_variant("cpu-aarch64"))
    assert "llama-completion" in row_bins(eng, get_variant("cpu-aarch64"))
    assert row_targets(eng, get_variant("cpu")) == list(eng.targets)  # host rows: stamps unchanged


def test_a_cross_artifact_is_not_usable_natively() -> None:
    from harness.build.artifacts import usable_on

    ok, why = usable_on({"host": {"os": "linux"}, "target": "aarch64-linux-gnu", "platform": "cpu"}, _host())
    assert not ok and "cross-built for aarch64-linux-gnu" in why[0] and "emulation" in why[0]


def test_exports_check_finds_a_used_function_no_library_exports(tmp_path: Path) -> None:
    """Against the host's own libc (a real ELF): the check reads .dynsym, whatever the machine."""
    from harness.abi.exports import check_artifact

    libc = next((p for p in (Path("/lib/x86_64-linux-gnu/libc.so.6"), Path("/usr/lib/x86_64-linux-gnu/libc.so.6"))
                 if p.is_file()), None)
    if libc is None:
        pytest.skip("no glibc at the Debian path")
    (tmp_path / "lib").mkdir()
    shutil.copy(libc, tmp_path / "lib" / "libc.so.6")
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "api.h").write_text("int f(void);\n")
    (tmp_path / "tree" / "include").mkdir(parents=True)
    (tmp_path / "tree" / "include" / "api.h").write_text("int f(void);\n")
    committed = {"used": ["printf", "no_such_function", "SOME_ENUM"], "functions": {"printf": {}, "no_such_function": {}}}
    r = check_artifact(tmp_path, committed, tree=tmp_path / "tree")
    assert r.used_functions == 2 and r.missing == ["no_such_function"] and not r.ok
    assert r.exported_by == {"libc.so.6": 1} and r.headers == {"api.h": "same"} and r.machine == "x64"
    (tmp_path / "include" / "api.h").write_text("int f(int);\n")
    committed["used"] = ["printf"]
    r = check_artifact(tmp_path, committed, tree=tmp_path / "tree")
    assert r.headers == {"api.h": "differs"} and not r.ok
    assert json.loads(json.dumps(r.as_dict()))["missing"] == []


def test_the_level_table_shows_model_isolation_answer_divergence_and_speed() -> None:
    from harness.qualify.emulate import table_lines

    run = {"status": "ran", "ok": True, "diverges_at": None, "eval_tok_s": 3.21, "reference": True}
    r = {"models": {"SmolLM2": "/m.gguf"}, "bench_shape": {"pp": 16, "tg": 8}, "levels": [
        {"level": "armv8.0_1", "qemu_model": "cortex-a35", "isolated": True, "isolation_note": "",
         "runs": {"SmolLM2": run}, "bench": {"status": "ran", "pp16": 9.5, "tg8": 3.1}},
        {"level": "armv8.2_1", "qemu_model": "cortex-a76", "isolated": False,
         "isolation_note": "no QEMU model isolates this level: cortex-a76 also has fp16",
         "runs": {"SmolLM2": {"status": "ran", "ok": False, "diverges_at": 4, "eval_tok_s": 4.0}},
         "bench": {"status": "crashed", "error": "crashed: SIGILL (illegal instruction) on level armv8.2_1"}},
    ]}
    lines = table_lines(r)
    assert lines[0].startswith("| level | QEMU CPU model | isolated | SmolLM2: answer ok | SmolLM2: diverges at token")
    assert "| armv8.0_1 | `cortex-a35` | yes | yes | (reference) | 3.21 | 9.5 / 3.1 |" in lines
    assert "| armv8.2_1 | `cortex-a76` | no | NO | 4 | 4.00 | CRASHED: crashed: SIGILL (illegal instruction) " \
           "on level armv8.2_1 |" in lines
    assert lines[-1] == "- armv8.2_1: no QEMU model isolates this level: cortex-a76 also has fp16"


def test_a_guest_signal_is_named_whether_qemu_reraises_it_or_only_prints_it() -> None:
    import subprocess

    sigill = subprocess.CompletedProcess([], -4, "", "qemu: uncaught target signal 4 (Illegal instruction) - core dumped\n")
    assert emulated._died(sigill) == "SIGILL (illegal instruction)"
    via_shell = subprocess.CompletedProcess([], 139, "", "")
    assert emulated._died(via_shell) is not None and emulated._died(via_shell).startswith("SIGSEGV")  # type: ignore[union-attr]
    assert emulated._died(subprocess.CompletedProcess([], 1, "", "error: model not found\n")) is None


def test_the_loaded_level_and_speeds_are_read_from_the_programs_log() -> None:
    err = ("0.00.196.505 I load_backend: loaded CPU backend from /t/armv8.2_2/bin/../lib/libggml-cpu-armv8.2_2.so\n"
           "0.31.781.402 I common_perf_print: prompt eval time =    7023.83 ms /     5 tokens "
           "( 1404.77 ms per token,     0.71 tokens per second)\n"
           "0.31.781.427 I common_perf_print:        eval time =   21143.37 ms /     7 runs   "
           "( 3020.48 ms per token,     0.33 tokens per second)\n")
    m = emulated._LOADED_RE.search(err)
    assert m is not None and m.group(1) == "armv8.2_2"
    assert emulated._EVAL_RE.findall(err) == ["0.33"] and emulated._PROMPT_EVAL_RE.findall(err) == ["0.71"]
