"""Class 4 of issue 58: recipe content parsed on the host.

An untrusted recipe's headers (and its binding's sources) are code-shaped input: libclang follows every
``#include`` they name. Its ABI parse runs in the sandbox (:mod:`harness.abi.sandboxed`), where only the
patched tree, the system include dirs and this Python are visible, under a memory and time limit; the
descriptor's ``abi`` paths are relative and never climb (refused when it loads); the binding source hash
follows no link and reads no file past its limit. Each test is a hostile tiny recipe
(:mod:`tests.unit.hostile_engine`) run through the installed CLI where it can be.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.errors import AbiError, ConfigError
from tests.unit import hostile_engine

pytestmark = [
    pytest.mark.skipif(not all(shutil.which(t) for t in ("git", "cmake", "ninja", "cc")),
                       reason="needs git, cmake, ninja and a C compiler (bash scripts/install-system-deps.sh)"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (bash scripts/install-system-deps.sh)"),
]

#: What the host file holds: a C declaration, so a parse that read it would name it in its error.
TOKEN = "issue58_host_secret_7c41"


def _include_patch(recipe: hostile_engine.Recipe, target: str) -> None:
    """A patch of the recipe's series that makes ``include/tiny.h`` include ``target``."""
    recipe.patch("0002-tiny-include.patch", "\n".join([
        "Subject: tiny: include one more header",
        "Why: a hostile recipe's header names a file of the host",
        "Upstream: never",
        "Retire-when: never",
        "---",
        "diff --git a/include/tiny.h b/include/tiny.h",
        "--- a/include/tiny.h",
        "+++ b/include/tiny.h",
        "@@ -1,6 +1,7 @@",
        " #ifndef TINY_H",
        " #define TINY_H",
        " #include <stdint.h>",
        f'+#include "{target}"',
        " ",
        " #define TINY_ABI_VERSION 1",
        " ",
        "",
    ]))


@pytest.mark.parametrize(("field", "value"), [
    ("headers", "{outside}/secret.h"),
    ("headers", "../../../outside/secret.h"),
    ("constant_headers", "{outside}/secret.h"),
    ("include_dirs", "../.."),
    ("used_from", "{outside}"),
])
def test_absolute_or_climbing_abi_paths_are_refused_when_the_descriptor_loads(
        tmp_path: Path, field: str, value: str) -> None:
    from harness.engine.descriptor import parse_engine

    recipe = hostile_engine.make(tmp_path)
    (recipe.outside / "secret.h").write_text(f"{TOKEN} x;\n")
    value = value.format(outside=recipe.outside)

    def change(data: dict[str, object]) -> None:
        abi = dict(data["abi"])  # type: ignore[call-overload]
        abi[field] = value if field == "used_from" else [value]
        data["abi"] = abi

    recipe.edit_descriptor(change)
    with pytest.raises(ConfigError) as e:
        parse_engine(recipe.folder / "engine.yaml")
    assert f"engine.yaml:abi.{field}" in str(e.value)
    run = recipe.harness("abi", "check", "tiny", "--c-only")
    assert run.returncode == ConfigError.exit_code, run.output
    assert TOKEN not in run.output


def test_a_header_including_a_host_file_does_not_read_it(tmp_path: Path) -> None:
    recipe = hostile_engine.make(tmp_path)
    secret = recipe.outside / "secret-header.h"
    secret.write_text(f"{TOKEN} x;\n")
    _include_patch(recipe, str(secret))
    run = recipe.harness("abi", "check", "tiny", "--c-only")
    assert run.returncode == AbiError.exit_code, run.output
    assert TOKEN not in run.output
    # the sandbox does not show the file: libclang never opened it
    assert "file not found" in run.output, run.output
    run = recipe.harness("abi", "check", "tiny", "--c-only", "--json")
    assert TOKEN not in run.output


def test_a_fifo_include_does_not_hang(tmp_path: Path) -> None:
    recipe = hostile_engine.make(tmp_path)
    fifo = recipe.outside / "fifo.h"
    os.mkfifo(fifo)
    _include_patch(recipe, str(fifo))
    t0 = time.monotonic()
    run = recipe.harness("abi", "check", "tiny", "--c-only", timeout=90)  # before: waits on the FIFO for ever
    assert run.returncode == AbiError.exit_code, run.output
    assert "file not found" in run.output, run.output
    assert time.monotonic() - t0 < 90


def test_a_dev_zero_include_stays_within_the_memory_limit(tmp_path: Path) -> None:
    recipe = hostile_engine.make(tmp_path)
    _include_patch(recipe, "/dev/zero")

    # before: libclang read /dev/zero until the host ran out of memory; the harness runs under a cap here
    capped = [sys.executable, "-c", "import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30)); "
              "os.execv(sys.argv[1], sys.argv[1:])"]
    r = subprocess.run([*capped, *hostile_engine.harness_exe(), "abi", "check", "tiny", "--c-only"], env=recipe.env(),
                       cwd=recipe.scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                       check=False)
    assert r.returncode == AbiError.exit_code, r.stdout
    assert "Traceback" not in r.stdout
    from harness.abi.sandboxed import MEMORY_LIMIT

    # the sandboxed parse's own cap stopped it, below the one it was given
    assert f"memory is capped at {MEMORY_LIMIT >> 30} GiB" in r.stdout, r.stdout


def _binding(recipe: hostile_engine.Recipe) -> Path:
    source = recipe.folder / "binding"
    source.mkdir()
    (source / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.21)\nproject(tiny_binding CXX)\n")
    (source / "module.cpp").write_text("int tiny_binding(void) { return 1; }\n")
    return source


@pytest.mark.parametrize("kind", ["pagemap", "host-file", "huge", "fifo"])
def test_the_binding_source_hash_follows_no_link_and_reads_nothing_huge(tmp_path: Path, kind: str) -> None:
    from harness.abi.binding import binding_sources_hash

    recipe = hostile_engine.make(tmp_path)
    source = _binding(recipe)
    bad = source / "src" / "evil.cpp"
    bad.parent.mkdir()
    if kind == "pagemap":
        bad.symlink_to("/proc/self/pagemap")
    elif kind == "host-file":
        bad.symlink_to(recipe.outside / "secret")
    elif kind == "huge":
        with open(bad, "wb") as f:
            f.truncate(3 << 30)  # sparse: 3 GB that were never written
    else:
        os.mkfifo(bad)
    t0 = time.process_time()
    with pytest.raises(AbiError) as e:
        binding_sources_hash(source)
    assert "src/evil.cpp" in str(e.value)
    assert time.process_time() - t0 < 5  # refused by its size or kind, not read
    if kind != "huge":
        assert "is a symbolic link" in str(e.value) or "not a regular file" in str(e.value)


def test_abi_check_refuses_a_binding_source_linked_to_a_host_file(tmp_path: Path) -> None:
    recipe = hostile_engine.make(tmp_path)
    source = _binding(recipe)
    (source / "host.cpp").symlink_to(recipe.outside / "secret")
    run = recipe.harness("abi", "check", "tiny")
    assert run.returncode == AbiError.exit_code, run.output
    assert "binding/host.cpp" in run.output and "is a symbolic link" in run.output, run.output
    assert hostile_engine.SECRET not in run.output


def _tree(tmp_path: Path) -> Path:
    from tests.unit.test_third_engine import HEADER

    (tmp_path / "tree" / "include").mkdir(parents=True)
    (tmp_path / "tree" / "include" / "tiny.h").write_text(HEADER)
    return tmp_path / "tree"


def test_the_sandboxed_parse_gives_the_surface_the_host_parse_gives(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.abi.check import snapshot_config
    from harness.engine.descriptor import parse_engine

    monkeypatch.delenv("HARNESS_TRUST", raising=False)
    monkeypatch.delenv("HARNESS_NO_SANDBOX", raising=False)
    spec = parse_engine(hostile_engine.make(tmp_path).folder / "engine.yaml")
    tree = _tree(tmp_path)
    assert snapshot_config(tree, spec.abi, recipe=spec) == snapshot_config(tree, spec.abi)


def test_without_bubblewrap_an_untrusted_recipe_is_not_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.abi.check import snapshot_config
    from harness.engine.descriptor import parse_engine
    from harness.sandbox import bwrap

    monkeypatch.delenv("HARNESS_TRUST", raising=False)
    monkeypatch.delenv("HARNESS_NO_SANDBOX", raising=False)
    monkeypatch.setattr(bwrap, "unavailable", lambda: "bubblewrap (bwrap) is not installed")
    spec = parse_engine(hostile_engine.make(tmp_path).folder / "engine.yaml")
    tree = _tree(tmp_path)
    with pytest.raises(bwrap.SandboxError, match="--no-sandbox"):
        snapshot_config(tree, spec.abi, recipe=spec)
    monkeypatch.setenv("HARNESS_NO_SANDBOX", "1")  # the user read the recipe: parsed here
    assert "tiny_apply" in snapshot_config(tree, spec.abi, recipe=spec)["functions"]


def test_a_binding_unit_including_a_host_file_does_not_read_it(tmp_path: Path) -> None:
    """``abi snapshot`` records the C++ the binding uses with libclang over the binding's own units, compiled as
    its CMake project (the recipe's code) says: for an untrusted recipe, in the sandbox."""
    recipe = hostile_engine.make(tmp_path)
    secret = recipe.outside / "secret-unit.h"
    secret.write_text(f"{TOKEN} x;\n")
    source = recipe.folder / "binding"
    (source / "src").mkdir(parents=True)
    (source / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\nproject(tiny_binding CXX)\n"
        "add_library(_core MODULE src/module.cpp)\n"
        "target_include_directories(_core PRIVATE ${HARNESS_ARTIFACT}/include)\n")
    (source / "src" / "module.cpp").write_text(
        f'#include "tiny.h"\n#include "{secret}"\nint tiny_binding() {{ return tiny_abi_version(); }}\n')
    run = recipe.harness("abi", "snapshot", "tiny")
    assert run.returncode == AbiError.exit_code, run.output
    assert TOKEN not in run.output
    assert "file not found" in run.output, run.output
