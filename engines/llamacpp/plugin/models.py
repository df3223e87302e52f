"""What a model path may be: a ``.gguf`` file (header checked) or a HF dir (converted once)."""

from __future__ import annotations

from pathlib import Path

from harness.core.errors import ModelError

MAX_GGUF_VERSION = 3


def check_gguf(path: Path) -> dict[str, object]:
    """Read the GGUF header within limits; refuse bad magic, version > 3, crafted counts, truncation."""
    from harness.config.gguf_header import read_header
    from harness.core.inputs import open_input

    with open_input(path, kind="gguf-header", error=ModelError, head=True) as f:
        head = f.read(8)
    if len(head) < 8 or head[:4] != b"GGUF":
        raise ModelError(f"{path} is not a GGUF file (bad magic {head[:4]!r}, expected b'GGUF')")
    version = int.from_bytes(head[4:8], "little")
    if version > MAX_GGUF_VERSION:
        raise ModelError(f"{path} is GGUF version {version}; this engine reads versions <= {MAX_GGUF_VERSION}")
    # every count and length checked before it is used, the tensor table against the file's size
    header = read_header(path)
    arch = header.metadata.get("general.architecture")
    if not arch:
        raise ModelError(f"{path} has no general.architecture key")
    return {"version": version, "architecture": arch, "tensors": header.tensor_count}


def resolve_model(path: Path) -> Path:
    """The GGUF file to load for ``path``; HF directories are converted once and cached."""
    if not path.exists():
        raise ModelError(f"model not found: {path}")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} is a directory without config.json: not a Hugging Face model dir")
        if not any(path.glob("*.safetensors")):
            raise ModelError(f"{path} has config.json but no *.safetensors weights (only safetensors are converted)")
        from harness.build.pipeline import patched_tree
        from harness_plugins.llamacpp.convert import convert_hf_dir

        return resolve_model(convert_hf_dir(path, engine_tree=patched_tree("llamacpp").path))
    if path.suffix != ".gguf":
        raise ModelError(f"{path} is neither a .gguf file nor a Hugging Face model directory")
    if not path.resolve().is_file():  # a FIFO or device named .gguf would block the loader forever
        raise ModelError(f"{path} is not a regular file (a FIFO, socket or device?): expected a .gguf file")
    check_gguf(path)
    return path
