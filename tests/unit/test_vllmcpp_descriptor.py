"""The vllm.cpp engine's data: its pin (a local archive of upstream d85906ae), what its rows mean,
and its C ABI (``include/vllm.h``, ``VLLM_ABI_VERSION``) checked against the committed surface
before any build: a changed ``VLLM_ABI_VERSION`` is refused, by ``harness abi check`` and by
``harness build`` before it configures anything."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from harness.abi.check import check_tree, load_committed
from harness.build.matrix import load_matrix
from harness.build.pipeline import rows_for
from harness.cli import main
from harness.core.errors import AbiError
from harness.core.types import EngineSpec
from harness.engine.descriptor import ENGINES_PATH_ENV, load_engine

NAME = "vllmcpp"
COMMIT = "d85906ae589661f8321ff393d24bef9d31f4214f"
HEADER = "vllm.cpp-d85906ae/include/vllm.h"


@pytest.fixture(scope="module")
def spec() -> EngineSpec:
    return load_engine(NAME)


def _archive() -> Path:
    path = Path(load_engine(NAME).source.path)
    if not path.is_file():
        pytest.skip(f"the pinned vllm.cpp archive is not beside the project ({path}; ../shared/sources/README.md)")
    return path


def _header_text() -> str:
    with tarfile.open(_archive()) as tf:
        f = tf.extractfile(HEADER)
        assert f is not None
        return f.read().decode()


def _tree(root: Path, text: str) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "vllm.h").write_text(text)
    return root


def test_the_pin_is_the_local_archive_of_upstream_d85906ae(spec: EngineSpec) -> None:
    src = spec.source
    assert src.kind == "local-archive"
    assert src.path.endswith("/shared/sources/vllm.cpp-d85906ae.tar.gz") and Path(src.path).is_absolute()
    assert src.sha256 == "ec49c571974888db693d8bbf859598e95ab98c01e388f4393a9ba5b8378d2967"
    assert (src.url, src.commit) == ("https://github.com/mudler/vllm.cpp", COMMIT)
    assert spec.pin == COMMIT[:12] and spec.upstream["commit"] == COMMIT[:8]


def test_only_the_cpu_row_is_built_and_it_sets_no_march(spec: EngineSpec) -> None:
    choice = rows_for(spec, matrix=load_matrix())
    assert [v.name for v in choice.rows] == ["cpu"]
    skipped = {v.name: why for v, why in choice.skipped}
    assert "cpu-native" in skipped and "cuda" in skipped
    # cpu_levels: runtime is upstream's default build: no define, no -march, every GPU platform off.
    assert spec.intents["cpu_levels"]["runtime"] == {}
    assert "native" not in spec.intents["cpu_levels"]
    base = spec.cmake["base"]
    assert {base[k] for k in ("VLLM_CPP_CUDA", "VLLM_CPP_METAL", "VLLM_CPP_VULKAN")} == {"OFF"}
    assert not any("-march" in str(v) for v in base.values())
    assert spec.targets == ("vllm_shared", "vllm-cli")


def test_the_committed_surface_is_the_c_abi_at_version_5(spec: EngineSpec) -> None:
    surface = load_committed(NAME, spec.surface_path)
    assert spec.abi["version_macro"] == "VLLM_ABI_VERSION"
    assert surface["constants"]["VLLM_ABI_VERSION"] == 5
    functions = set(surface["functions"])
    # what the binding calls, and only vllm_* names
    assert {"vllm_abi_version", "vllm_engine_load", "vllm_request_submit", "vllm_request_cancel",
            "vllm_complete", "vllm_chat"} <= functions
    assert all(f.startswith("vllm_") for f in functions)
    assert set(surface["targets"]) == {"x86_64-linux-gnu", "aarch64-linux-gnu", "arm64-apple-darwin"}


def test_a_changed_abi_version_in_a_copy_of_the_header_is_refused(spec: EngineSpec, tmp_path: Path) -> None:
    text = _header_text()
    assert "#define VLLM_ABI_VERSION 5\n" in text
    ok = check_tree(NAME, _tree(tmp_path / "pinned", text), spec.abi, committed_path=spec.surface_path)
    assert ok.declared_version == 5
    bumped = text.replace("#define VLLM_ABI_VERSION 5\n", "#define VLLM_ABI_VERSION 6\n")
    with pytest.raises(AbiError) as e:
        check_tree(NAME, _tree(tmp_path / "bumped", bumped), spec.abi, committed_path=spec.surface_path)
    lines = str(e.value).splitlines()
    assert lines[1] == "the engine's declared ABI version moved from 5 to 6 (VLLM_ABI_VERSION)"


def test_a_field_appended_to_a_struct_is_refused(spec: EngineSpec, tmp_path: Path) -> None:
    text = _header_text().replace("  int32_t structured_json_object;       /* 0/1: schema-free JSON-object mode. */",
                                  "  int32_t structured_json_object;\n  int32_t n_logprobs;")
    with pytest.raises(AbiError, match=r"vllm_sampling_params\.n_logprobs: added at offset"):
        check_tree(NAME, _tree(tmp_path / "grown", text), spec.abi, committed_path=spec.surface_path)


PATCH_HEADER = """\
Subject: test: bump VLLM_ABI_VERSION without updating the binding
Why: A pin move that changes the C ABI must be refused before anything is compiled.
Upstream: never
Retire-when: never (a test fixture)
---
"""


def _bump_patch(text: str) -> str:
    """A unified diff (3 lines of context, as git writes it) turning VLLM_ABI_VERSION 5 into 6."""
    lines = text.splitlines()
    i = lines.index("#define VLLM_ABI_VERSION 5")
    before, after = lines[i - 3:i], lines[i + 1:i + 4]
    body = [*(f" {x}" for x in before), "-#define VLLM_ABI_VERSION 5", "+#define VLLM_ABI_VERSION 6",
            *(f" {x}" for x in after)]
    n = len(before) + 1 + len(after)
    return (PATCH_HEADER + "diff --git a/include/vllm.h b/include/vllm.h\n--- a/include/vllm.h\n+++ b/include/vllm.h\n"
            + f"@@ -{i - 2},{n} +{i - 2},{n} @@\n" + "\n".join(body) + "\n")


def test_harness_refuses_a_bumped_abi_version_before_building(spec: EngineSpec, tmp_path: Path, cache: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    archive = _archive()
    project = tmp_path / "project"
    shutil.copytree(spec.root, project / "engines" / NAME, ignore=shutil.ignore_patterns("binding", "plugin", "e2e", "__pycache__"))
    descriptor = project / "engines" / NAME / "engine.yaml"
    descriptor.write_text(descriptor.read_text().replace("path: ../shared/sources/vllm.cpp-d85906ae.tar.gz",
                                                         f"path: {archive}"))
    (project / "engines" / NAME / "patches").mkdir(parents=True)
    (project / "engines" / NAME / "patches" / "0001-bump-abi-version.patch").write_text(_bump_patch(_header_text()))
    (project / "engines" / NAME / "abi").mkdir(parents=True, exist_ok=True)
    shutil.copy2(spec.surface_path, project / "engines" / NAME / "abi" / "surface.json")
    monkeypatch.setenv(ENGINES_PATH_ENV, str(project / "engines"))

    assert main(["abi", "check", NAME]) == 7
    err = capsys.readouterr().err
    assert "declared ABI version moved from 5 to 6 (VLLM_ABI_VERSION)" in err
    assert main(["build", NAME, "--variant", "cpu"]) == 7
    assert "VLLM_ABI_VERSION" in capsys.readouterr().err
    assert not list((cache / "work").glob("*/build/*")), "nothing was configured or compiled"

