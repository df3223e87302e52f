"""A Hugging Face safetensors directory -> GGUF, with the pinned engine's own converter, once.

The converter (``convert_hf_to_gguf.py``) and its ``gguf-py`` come from the same
patched source tree as the build, so the GGUF matches what the engine loads. They run
without byte code: a tree that holds any is refused, and none is written into it
(:func:`harness.source.cache.python_env`, ``-B``), so only sources the manifest vouches for run. The
result is cached under ``models/converted/`` by a content hash of the directory,
the output type and the converter's own sources: a second call is a lookup.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from filelock import FileLock

from harness.core import paths, progress
from harness.core.errors import HostError, ModelError, SubprocessError
from harness.source.cache import python_env, refuse_byte_code

#: What the pinned converter writes for BERT-like and llama-like models alike.
OUTTYPES = ("f32", "f16", "bf16", "q8_0")
DEFAULT_OUTTYPE = "f16"
CONVERTER = "convert_hf_to_gguf.py"
#: Imported by the converter before it looks at the model.
CONVERTER_MODULES = ("torch", "transformers", "safetensors", "numpy")
INSTALL_HINT = "pip install 'harness[convert]' (torch==2.13.0 is the CPU wheel; never let pip pick a CUDA build)"
_CHUNK = 1 << 20


def check_hf_dir(model_dir: Path) -> None:
    """Refuse anything but a directory with ``config.json`` and ``*.safetensors`` weights."""
    if not model_dir.exists():
        msg = f"model path {model_dir} does not exist; expected a Hugging Face directory or a .gguf file"
        raise ModelError(msg)
    if not model_dir.is_dir():
        hint = " (a .gguf file loads directly, without conversion)" if model_dir.suffix == ".gguf" else ""
        msg = (f"{model_dir} is a file, not a Hugging Face model directory with config.json and "
               f"*.safetensors{hint}")
        raise ModelError(msg)
    if not (model_dir / "config.json").is_file():
        msg = f"{model_dir} has no config.json; expected a Hugging Face model directory (config.json + *.safetensors)"
        raise ModelError(msg)
    if not any(model_dir.glob("*.safetensors")):
        pickles = sorted(p.name for p in model_dir.glob("*.bin")) + sorted(p.name for p in model_dir.glob("*.pt*"))
        found = f"found only {', '.join(pickles[:4])}" if pickles else "found no weights at all"
        msg = (f"{model_dir} has no *.safetensors weights ({found}). Only safetensors are converted: "
               "pickled PyTorch weights can run code when loaded. Save the model with safetensors first")
        raise ModelError(msg)


def _hash_files(root: Path, files: list[Path]) -> str:
    """sha256 over ``(relative path, size, content)`` of each file, in sorted path order."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        rel = f.relative_to(root).as_posix().encode()
        h.update(len(rel).to_bytes(8, "little") + rel + f.stat().st_size.to_bytes(8, "little"))
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                h.update(chunk)
    return h.hexdigest()


def dir_digest(model_dir: Path) -> str:
    """Content hash of every file under ``model_dir`` (symlinks followed, as HF snapshots use them)."""
    return _hash_files(model_dir, [p for p in model_dir.rglob("*") if p.is_file()])


def converter_digest(engine_tree: Path) -> str:
    """Hash of the converter's own sources: another pin or patch means another GGUF."""
    files = [engine_tree / CONVERTER]
    for sub in ("conversion", "gguf-py/gguf"):
        if (engine_tree / sub).is_dir():
            files += [p for p in (engine_tree / sub).rglob("*.py") if p.is_file()]
    return _hash_files(engine_tree, files)


def converted_path(model_dir: Path, *, engine_tree: Path, outtype: str = DEFAULT_OUTTYPE) -> Path:
    """Where the conversion of ``model_dir`` lands (or already lies)."""
    key = f"{dir_digest(model_dir)[:32]}-{outtype}-{converter_digest(engine_tree)[:12]}"
    return paths.models_dir() / "converted" / f"{key}.gguf"


def _check_converter(engine_tree: Path, outtype: str) -> Path:
    if outtype not in OUTTYPES:
        msg = f"unsupported outtype {outtype!r}; the converter writes {', '.join(OUTTYPES)}"
        raise ModelError(msg)
    script = engine_tree / CONVERTER
    if not script.is_file():
        msg = (f"{engine_tree} has no {CONVERTER}; expected the patched engine tree "
               "(harness.build.pipeline.patched_tree('llamacpp').path)")
        raise ModelError(msg)
    missing = [m for m in CONVERTER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        msg = f"converting to GGUF needs {', '.join(missing)} in this Python ({sys.executable}). {INSTALL_HINT}"
        raise HostError(msg)
    return script


def ensure_converted(model_dir: Path, *, engine_tree: Path,
                     outtype: str = DEFAULT_OUTTYPE) -> tuple[Path, bool]:
    """``(gguf, converted_now)``: convert ``model_dir`` unless the cache has it.

    Safe under concurrency (file lock) and interruption (the converter writes a
    temporary file that is renamed into place only after it succeeds).
    """
    model_dir = model_dir.expanduser().resolve()
    check_hf_dir(model_dir)
    script = _check_converter(engine_tree, outtype)
    out = converted_path(model_dir, engine_tree=engine_tree, outtype=outtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(paths.locks_dir() / f"convert-{out.stem}.lock")):
        if out.is_file():
            return out, False
        refuse_byte_code(engine_tree, hint="In the engine's patched working copy, `harness fetch --verify llamacpp` "
                                           "re-creates the copy without it; in any other tree, remove it.")
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out.stem}-", suffix=".gguf", dir=out.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        argv = [sys.executable, "-B", str(script), str(model_dir), "--outfile", str(tmp), "--outtype", outtype]
        env = python_env({
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(engine_tree / "gguf-py"), str(engine_tree)]),
            # Conversion is local: never let transformers reach for a hub.
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        })
        start = time.monotonic()
        try:
            with progress.spinner(f"convert {model_dir.name} to GGUF ({outtype})"):
                r = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if r.returncode != 0 or not _is_gguf(tmp):
                hint = "" if r.returncode else f"the converter exited 0 but {tmp.name} is not a GGUF file"
                raise SubprocessError(argv, r.returncode, r.stdout + r.stderr, hint=hint)
            tmp.chmod(0o644)  # mkstemp makes it private
            tmp.replace(out)
        finally:
            tmp.unlink(missing_ok=True)
        meta = {"source": str(model_dir), "outtype": outtype, "engine_tree": str(engine_tree),
                "command": argv, "seconds": round(time.monotonic() - start, 2), "converted_at": time.time()}
        out.with_suffix(".json").write_text(json.dumps(meta, indent=2))
        return out, True


def convert_hf_dir(model_dir: Path, *, engine_tree: Path, outtype: str = DEFAULT_OUTTYPE) -> Path:
    """The GGUF of a Hugging Face safetensors directory, converted once and cached.

    :raises ModelError: ``model_dir`` is not a directory with config.json + *.safetensors.
    :raises HostError: torch/transformers are not installed.
    :raises SubprocessError: the converter failed (command and output tail in the message).
    :raises SourceError: ``engine_tree`` holds byte code (never run in place of its sources).
    """
    return ensure_converted(model_dir, engine_tree=engine_tree, outtype=outtype)[0]


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False
