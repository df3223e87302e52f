"""Refresh harness/config/localai_index.yaml from a LocalAI checkout: facts generated from its source.

Everything in the index is read from LocalAI's source at one commit, each fact with the file and
line it comes from (nothing of LocalAI's is copied but names, types and those references):

- ``backends``: backend/index.yaml's meta backends (the entries that define a backend; the
  per-hardware variants, written ``!!merge <<: *anchor``, only merge into them) and the use
  cases their tags say, as ``known_usecases`` names;
- ``keys``: the YAML keys of a model config and the JSON type each decodes into, from the
  ``yaml:"..."`` struct tags of ModelConfig (its inline structs followed), PredictionOptions
  (``parameters:``) and TemplateConfig (``template:``);
- ``usecases``: GetAllModelConfigUsecases()'s map (the FLAG_* names known_usecases takes);
- ``refusals``: every ``return false, fmt.Errorf(...)`` of ModelConfig.Validate();
- ``backend_options``: per LocalAI backend name, the ``options:`` names its own source parses
  (the backends of ``OPTION_PARSERS``: llama-cpp's backend/cpp/llama-cpp/grpc-server.cpp);
- ``aliases``: pkg/model's ``Aliases`` map (a legacy name -> the backend LocalAI loads instead) and
  ``TypeAlias`` (the model type such an alias also sets);
- ``guess_usecases``: GuessUsecases()'s backend lists, per use case (``known_usecases`` names);
- ``gallery_metadata``: a gallery entry's descriptive fields (core/gallery Metadata) a model config
  does not have;
- ``remote_schemes``: the URI prefixes LocalAI's downloader fetches itself (pkg/downloader);
- ``history``: every release tag's backend names and aliases, and the commit that removed or
  renamed each (``scripts/localai_history.py``; needs the checkout's git history and tags);
- ``anchors``: the lines the harness's rules cite (``harness validate --explain RULE``).

``--corpus DIR`` writes the differential corpus instead: every YAML block of docs/content and every
YAML raw string of the Go tests that is a model config, one file each, citing its source line.

The source is a LocalAI git checkout or a bare mirror (files are read from the working tree when
there is one, else from HEAD with ``git show``). The diff against the committed copy is printed;
``--check`` only compares (exit 1 on a difference). CI has no network: give it a path.

    python scripts/refresh_localai_index.py ~/src/LocalAI            # rewrite, print the diff
    python scripts/refresh_localai_index.py ~/src/LocalAI --check    # compare only
    nox -s refresh_localai_index -- ~/src/LocalAI
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parents[1] / "harness" / "config" / "localai_index.yaml"
#: index.yaml tags -> LocalAI known_usecases names (tags that name no use case are left out).
TAG_USECASES: dict[str, tuple[str, ...]] = {
    "text-to-text": ("chat", "completion"),
    "text-to-speech": ("tts",), "tts": ("tts",), "text-to-audio": ("tts",),
    "speech-to-text": ("transcript",), "audio-transcription": ("transcript",), "audio-to-text": ("transcript",),
    "speech-recognition": ("transcript",), "asr": ("transcript",),
    "image-generation": ("image",), "text-to-image": ("image",),
    "video-generation": ("video",), "text-to-video": ("video",),
    "object-detection": ("detection",),
    "voice-activity-detection": ("vad",), "vad": ("vad",),
    "music-generation": ("sound_generation",), "sound-generation": ("sound_generation",),
    "diarization": ("diarization",),
    "embeddings": ("embeddings",), "reranker": ("rerank",),
    "transcription": ("transcript",),
    "image-to-video": ("video",), "audio-to-video": ("video",),
    "audio-classification": ("sound_classification",),
    "audio-transform": ("audio_transform",),
    "face-recognition": ("face_recognition",), "face-verification": ("face_recognition",),
    "voice-recognition": ("speaker_recognition",), "speaker-verification": ("speaker_recognition",),
    "depth-estimation": ("depth",),
    "token-classification": ("token_classify",),
    "image-to-3d": ("3d",), "3d-generation": ("3d",),
    "3d-animation": ("3d_animation",), "text-to-motion": ("3d_animation",),
}
MODEL_CONFIG = "core/config/model_config.go"
INITIALIZERS = "pkg/model/initializers.go"
GALLERY_METADATA = ("core/gallery/metadata_type.go", "Metadata")
DOWNLOADER_URI = "pkg/downloader/uri.go"
LLAMA_SERVER = "backend/cpp/llama-cpp/grpc-server.cpp"
#: The lines rules cite: name -> (file, a regular expression its line matches; the first match).
ANCHORS: dict[str, tuple[str, str]] = {
    "yaml_unmarshal": ("core/config/model_config_loader.go", r"yaml\.Unmarshal\(f, c\)"),
    "validate": (MODEL_CONFIG, r"^func \(c \*ModelConfig\) Validate\(\)"),
    "is_alias": (MODEL_CONFIG, r"^func \(c ModelConfig\) IsAlias\(\)"),
    "alias_no_model": (MODEL_CONFIG, r"must not set backend or parameters\.model"),
    "invalid_path": (MODEL_CONFIG, r"invalid file path: %s"),
    "backend_name": (MODEL_CONFIG, r"invalid backend name: %s"),
    "mcp_invalid": (MODEL_CONFIG, r"invalid MCP configuration"),
    "is_pattern_detector": (MODEL_CONFIG, r"^func \(c \*ModelConfig\) IsPatternDetector\(\)"),
    "has_router": (MODEL_CONFIG, r"^func \(c \*ModelConfig\) HasRouter\(\)"),
    "cloud_proxy": (MODEL_CONFIG, r"^func \(c \*ModelConfig\) IsCloudProxyBackendPassthrough\(\)"),
    "usecases_from_yaml": (MODEL_CONFIG, r"^func GetUsecasesFromYAML\("),
    "usecases_map": (MODEL_CONFIG, r"^func GetAllModelConfigUsecases\(\)"),
    "pipeline": (MODEL_CONFIG, r"^type Pipeline struct"),
    "template_file": ("core/templates/cache.go", r"dat = templateName"),
    "mcp_yaml": (MODEL_CONFIG, r"^func \(c \*MCPConfig\) MCPConfigFromYAML\(\)"),
    "options_parser": (LLAMA_SERVER, r'strcmp\(optname, "context_shift"\)'),
    "spec_type_passthrough": (LLAMA_SERVER, r'strcmp\(optname, "spec_type"\)'),
    "diffusers_options": ("backend/python/diffusers/backend.py", r"self\.options\[key\] = value"),
    "store_backend": ("core/backend/stores.go", r"^func NewVectorStore\("),
    "model_file": ("core/backend/options.go", r"model\.WithModel\(c\.Model\)"),
    "artifact_model_file": ("core/backend/options.go", r"model\.WithModelFile\(c\.ModelFileName\(\)\)"),
    "configs_by_name": ("core/config/model_config_loader.go", r"if valid, validationErr := c\.Validate\(\); valid"),
    "unmarshal_refused": ("core/config/model_config_loader.go", r"readModelConfigsFromFile cannot unmarshal config"),
    "alias_needs_name": (MODEL_CONFIG, r"alias config requires a name"),
    "alias_self": (MODEL_CONFIG, r"cannot point to itself"),
    "unknown_backend": ("core/gallery/backends.go", r"no backend found with name %q"),
    "option_boolean": (LLAMA_SERVER, r"std::string optval_str = \(optval == NULL\) \? \"true\""),
    "compression_invalid": (MODEL_CONFIG, r"^\tif c\.Compression\.Enabled \{"),
    "proxy_invalid": (MODEL_CONFIG, r"api_key_env and api_key_file are mutually exclusive"),
    "proxy_mode": (MODEL_CONFIG, r"proxy: unknown mode %q"),
    "proxy_provider": (MODEL_CONFIG, r"proxy: translate mode requires provider"),
    "score_normalization": (MODEL_CONFIG, r"router: unknown score_normalization %q"),
    "alias_artifacts": (MODEL_CONFIG, r"alias model %q cannot declare artifacts"),
    "liquid_audio_default": ("backend/python/liquid-audio/backend.py", r"resolve_model_reference\($"),
    # backends that load without a model path (localai.yaml's model_optional)
    "kokoro_no_model": ("backend/python/kokoro/backend.py", r"KPipeline\(lang_code=lang_code\)"),
    "chatterbox_no_model": ("backend/python/chatterbox/backend.py", r"ChatterboxTTS\.from_pretrained\(device=device\)"),
    "kitten_tts_default": ("backend/python/kitten-tts/backend.py", r"model_name = request\.Model if request\.Model else"),
    "pocket_tts_no_model": ("backend/python/pocket-tts/backend.py", r"TTSModel\.load_model\(\)"),
    "outetts_default": ("backend/python/outetts/backend.py", r'MODELNAME = "OuteAI'),
    "aliases": (INITIALIZERS, r"^var Aliases\b"),
    "alias_resolved": (INITIALIZERS, r"if real\w+, exists := Aliases\[\w+\]; exists"),
    "guess_usecases": (MODEL_CONFIG, r"^func \(c \*ModelConfig\) GuessUsecases\("),
    "gallery_metadata": (GALLERY_METADATA[0], r"^type Metadata struct"),
    "remote_schemes": (DOWNLOADER_URI, r"HuggingFacePrefix\s+="),
}
#: Backends whose own ``options:`` parser is read: LocalAI backend name -> (its source file, a regular
#: expression whose group 1 is an option name the parser compares with).
_STRCMP = r'strcmp\(optname, "([^"]+)"\)'
OPTION_PARSERS: dict[str, tuple[str, str]] = {
    "llama-cpp": (LLAMA_SERVER, _STRCMP),
    # turboquant builds llama-cpp's grpc-server.cpp against its fork (backend/cpp/turboquant/Makefile)
    "turboquant": (LLAMA_SERVER, _STRCMP),
    "ik-llama-cpp": ("backend/cpp/ik-llama-cpp/grpc-server.cpp", _STRCMP),
    "stablediffusion-ggml": ("backend/go/stablediffusion-ggml/cpp/gosd.cpp", _STRCMP),
    "whisper": ("backend/go/whisper/gowhisper.go", r'\boo == "([^"]+)"'),
}
HEADER = """\
# LocalAI facts generated from its source at one commit (see `source`), each with the file:line
# it comes from: backends (backend/index.yaml), config keys and their types (Go struct tags),
# known_usecases names, Validate()'s refusals, the options: names some backends' own sources
# parse (per backend name), the lines the harness's rules cite, pkg/model's aliases,
# GuessUsecases' backend lists, a gallery entry's descriptive fields, the downloader's URI
# prefixes, and the history of backend names across the release tags before that commit (when
# each was added, and the commit that removed or renamed it). Written by
# scripts/refresh_localai_index.py (nox -s refresh_localai_index -- PATH); do not edit by hand.
"""

Reader = Callable[[str], str]


def reader(root: Path) -> Reader:
    """Read a file of the checkout: its working tree when there is one, else HEAD (a bare mirror)."""
    def read(rel: str) -> str:
        p = root / rel
        if p.is_file():
            return p.read_text(encoding="utf-8")
        out = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{rel}"], capture_output=True, text=True)
        if out.returncode:
            msg = f"{rel} is not in the LocalAI checkout {root}: {out.stderr.strip()}"
            raise SystemExit(msg)
        return out.stdout
    return read


def meta_backends(text: str) -> dict[str, list[str]]:
    """Backend name -> use cases, for every entry that is not a ``!!merge`` variant."""
    starts = [i for i, line in enumerate(text.splitlines()) if line.startswith("- ")]
    lines = text.splitlines()
    merged = {i for i in starts if lines[i].lstrip("- ").startswith(("!!merge", "<<"))}
    data = yaml.safe_load(text) or []
    out: dict[str, list[str]] = {}
    for pos, item in zip(starts, data, strict=False):
        if isinstance(item, dict) and pos not in merged and isinstance(item.get("name"), str):
            cases: set[str] = set()
            for tag in item.get("tags") or ():
                cases.update(TAG_USECASES.get(str(tag).strip().lower(), ()))
            out[item["name"]] = sorted(cases)
    return dict(sorted(out.items()))


# -- Go struct tags ---------------------------------------------------------------------------

_FIELD = re.compile(r"^\s*(?:(?P<name>[A-Za-z_][\w, ]*?)\s+)?(?P<type>[*\[\]\w.{}]+(?:\[[^\]]*\][\w.*]+)?)\s+"
                    r"`[^`]*\byaml:\"(?P<tag>[^\"]*)\"")
_SCALARS = {"string": "string", "bool": "boolean", "float32": "number", "float64": "number",
            "any": "any", "interface{}": "any"}


def _struct(text: str, name: str) -> tuple[int, list[str]] | None:
    """(first line number, body lines) of ``type NAME struct {`` in a Go file."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"^type {re.escape(name)} struct \{{", line):
            body = []
            for j in range(i + 1, len(lines)):
                if lines[j].startswith("}"):
                    return i + 1, body
                body.append(lines[j])
    return None


def _json_type(go: str, local_kinds: dict[str, str]) -> str:
    go = go.lstrip("*")
    if go.startswith("[]"):
        # a list of structs: yaml.v3 refuses a scalar item (``array of object``); other items it decodes
        item = go[2:].lstrip("*")
        return "array of object" if item.startswith("map[") or local_kinds.get(item) == "object" else "array"
    if go.startswith("map["):
        return "object"
    if go in _SCALARS:
        return _SCALARS[go]
    if re.fullmatch(r"u?int(8|16|32|64)?", go):
        return "integer"
    return local_kinds.get(go.split(".")[-1], "object" if go[:1].isupper() or "." in go else "any")


def _kinds(text: str) -> dict[str, str]:
    """Named types of a Go file -> the JSON type their underlying type decodes as."""
    out: dict[str, str] = {}
    for m in re.finditer(r"^type (\w+) (\w+|struct|\[\]\w+|map\[[^\]]+\]\w+)\b", text, re.M):
        out[m.group(1)] = "object" if m.group(2) == "struct" else _json_type(m.group(2), {})
    # a type that decodes itself (UnmarshalYAML) takes whatever its decoder takes
    for name in re.findall(r"^func \(\w+ \*?(\w+)\) UnmarshalYAML\(", text, re.M):
        out[name] = "any"
    return out


def struct_keys(read: Reader, file: str, name: str, found: dict[str, dict[str, list[Any]]],
                section: str, files: dict[str, str]) -> None:
    """Add the YAML keys of Go struct ``name`` in ``file`` to ``found[section]`` (inline structs
    followed; ``parameters`` and ``template`` become sections of their own)."""
    text = read(file)
    located = _struct(text, name)
    if located is None:
        msg = f"type {name} struct not found in {file}"
        raise SystemExit(msg)
    start, body = located
    kinds = _kinds(text)
    for offset, line in enumerate(body, start=start + 1):
        m = _FIELD.match(line)
        if m is None:
            continue
        tag = m.group("tag").split(",")
        key, inline = tag[0], "inline" in tag[1:]
        gotype = m.group("type")
        embedded = m.group("name") is None
        if key == "-":
            continue
        if embedded and (inline or key in ("parameters", "template")):
            sub_section = section if inline else key
            base = gotype.lstrip("*")
            sub_file = files.get(base.split(".")[0] if "." in base else base, file)
            struct_keys(read, sub_file, base.split(".")[-1], found, sub_section, files)
            continue
        if not key:
            continue
        if section == "config" and key == "template":
            struct_keys(read, file, gotype.lstrip("*"), found, "template", files)
        found.setdefault(section, {})[key] = [_json_type(gotype, kinds), f"{file}:{offset}"]


def config_keys(read: Reader) -> dict[str, dict[str, list[Any]]]:
    found: dict[str, dict[str, list[Any]]] = {}
    # where an embedded struct of another file is declared (a package, or a type of it)
    files = {"schema": "core/schema/prediction.go", "BasicModelRequest": "core/schema/request.go"}
    struct_keys(read, MODEL_CONFIG, "ModelConfig", found, "config", files)
    return {s: dict(sorted(keys.items())) for s, keys in sorted(found.items())}


# -- functions ---------------------------------------------------------------------------------


def _function(text: str, signature: str) -> tuple[int, list[str]]:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(signature, line):
            body = []
            for j in range(i + 1, len(lines)):
                if lines[j].startswith("}"):
                    return i + 1, body
                body.append(lines[j])
    msg = f"{signature!r} not found"
    raise SystemExit(msg)


def usecases(read: Reader) -> dict[str, str]:
    """GetAllModelConfigUsecases()'s names -> file:line."""
    start, body = _function(read(MODEL_CONFIG), r"^func GetAllModelConfigUsecases\(\)")
    return {m.group(1): f"{MODEL_CONFIG}:{n}" for n, line in enumerate(body, start=start + 1)
            if (m := re.match(r'^\s*"(FLAG_\w+)":', line))}


def refusals(read: Reader) -> list[list[Any]]:
    """Validate()'s ``return false, fmt.Errorf(FORMAT`` lines: [file:line, FORMAT]."""
    start, body = _function(read(MODEL_CONFIG), r"^func \(c \*ModelConfig\) Validate\(\)")
    out = []
    for n, line in enumerate(body, start=start + 1):
        m = re.search(r'return false, fmt\.Errorf\(\s*"((?:[^"\\]|\\.)*)"', line)
        if m is None and "return false, fmt.Errorf(" in line:
            nxt = body[n - start] if n - start < len(body) else ""
            m = re.search(r'^\s*"((?:[^"\\]|\\.)*)"', nxt)
        if m is not None:
            out.append([f"{MODEL_CONFIG}:{n}", m.group(1).replace('\\"', '"')])
    return out


def backend_options(read: Reader) -> dict[str, dict[str, str]]:
    """LocalAI backend name -> the option names its parser (``OPTION_PARSERS``) compares with -> file:line."""
    found: dict[str, dict[str, str]] = {}
    for backend, (file, pattern) in OPTION_PARSERS.items():
        text = _optional(read, file)
        if text is None:
            continue  # the backend's source is not at this commit: its options are not known
        out: dict[str, str] = {}
        for n, line in enumerate(text.splitlines(), start=1):
            for name in re.findall(pattern, line):
                out.setdefault(name, f"{file}:{n}")
        found[backend] = dict(sorted(out.items()))
    return dict(sorted(found.items()))


# -- the facts beside the key vocabulary ------------------------------------------------------


def _optional(read: Reader, file: str) -> str | None:
    """A file of the checkout, None when this commit does not have it (its facts are then absent)."""
    try:
        return read(file)
    except SystemExit:
        return None


def guess_usecases(read: Reader) -> dict[str, list[str]]:
    """GuessUsecases()'s positive backend lists: use case -> the backend names it is guessed for.

    A block ``if (u & FLAG_X) == FLAG_X`` that returns false unless ``c.Backend`` is in a list
    (``!slices.Contains(list, c.Backend)``) or equals a name (``c.Backend != "name"``) guesses X for
    those names; a name the block also tests with more conditions (``c.Backend == "diffusers" &&
    ...``, fields this harness does not type) is left out: it is not guessed from the name alone."""
    source = read(MODEL_CONFIG)
    if not re.search(r"^func \(c \*ModelConfig\) GuessUsecases\(", source, re.M):
        return {}
    _, body = _function(source, r"^func \(c \*ModelConfig\) GuessUsecases\(")
    text = "\n".join(body)
    lists = {m.group(1): re.findall(r'"([^"]+)"', m.group(2))
             for m in re.finditer(r"(\w+) := \[\]string\{([^}]*)\}", text)}
    out: dict[str, list[str]] = {}
    blocks = re.split(r"\n\s*if \(u & (FLAG_\w+)\) == \1 \{", text)
    for flag, block in zip(blocks[1::2], blocks[2::2], strict=True):
        names = [n for var in re.findall(r"!slices\.Contains\((\w+), c\.Backend\)", block) for n in lists.get(var, ())]
        names += re.findall(r'c\.Backend != "([^"]+)"', block)
        conditional = set(re.findall(r'c\.Backend == "([^"]+)" &&', block))
        kept = [n for n in dict.fromkeys(names) if n not in conditional]
        if kept:
            out[flag.removeprefix("FLAG_").lower()] = kept
    return out


def gallery_metadata(read: Reader, config: dict[str, Any]) -> list[str]:
    """A gallery entry's descriptive fields (core/gallery's Metadata) that ModelConfig does not have."""
    found: dict[str, dict[str, list[Any]]] = {}
    if _optional(read, GALLERY_METADATA[0]) is None:
        return []
    struct_keys(read, GALLERY_METADATA[0], GALLERY_METADATA[1], found, "metadata", {})
    return sorted(k for k in found.get("metadata", {}) if k not in config)


def remote_schemes(read: Reader) -> list[str]:
    """The URI prefixes of pkg/downloader's const block (what LocalAI downloads itself)."""
    text = _optional(read, DOWNLOADER_URI)
    if text is None:
        return []
    at = text.find("HuggingFacePrefix")
    m = re.search(r"^const \(\n(.*?)^\)", text[max(at - 200, 0):], re.M | re.S) if at >= 0 else None
    if m is None:
        msg = f"the URI prefixes' const block is not in {DOWNLOADER_URI}"
        raise SystemExit(msg)
    return re.findall(r'^\s*\w+\s*=\s*"([^"]+)"', m.group(1), re.M)


def aliases(read: Reader) -> dict[str, list[str]]:
    """pkg/model's Aliases: legacy name -> [the backend LocalAI loads, the model type TypeAlias sets or ""]."""
    from localai_history import snapshot

    _, found, types = snapshot(lambda path: _optional(read, path) if path == INITIALIZERS else None)
    return {name: [target, types.get(name, "")] for name, target in sorted(found.items())}


def anchors(read: Reader) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, (file, pattern) in ANCHORS.items():
        try:
            text = read(file)
        except SystemExit:
            continue  # the file is gone at this commit: the rules citing it become notes
        for n, line in enumerate(text.splitlines(), start=1):
            if re.search(pattern, line):
                out[name] = f"{file}:{n}"
                break
    return dict(sorted(out.items()))


def _flow(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def render(facts: dict[str, Any], repository: str, commit: str) -> str:
    lines = [HEADER, "source:", f"  repository: {repository}", f"  commit: {commit}"]
    lines.append("anchors:")
    lines += [f"  {k}: {v}" for k, v in facts["anchors"].items()]
    lines.append("backends:")
    lines += [f"  {name}: [{', '.join(cases)}]" for name, cases in facts["backends"].items()]
    lines.append("usecases:")
    lines += [f"  {k}: {v}" for k, v in facts["usecases"].items()]
    lines.append("refusals:")
    lines += [f"  - [{where}, {_flow(fmt)}]" for where, fmt in facts["refusals"]]
    lines.append("backend_options:")
    for backend, options in facts["backend_options"].items():
        lines.append(f"  {backend}:")
        lines += [f"    {k}: {v}" for k, v in options.items()]
    lines.append("keys:")
    for section, keys in facts["keys"].items():
        lines.append(f"  {section}:")
        lines += [f"    {k}: [{t}, {where}]" for k, (t, where) in keys.items()]
    lines.append("aliases:")
    lines += [f"  {k}: {_flow(v)}" for k, v in facts["aliases"].items()]
    lines.append("guess_usecases:")
    lines += [f"  {k}: {_flow(v)}" for k, v in facts["guess_usecases"].items()]
    lines.append(f"gallery_metadata: {_flow(facts['gallery_metadata'])}")
    lines.append(f"remote_schemes: {_flow(facts['remote_schemes'])}")
    history = facts.get("history")
    if history:
        lines.append("history:")
        lines.append("  releases:")
        lines += [f"    {tag}: {commit}" for tag, commit in history["releases"].items()]
        for part in ("backends", "aliases"):
            lines.append(f"  {part}:")
            lines += [f"    {name}: {_flow(spans)}" for name, spans in history[part].items()]
    return "\n".join(lines) + "\n"


#: Keys that make a YAML block a model config (a block with none of them is another kind of YAML).
CONFIG_MARKS = frozenset({"backend", "parameters", "alias", "pipeline", "known_usecases", "template", "context_size",
                          "options", "mmproj", "f16", "gpu_layers", "pii_detection", "router", "proxy", "mcp",
                          "embeddings", "function", "download_files"})
#: Keys of other YAML (gallery entries, compose files, Kubernetes, workflows).
OTHER_MARKS = frozenset({"url", "urls", "config_file", "overrides", "files", "license", "icon", "tags",
                         "description", "services", "version", "apiVersion", "kind", "jobs", "steps", "on"})


def _is_model_config(data: Any) -> bool:
    if isinstance(data, list):
        return bool(data) and all(_is_model_config(d) for d in data)
    if not isinstance(data, dict) or not data:
        return False
    keys = set(map(str, data))
    if keys & OTHER_MARKS and not keys & {"backend", "parameters"}:
        return False
    return bool(keys & CONFIG_MARKS)


def _doc_blocks(text: str) -> list[tuple[int, str]]:
    """The fenced ```yaml blocks of a Markdown text: (line of the block's first line, its text dedented)."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)```ya?ml\s*$", lines[i])
        if m:
            indent, start = len(m.group(1)), i + 1
            j = start
            while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            out.append((start + 1, "\n".join(ln[indent:] if not ln[:indent].strip() else ln
                                              for ln in lines[start:j]) + "\n"))
            i = j
        i += 1
    return out


def _go_blocks(text: str) -> list[tuple[int, str]]:
    """The multi-line raw strings of a Go file (no Sprintf template): (line of the YAML's first line, text)."""
    out = []
    for m in re.finditer(r"`([^`]*)`", text):
        raw = m.group(1)
        if "\n" not in raw.strip() or ":" not in raw or re.search(r"%[sdvq]", raw):
            continue
        body = [ln for ln in raw.split("\n")]
        indent = min(len(ln) - len(ln.lstrip()) for ln in body if ln.strip())
        line = text.count("\n", 0, m.start()) + 1 + (1 if raw.startswith("\n") else 0)
        out.append((line, "\n".join(ln[indent:] for ln in body).strip("\n") + "\n"))
    return out


def corpus(root: Path, dest: Path, commit: str, repository: str) -> int:
    """Write every model-config YAML block of LocalAI's docs/content and of its Go tests (core/, pkg/)
    to ``dest``, one file each, headed ``# source: REPOSITORY COMMIT PATH:LINE``; returns how many."""
    def ls(*trees: str) -> list[str]:
        return subprocess.run(["git", "-C", str(root), "ls-tree", "-r", "--name-only", "HEAD", *trees],
                              capture_output=True, text=True, check=True).stdout.split()

    read = reader(root)
    found: list[tuple[str, int, str]] = []
    for path in ls("docs/content", "core", "pkg"):
        if path.endswith(".md") and path.startswith("docs/"):
            blocks = _doc_blocks(read(path))
        elif path.endswith("_test.go"):
            blocks = _go_blocks(read(path))
        else:
            continue
        for line, text in blocks:
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            if _is_model_config(data):
                found.append((path, line, text))
    dest.mkdir(parents=True, exist_ok=True)
    for path, line, text in found:
        stem = path.removeprefix("docs/content/").removesuffix(".md").removesuffix(".go").replace("/", "_")
        (dest / f"{stem}-L{line}.yaml").write_text(f"# source: {repository} {commit} {path}:{line}\n{text}",
                                                   encoding="utf-8")
    return len(found)


def collect(root: Path, *, history: bool = True) -> dict[str, Any]:
    read = reader(root)
    keys = config_keys(read)
    facts: dict[str, Any] = {
        "backends": meta_backends(read("backend/index.yaml")), "keys": keys,
        "usecases": usecases(read), "refusals": refusals(read),
        "backend_options": backend_options(read), "anchors": anchors(read),
        "aliases": aliases(read), "guess_usecases": guess_usecases(read),
        "gallery_metadata": gallery_metadata(read, keys.get("config", {})),
        "remote_schemes": remote_schemes(read)}
    if history:
        from localai_history import collect as collect_history

        facts["history"] = collect_history(root)
    return facts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path, help="a LocalAI git checkout (or a bare mirror of one)")
    p.add_argument("--repository", default="mudler/LocalAI", help="recorded as the source repository")
    p.add_argument("--check", action="store_true", help="compare only; exit 1 when the copy is stale")
    p.add_argument("--out", type=Path, default=OUT, help="the index file (default: the committed one)")
    p.add_argument("--corpus", type=Path, metavar="DIR",
                   help="instead, write the model-config YAML blocks of LocalAI's docs and Go tests to DIR "
                        "(the differential corpus, tests/data/localai-corpus)")
    args = p.parse_args(argv)
    if not args.source.is_dir():
        p.error(f"{args.source} is not a directory: give the path of a LocalAI checkout")
    commit = subprocess.run(["git", "-C", str(args.source), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    if args.corpus is not None:
        print(f"{corpus(args.source, args.corpus, commit, args.repository)} model configs written to {args.corpus}")
        return 0
    new = render(collect(args.source), args.repository, commit)
    old = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), str(args.out),
                                     f"{args.source}@{commit[:12]}", lineterm=""))
    print("\n".join(diff) if diff else "localai_index.yaml is up to date")
    if args.check:
        return 1 if diff else 0
    args.out.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
