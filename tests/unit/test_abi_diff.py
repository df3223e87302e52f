"""Diff: every change class is caught on synthetic header pairs, in the documented line style."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.abi import surface as surf
from harness.abi.diff import diff, diff_surfaces, fmt, render_markdown
from harness.abi.snapshot import snapshot_headers

BASE = """\
#include <stdint.h>
#include <stdbool.h>
#define GGML_BACKEND_API_VERSION 1
#define GGUF_MAGIC "GGUF"
enum llama_vocab_type { LLAMA_VOCAB_TYPE_NONE = 0, LLAMA_VOCAB_TYPE_RWKV = 5 };
struct llama_batch { int32_t n_tokens; int32_t * token; };
struct llama_context_params {
    uint32_t n_ctx;
    uint32_t n_batch;
    bool     flash_attn;
    float    rope_freq_base;
};
typedef int32_t llama_token;
struct llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
int32_t llama_n_ctx(const struct llama_context_params * p);
void llama_old(void);
"""

ONE = ("x86_64-linux-gnu",)


def snap(tmp_path: Path, name: str, text: str, targets: Sequence[str] = ONE) -> surf.Surface:
    root = tmp_path / name
    root.mkdir()
    (root / "api.h").write_text(text)
    return snapshot_headers(root, ["api.h"], [], targets)


def lines(tmp_path: Path, old: str, new: str, targets: Sequence[str] = ONE) -> list[str]:
    return diff_surfaces(snap(tmp_path, "a", old, targets), snap(tmp_path, "b", new, targets))


def test_unchanged_header_gives_no_diff_and_same_fingerprint(tmp_path: Path) -> None:
    a = snap(tmp_path, "a", BASE, surf.DEFAULT_TARGETS)
    b = snap(tmp_path, "b", BASE, surf.DEFAULT_TARGETS)
    assert diff_surfaces(a, b) == []
    assert a["fingerprint"] == b["fingerprint"]
    assert a["fingerprints"] == b["fingerprints"]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param("    bool     flash_attn;\n", "", ["llama_context_params.flash_attn: removed",
                     "llama_context_params.rope_freq_base: offset 12 -> 8",
                     "llama_context_params: size 16 -> 12"], id="field-removed"),
        pytest.param("    float    rope_freq_base;\n", "    float    rope_freq_base;\n    int32_t  flash_attn_type;\n",
                     ["llama_context_params.flash_attn_type: added at offset 16 (int32_t)",
                      "llama_context_params: size 16 -> 20"], id="field-added"),
        pytest.param("bool     flash_attn;", "bool     use_flash;",
                     ["llama_context_params.flash_attn: renamed to use_flash"], id="field-renamed"),
        pytest.param("uint32_t n_batch;", "int32_t n_batch;",
                     ["llama_context_params.n_batch: type uint32_t -> int32_t"], id="field-retyped"),
        pytest.param("    uint32_t n_ctx;\n    uint32_t n_batch;\n", "    uint32_t n_batch;\n    uint32_t n_ctx;\n",
                     ["llama_context_params: fields reordered at unchanged size 16 (n_ctx, n_batch -> n_batch, n_ctx)",
                      "llama_context_params.n_ctx: offset 0 -> 4",
                      "llama_context_params.n_batch: offset 4 -> 0"], id="fields-reordered-same-size"),
        pytest.param("void llama_old(void);\n", "", ["llama_old: removed"], id="function-removed"),
        pytest.param("void llama_old(void);\n", "void llama_old(void);\nvoid llama_new(int x);\n",
                     ["llama_new: added"], id="function-added"),
        pytest.param("int32_t llama_n_ctx(", "uint32_t llama_n_ctx(",
                     ["llama_n_ctx: return int32_t -> uint32_t"], id="function-return-retyped"),
        pytest.param("int32_t embd,", "int64_t embd,",
                     ["llama_batch_init: parameter 2 int32_t -> int64_t"], id="function-parameter-retyped"),
        pytest.param("(int32_t n_tokens, int32_t embd,", "(int32_t n_tokens,",
                     ["llama_batch_init: parameter 2 removed (int32_t embd)"], id="function-parameter-removed"),
        pytest.param("LLAMA_VOCAB_TYPE_RWKV = 5", "LLAMA_VOCAB_TYPE_RWKV = 6",
                     ["enum llama_vocab_type: LLAMA_VOCAB_TYPE_RWKV 5 -> 6"], id="enum-renumbered"),
        pytest.param("LLAMA_VOCAB_TYPE_RWKV = 5", "LLAMA_VOCAB_TYPE_RWKV = 5, LLAMA_VOCAB_TYPE_UGM = 6",
                     ["enum llama_vocab_type: LLAMA_VOCAB_TYPE_UGM added (6)"], id="enum-constant-added"),
        pytest.param("GGML_BACKEND_API_VERSION 1", "GGML_BACKEND_API_VERSION 2",
                     ["GGML_BACKEND_API_VERSION 1 -> 2"], id="constant-bumped"),
        pytest.param('"GGUF"', '"GGUG"', ['GGUF_MAGIC "GGUF" -> "GGUG"'], id="string-constant-changed"),
        pytest.param("typedef int32_t llama_token;", "typedef int64_t llama_token;",
                     ["typedef llama_token: int32_t -> int64_t"], id="typedef-retyped"),
        pytest.param("void llama_old(void);", "__attribute__((deprecated)) void llama_old(void);",
                     ["llama_old: deprecated"], id="function-deprecated"),
    ],
)
def test_change_classes(tmp_path: Path, old: str, new: str, expected: list[str]) -> None:
    assert old in BASE
    assert sorted(lines(tmp_path, BASE, BASE.replace(old, new))) == sorted(expected)


def test_struct_added_and_removed(tmp_path: Path) -> None:
    new = BASE.replace("struct llama_batch { int32_t n_tokens; int32_t * token; };\n", "") \
        .replace("struct llama_batch llama_batch_init", "struct llama_batch * llama_batch_init") \
        + "struct llama_extra { char c; };\n"
    got = lines(tmp_path, BASE, new)
    assert "struct llama_batch: removed" in got
    assert "struct llama_extra: added (size 1)" in got
    assert "llama_batch_init: return struct llama_batch -> struct llama_batch *" in got


def test_size_change_on_one_target_names_the_target(tmp_path: Path) -> None:
    old = BASE + "struct llama_model_params { int32_t n_gpu_layers; long n_threads; };\n"
    new = old.replace("long n_threads", "long long n_threads")
    targets = ("x86_64-linux-gnu", "i686-linux-gnu")
    got = lines(tmp_path, old, new, targets)
    # `long` is 4 bytes on i686: only there does the struct grow (8 -> 12).
    assert sorted(got) == sorted([
        "llama_model_params.n_threads: type long -> long long",
        "llama_model_params: size 8 -> 12 on i686-linux-gnu",
    ])


def test_size_change_only_on_darwin(tmp_path: Path) -> None:
    old = BASE + "struct llama_model_params { double scale; long double big; };\n"
    new = old.replace("long double big", "double big")
    got = lines(tmp_path, old, new, surf.DEFAULT_TARGETS)
    # long double is 16 bytes on x86_64/aarch64 Linux and 8 on arm64 macOS: only Linux layouts move.
    assert "llama_model_params: size 32 -> 16 on x86_64-linux-gnu, aarch64-linux-gnu" in got
    assert "llama_model_params.big: type long double -> double" in got
    assert not any(line.endswith("arm64-apple-darwin") for line in got)


def test_target_added(tmp_path: Path) -> None:
    a = snap(tmp_path, "a", BASE, ONE)
    b = snap(tmp_path, "b", BASE, (*ONE, "aarch64-linux-gnu"))
    assert diff_surfaces(a, b) == ["target aarch64-linux-gnu: added"]


def test_markdown_groups(tmp_path: Path) -> None:
    new = BASE.replace("GGML_BACKEND_API_VERSION 1", "GGML_BACKEND_API_VERSION 2") \
        .replace("LLAMA_VOCAB_TYPE_RWKV = 5", "LLAMA_VOCAB_TYPE_RWKV = 6") \
        .replace("void llama_old(void);\n", "") \
        .replace("bool     flash_attn;", "int32_t  flash_attn_type;")
    changes = diff(snap(tmp_path, "a", BASE), snap(tmp_path, "b", new))
    md = render_markdown(changes, old="0.3.16", new="0.3.36")
    assert md.startswith("## ABI/API changes: 0.3.16 -> 0.3.36")
    order = [md.index(h) for h in ("### Functions", "### Structs", "### Enums", "### Constants")]
    assert order == sorted(order)
    assert "- `GGML_BACKEND_API_VERSION 1 -> 2`" in md
    assert "**Removed (1)**" in md
    assert "No differences." in render_markdown([], old="a", new="b")


def test_fmt() -> None:
    assert fmt(0x6767736E) == "0x6767736e"
    assert fmt(3) == "3"
    assert fmt("GGUF") == '"GGUF"'
