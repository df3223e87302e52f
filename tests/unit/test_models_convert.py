from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from harness.core.errors import HostError, ModelError, SubprocessError
from harness_plugins.llamacpp import convert
from harness_plugins.llamacpp.convert import (
    check_hf_dir,
    convert_hf_dir,
    converted_path,
    dir_digest,
    ensure_converted,
)

# A stand-in for convert_hf_to_gguf.py: writes a GGUF-looking file, counts its runs,
# and fails on demand, so the caching and error paths run without torch.
FAKE_CONVERTER = textwrap.dedent("""\
    import os, sys
    args = sys.argv[1:]
    out = args[args.index("--outfile") + 1]
    model = args[0]
    with open(os.path.join(os.path.dirname(out), "runs.log"), "a") as f:
        f.write(model + " " + args[args.index("--outtype") + 1] + "\\n")
    if os.path.exists(os.path.join(model, "FAIL")):
        print("Traceback: NotImplementedError: architecture 'Weird' not supported", file=sys.stderr)
        sys.exit(3)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0].endswith("gguf-py")
    with open(out, "wb") as f:
        f.write(b"GGUF" + open(os.path.join(model, "config.json"), "rb").read())
""")


@pytest.fixture
def engine_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tree = tmp_path / "tree"
    (tree / "gguf-py" / "gguf").mkdir(parents=True)
    (tree / "gguf-py" / "gguf" / "__init__.py").write_text("")
    (tree / "convert_hf_to_gguf.py").write_text(FAKE_CONVERTER)
    monkeypatch.setattr(convert, "CONVERTER_MODULES", ())  # the fake needs no torch
    return tree


def _hf_dir(root: Path, *, config: bool = True, weights: str | None = "model.safetensors") -> Path:
    root.mkdir(parents=True)
    if config:
        (root / "config.json").write_text('{"architectures": ["BertModel"]}')
    if weights:
        (root / weights).write_bytes(b"\0" * 16)
    (root / "vocab.txt").write_text("[PAD]\n")
    return root


def _runs(cache: Path) -> list[str]:
    log = cache / "models" / "converted" / "runs.log"
    return log.read_text().splitlines() if log.exists() else []


def test_refuses_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        check_hf_dir(tmp_path / "nope")


def test_refuses_a_file(tmp_path: Path) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF")
    with pytest.raises(ModelError, match=r"is a file.*loads directly"):
        check_hf_dir(f)


def test_refuses_dir_without_config(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"no config\.json"):
        check_hf_dir(_hf_dir(tmp_path / "m", config=False))


def test_refuses_bin_only_dir(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"no \*\.safetensors.*pytorch_model\.bin"):
        check_hf_dir(_hf_dir(tmp_path / "m", weights="pytorch_model.bin"))


def test_refusal_comes_before_the_converter(cache: Path, tmp_path: Path, engine_tree: Path) -> None:
    with pytest.raises(ModelError):
        convert_hf_dir(_hf_dir(tmp_path / "m", config=False), engine_tree=engine_tree)
    assert _runs(cache) == []


def test_converts_once_and_caches_by_content(cache: Path, tmp_path: Path, engine_tree: Path) -> None:
    model = _hf_dir(tmp_path / "m")
    out, now = ensure_converted(model, engine_tree=engine_tree)
    assert now and out.read_bytes().startswith(b"GGUF")
    assert out.parent == cache / "models" / "converted"
    assert out.with_suffix(".json").is_file()
    again, now = ensure_converted(model, engine_tree=engine_tree)
    assert (again, now) == (out, False)
    assert len(_runs(cache)) == 1, "a second call is a cache hit"
    # The same content elsewhere is the same conversion; changed content is a new one.
    copy = _hf_dir(tmp_path / "copy")
    assert convert_hf_dir(copy, engine_tree=engine_tree) == out
    (copy / "config.json").write_text('{"architectures": ["BertModel"], "x": 1}')
    assert convert_hf_dir(copy, engine_tree=engine_tree) != out
    assert len(_runs(cache)) == 2
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "no temp file left"


def test_outtype_and_converter_are_part_of_the_key(cache: Path, tmp_path: Path, engine_tree: Path) -> None:
    model = _hf_dir(tmp_path / "m")
    f16 = converted_path(model, engine_tree=engine_tree, outtype="f16")
    f32 = converted_path(model, engine_tree=engine_tree, outtype="f32")
    assert f16 != f32
    (engine_tree / "gguf-py" / "gguf" / "__init__.py").write_text("# another pin\n")
    assert converted_path(model, engine_tree=engine_tree, outtype="f16") != f16


def test_failed_conversion_shows_command_and_output(cache: Path, tmp_path: Path, engine_tree: Path) -> None:
    model = _hf_dir(tmp_path / "m")
    (model / "FAIL").write_text("")
    with pytest.raises(SubprocessError) as e:
        convert_hf_dir(model, engine_tree=engine_tree)
    assert e.value.returncode == 3
    assert "convert_hf_to_gguf.py" in str(e.value) and "architecture 'Weird'" in str(e.value)
    assert not list((cache / "models" / "converted").glob("*.gguf")), "nothing half-written is cached"


def test_unsupported_outtype_and_missing_converter(tmp_path: Path, engine_tree: Path) -> None:
    model = _hf_dir(tmp_path / "m")
    with pytest.raises(ModelError, match="unsupported outtype"):
        convert_hf_dir(model, engine_tree=engine_tree, outtype="q2_k")
    with pytest.raises(ModelError, match=r"convert_hf_to_gguf\.py"):
        convert_hf_dir(model, engine_tree=tmp_path / "empty")


def test_missing_torch_is_a_host_error_with_the_install_hint(
        cache: Path, tmp_path: Path, engine_tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(convert, "CONVERTER_MODULES", ("harness_surely_absent_module",))
    with pytest.raises(HostError, match=r"harness\[convert\]"):
        convert_hf_dir(_hf_dir(tmp_path / "m"), engine_tree=engine_tree)


def test_dir_digest_sees_names_and_contents(tmp_path: Path) -> None:
    a = _hf_dir(tmp_path / "a")
    b = _hf_dir(tmp_path / "b")
    assert dir_digest(a) == dir_digest(b)
    (b / "vocab.txt").rename(b / "vocab2.txt")
    assert dir_digest(a) != dir_digest(b)


def test_runs_under_this_interpreter(cache: Path, tmp_path: Path, engine_tree: Path) -> None:
    out = convert_hf_dir(_hf_dir(tmp_path / "m"), engine_tree=engine_tree)
    meta = out.with_suffix(".json").read_text()
    assert sys.executable in meta
