"""Snapshot: libclang on small synthetic headers, per target, without system headers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.abi import surface as surf
from harness.abi.snapshot import evaluate_macros, snapshot_headers
from harness.core.errors import AbiError

HEADER = """\
#pragma once
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include "dep.h"

#define EX_FILE_MAGIC_GGSN 0x6767736eu
#define EX_SESSION_MAGIC   EX_FILE_MAGIC_GGSN
#define EX_SESSION_VERSION 10
#define EX_MAGIC "GGUF"
#define EX_DEFAULT_SEED 0xFFFFFFFF
#define EX_SHIFTED_VERSION (1 << 4)
#define EX_MACRO_VERSION(x) (x)
#define EX_NOT_A_CONSTANT 7

typedef int32_t ex_token;
typedef bool (*ex_progress_callback)(float progress, void * user_data);
struct ex_opaque;

enum ex_vocab_type { EX_VOCAB_NONE = 0, EX_VOCAB_SPM = 1, EX_VOCAB_RWKV = 5 };
enum { EX_ANON_FIRST = 3 };

struct ex_params {
    int32_t n_ctx;
    ex_progress_callback cb;
    union { int64_t val_i64; double val_f64; };
    struct { int a; int b; } pair;
    unsigned flag : 3;
    enum ex_vocab_type vocab;
};

typedef struct { float x; float y; } ex_point;

int32_t ex_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
void ex_log(const char * fmt, ...);
__attribute__((deprecated)) void ex_old(struct ex_opaque * o);
void ex_print(FILE * f, size_t n);
static inline int ex_helper(void) { return 1; }
"""

DEP = "#pragma once\ntypedef struct dep_thing * dep_thing_t;\nint dep_count(dep_thing_t t);\n"


def write_tree(root: Path, header: str = HEADER) -> Path:
    (root / "include").mkdir(parents=True, exist_ok=True)
    (root / "dep").mkdir(exist_ok=True)
    (root / "include" / "ex.h").write_text(header)
    (root / "dep" / "dep.h").write_text(DEP)
    return root


def snap(root: Path, targets: tuple[str, ...] = surf.DEFAULT_TARGETS) -> surf.Surface:
    return snapshot_headers(root, ["include/ex.h"], ["include", "dep"], targets)


@pytest.fixture(scope="module")
def surface(tmp_path_factory: pytest.TempPathFactory) -> surf.Surface:
    return snap(write_tree(tmp_path_factory.mktemp("ex")))


def test_functions(surface: surf.Surface) -> None:
    f = surface["functions"]
    assert f["ex_batch_init"] == {
        "return": "int32_t",
        "params": [{"name": "n_tokens", "type": "int32_t"}, {"name": "embd", "type": "int32_t"},
                   {"name": "n_seq_max", "type": "int32_t"}],
        "variadic": False,
    }
    assert f["ex_log"]["variadic"] is True
    assert f["ex_old"]["deprecated"] is True
    assert f["ex_print"]["params"][0]["type"] == "FILE *"
    assert "ex_helper" not in f
    assert "dep_count" in f  # included headers under the root are part of the surface


def test_struct_layout_with_anonymous_members(surface: surf.Surface) -> None:
    s = surface["structs"]["ex_params"]
    fields = {f["name"]: f for f in s["fields"]}
    assert [f["name"] for f in s["fields"]] == [
        "n_ctx", "cb", "val_i64", "val_f64", "pair", "pair.a", "pair.b", "flag", "vocab"]
    assert fields["val_i64"]["offset"] == fields["val_f64"]["offset"] == 16
    assert fields["pair.b"]["offset"] == 28
    assert fields["flag"]["bits"] == 3
    assert fields["cb"]["type"] == "ex_progress_callback"
    assert fields["vocab"]["type"] == "enum ex_vocab_type"
    assert s["size"] == 40 and s["align"] == 8
    assert surface["structs"]["ex_point"]["size"] == 8  # typedef'd anonymous struct takes the typedef name


def test_enums_typedefs_constants(surface: surf.Surface) -> None:
    assert surface["enums"]["ex_vocab_type"]["constants"] == {"EX_VOCAB_NONE": 0, "EX_VOCAB_SPM": 1, "EX_VOCAB_RWKV": 5}
    assert "<anonymous EX_ANON_FIRST>" in surface["enums"]
    assert surface["typedefs"]["ex_progress_callback"] == "bool (*)(float, void *)"
    assert surface["typedefs"]["ex_token"] == "int32_t"
    assert surface["typedefs"]["ex_point"] == "struct ex_point"
    assert surface["constants"] == {
        "EX_FILE_MAGIC_GGSN": 0x6767736E, "EX_SESSION_MAGIC": 0x6767736E, "EX_SESSION_VERSION": 10,
        "EX_MAGIC": "GGUF", "EX_DEFAULT_SEED": 0xFFFFFFFF, "EX_SHIFTED_VERSION": 16,
    }


def test_shim_declarations_stay_out(surface: surf.Surface) -> None:
    assert "int32_t" not in surface["typedefs"] and "FILE" not in surface["typedefs"]
    text = surf.canonical({c: surface[c] for c in surf.CATEGORIES})
    assert " at " not in text and "unnamed" not in text and "/" not in text  # no file paths leak in


def test_fingerprint_stable_and_path_independent(tmp_path: Path, surface: surf.Surface) -> None:
    other = snap(write_tree(tmp_path / "elsewhere"))
    assert other["fingerprint"] == surface["fingerprint"]
    assert other["fingerprints"] == surface["fingerprints"]
    assert set(surface["fingerprints"]) == set(surf.DEFAULT_TARGETS)
    assert surf.fingerprint(surface) == surface["fingerprint"]


def test_merge_split_round_trip(tmp_path: Path) -> None:
    targets = ("x86_64-linux-gnu", "i686-linux-gnu")
    s = snap(write_tree(tmp_path, HEADER + "struct ex_long { int a; long b; };\n"), targets)
    # 32-bit long: the merged form keeps a per-target size and offset only where they differ.
    assert s["structs"]["ex_long"]["size"] == {"x86_64-linux-gnu": 16, "i686-linux-gnu": 8}
    assert s["structs"]["ex_long"]["fields"][0]["offset"] == 0
    assert surf.build_surface(surf.split(s))["fingerprint"] == s["fingerprint"]
    loaded = json.loads(surf.dumps(s))
    assert surf.split(loaded) == surf.split(s)


def test_filter_keeps_what_used_functions_reach(surface: surf.Surface) -> None:
    f = surf.filter_surface(surface, {"ex_batch_init", "ex_print", "EX_VOCAB_SPM", "printf"})
    assert set(f["functions"]) == {"ex_batch_init", "ex_print"}
    assert set(f["enums"]) == {"ex_vocab_type"}
    assert f["constants"] == surface["constants"]
    assert f["used"] == ["EX_VOCAB_SPM", "ex_batch_init", "ex_print"]
    g = surf.filter_surface(surface, {"ex_params"})
    assert set(g["structs"]) == {"ex_params"}
    assert set(g["typedefs"]) == {"ex_progress_callback"}
    assert set(g["enums"]) == {"ex_vocab_type"}


def test_parse_error_is_an_abi_error(tmp_path: Path) -> None:
    write_tree(tmp_path, "#include <pthread.h>\n")
    with pytest.raises(AbiError, match=r"pthread\.h"):
        snap(tmp_path, ("x86_64-linux-gnu",))


def test_missing_header_is_an_abi_error(tmp_path: Path) -> None:
    with pytest.raises(AbiError, match="not found"):
        snapshot_headers(tmp_path, ["include/nope.h"], [], ("x86_64-linux-gnu",))


def test_constant_headers_contribute_macros_only(tmp_path: Path) -> None:
    write_tree(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "impl.h").write_text("#define EX_BACKEND_API_VERSION 2\nint ex_internal(void);\n")
    s = snapshot_headers(tmp_path, ["include/ex.h"], ["include", "dep"], ("x86_64-linux-gnu",),
                         constant_headers=["src/impl.h"])
    assert s["constants"]["EX_BACKEND_API_VERSION"] == 2
    assert "ex_internal" not in s["functions"]


def test_evaluate_macros() -> None:
    got = evaluate_macros({"A": ["0x10u"], "B": ["(", "A", "*", "2", ")"], "C": ["B"], "D": ["foo"],
                           "E": ['"s"'], "F": ["F"], "G": ["010"]})
    assert got == {"A": 16, "B": 32, "C": 32, "E": "s", "G": 8}
