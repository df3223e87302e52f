"""Facts about a config's model files: format, quantization, architecture, context length.

Engines decide from these (the ``model`` argument of a registered engine's ``match``);
``config show`` takes n_ctx from them when the config leaves it unset. A GGUF's
facts come from its header (:mod:`harness.config.gguf_header`, bounded), a model directory's
from its ``config.json``; missing or unreadable files give partial facts, never
an exception.

Vocabulary (Xinference's): ``format`` is ``ggufv2`` for any GGUF file (its
header version is ``gguf_version``), ``safetensors`` / ``pytorch`` for a model
directory, ``gptq`` / ``awq`` / ``fp8`` for a quantized one, ``unknown`` otherwise;
``abilities`` lists ``known_usecases`` (default chat, completion).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from harness.config.localai import remote_scheme, vocabulary
from harness.config.model import ModelConfig
from harness.config.rules import path_problem

_QUANT = re.compile(r"(?i)(?:^|[-_.])((?:I?Q[1-8](?:_[0-9A-Z]+)*)|F16|BF16|F32)(?=[-_.]|$)")
_SIZE = re.compile(r"(?i)(?:^|[-_ ])(\d+(?:\.\d+)?[BM](?:-A\d+(?:\.\d+)?[BM])?)(?=[-_ .]|$)")


def gguf_header(path: Path) -> tuple[dict[str, Any] | None, str]:
    """Key/value metadata of a GGUF file (scalars and strings only), or (None, why it is unreadable).

    Read by :mod:`harness.config.gguf_header`: regular files only, every count and length bounded
    before it is used, so a FIFO, a device or a crafted header is a reason, never a hang.
    """
    from harness.config.gguf_header import read_header
    from harness.core.errors import ModelError

    try:
        return read_header(path).as_dict(), ""
    except ModelError as e:
        return None, str(e)


def read_gguf_header(path: Path) -> dict[str, Any] | None:
    """Key/value metadata of a GGUF file (scalars and strings only), or None when unreadable."""
    return gguf_header(path)[0]


def _file_type_name(code: Any) -> str | None:
    try:
        from gguf import LlamaFileType

        return LlamaFileType(int(code)).name.removeprefix("MOSTLY_")
    except (ValueError, TypeError, ImportError):
        return None


def quantization_from_name(name: str) -> str | None:
    """``Q4_K_M`` from ``SmolLM2-135M-Instruct.Q4_K_M.gguf``, else None."""
    m = _QUANT.search(Path(name).stem if name.endswith(".gguf") else name)
    return m.group(1).upper() if m else None


def size_from_name(name: str) -> str | None:
    """``135M`` / ``26B-A4B`` from a model name, else None."""
    m = _SIZE.search(Path(name).name)
    return m.group(1).upper() if m else None


GUESSED = "guessed like LocalAI"
#: What a config is for when neither known_usecases nor LocalAI's guess says (a text model).
DEFAULT_ABILITIES = ["chat", "completion"]


def guessed_usecases(config: ModelConfig) -> list[str]:
    """The use cases LocalAI's GuessUsecases finds in ``config`` (templates, flags, backend name:
    ``guess_usecases`` in localai.yaml)."""
    t = config.template
    out: list[str] = []
    if t is not None and (t.chat or t.chat_message):
        out.append("chat")
    if t is not None and t.completion:
        out.append("completion")
    if t is not None and t.edit:
        out.append("edit")
    if config.embeddings:
        out.append("embeddings")
    guesses = vocabulary().guess_usecases
    out += [case for case, backends in guesses.items() if config.backend in backends]
    return out


def abilities_with_source(config: ModelConfig) -> tuple[list[str], str]:
    """What the model is for and why: LocalAI's HasUsecases is known_usecases or its guess, so both
    count; when neither says anything, a text model (chat, completion) by this harness's default."""
    declared: list[str] = []
    for case in config.known_usecases:
        # LocalAI's `llm` is chat + completion + edit.
        declared += [c for c in (("chat", "completion", "edit") if case == "llm" else (case,))
                     if c not in declared]
    if config.reranking and "rerank" not in declared:
        declared.append("rerank")
    guessed = [c for c in guessed_usecases(config) if c not in declared]
    sources = [s for s, part in (("known_usecases", declared), (GUESSED, guessed)) if part]
    out = declared + guessed
    if not out:
        return list(DEFAULT_ABILITIES), "harness default (LocalAI guesses none)"
    return out, " + ".join(sources)


def abilities(config: ModelConfig) -> list[str]:
    """What the model is for (:func:`abilities_with_source` without the source)."""
    return abilities_with_source(config)[0]


def gguf_facts(path: Path) -> dict[str, Any]:
    """Facts from a GGUF header: architecture, context length, quantization, family, size."""
    header, error = gguf_header(path)
    if header is None:
        return {"format": "ggufv2", "readable": False, "error": error}
    arch = header.get("general.architecture")
    version = header.get("GGUF.version")
    facts: dict[str, Any] = {
        "format": "ggufv2",
        "readable": True,
        "gguf_version": version,
        "architecture": arch,
        "context_length": header.get(f"{arch}.context_length") if arch else None,
        "quantization": _file_type_name(header.get("general.file_type"))
        or quantization_from_name(path.name),
        "family": header.get("general.basename") or arch,
        "size": header.get("general.size_label") or size_from_name(path.name),
        "name": header.get("general.name"),
    }
    return facts


def directory_facts(path: Path) -> dict[str, Any]:
    """Facts from a model directory's ``config.json`` (safetensors / pytorch layout)."""
    from harness.core.errors import ModelError
    from harness.core.inputs import read_text

    try:
        cfg = json.loads(read_text(path / "config.json", kind="model-metadata", error=ModelError))
    except (ModelError, ValueError, RecursionError):
        return {"format": "directory", "readable": False}
    if not isinstance(cfg, dict):
        return {"format": "directory", "readable": False}
    quant = cfg.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    archs = cfg.get("architectures")
    has_st = any(path.glob("*.safetensors"))
    return {
        "format": method if method in ("gptq", "awq", "fp8") else ("safetensors" if has_st else "pytorch"),
        "readable": True,
        "architecture": cfg.get("model_type"),
        "architectures": archs if isinstance(archs, list) else [],
        "context_length": cfg.get("max_position_embeddings"),
        "quantization": method,
        "family": cfg.get("model_type"),
        "size": size_from_name(path.name),
    }


def model_facts(config: ModelConfig, models_dir: Path | None) -> dict[str, Any]:
    """Everything engines need to decide whether they can serve ``config``'s model."""
    ref = config.parameters.model
    facts: dict[str, Any] = {
        "name": config.name, "model": ref, "abilities": abilities(config),
        "cuda": bool(config.cuda), "format": "ggufv2" if ref.endswith(".gguf") else "unknown",
        "quantization": quantization_from_name(ref), "size": size_from_name(ref),
        "path": None, "exists": False, "remote": remote_scheme(ref),
    }
    if models_dir is None or not ref or facts["remote"] or path_problem("parameters.model", ref):
        return facts
    full = models_dir / ref
    facts["path"] = str(full)
    # os.path's tests: a name too long for the file system is absent, not an OSError; a FIFO or a
    # device named .gguf is there but unreadable (gguf_facts says why), not absent
    if full.suffix == ".gguf" and os.path.exists(full) and not os.path.isdir(full):
        facts.update(gguf_facts(full), exists=True)
    elif os.path.isdir(full):
        facts.update(directory_facts(full), exists=True)
    else:
        facts["exists"] = os.path.exists(full)
    return facts
