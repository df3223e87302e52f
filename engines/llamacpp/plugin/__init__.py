"""Engine plugin ``llamacpp``: llama.cpp serves GGUF models (and HF safetensors dirs, converted once).

Everything llama.cpp-specific in Python lives in this package: the runtime glue
(:mod:`.engine`), model resolution and conversion (:mod:`.models`, :mod:`.convert`), the tiny
model (:mod:`.tiny`), bench arms (:mod:`.bench`: our binding, the xllamacpp peer,
llama-bench) and the cross-variant check (:mod:`.crossvariant`). The core reaches them
through the :class:`~harness.engine.registry.EngineImpl` registered below.

It also owns llama.cpp's model matching (``match``) and config rules (``config_check``): the model is a .gguf file
or a directory with config.json, the projector a .gguf, every option ``key:value``, numbers
inside what the runtime takes, and (when the file is there) a GGUF header whose architecture
the pinned llama.cpp knows. LocalAI calls this backend ``llama-cpp`` (``llama``, ``llama.cpp``).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core import errors
from harness.core.errors import did_you_mean
from harness.core.types import HostInfo, MatchResult
from harness.engine.plugin import hookimpl
from harness.engine.registry import EngineImpl, RandomModel
from harness_plugins.llamacpp.bench_kinds import bench_arms
from harness_plugins.llamacpp.bounds import RUNTIME_BOUNDS

if TYPE_CHECKING:
    from harness.config.loader import Diagnostic, Path_
    from harness.config.model import ModelConfig
    from harness.config.rules import CheckContext


NAME = "llamacpp"
FORMATS = ("ggufv2", "safetensors")
UNSUPPORTED_QUANT = ("gptq", "awq", "fp8")
#: Where the pinned source names every architecture it loads (general.architecture values).
ARCH_SOURCE = "src/llama-arch.cpp"
_ARCH_NAMES = re.compile(r"LLM_ARCH_NAMES\s*=\s*\{(?P<body>.*?)\n\};", re.S)
_ARCH_ENTRY = re.compile(r'\{\s*LLM_ARCH_\w+\s*,\s*"([^"]+)"\s*\}')


def _load(model: str | Path, *, variant: str | None = None, **engine_args: Any) -> Any:
    from harness_plugins.llamacpp.engine import Engine

    return Engine.load(model, variant=variant, **engine_args)


def _estimate_memory(model: str | Path, *, variant: str | None = None, **engine_args: Any) -> dict[str, Any]:
    from harness_plugins.llamacpp.placement import estimate

    return estimate(model, variant=variant, **engine_args)


def _devices() -> list[dict[str, Any]]:
    from harness_plugins.llamacpp.placement import devices

    return devices()


def _probe_model() -> Path:
    """The tiny llama with Q4_1 matrices: the quantized (SIMD and AMX) matmul kernels run."""
    from harness.core import paths
    from harness_plugins.llamacpp.tiny import write_tiny_llama

    path = paths.models_dir() / "tiny-llama-s0-Q4_1.gguf"
    if not path.is_file():
        write_tiny_llama(path, quant="Q4_1")
    return path


def _write_tiny(dest: Path, seed: int) -> Path:
    from harness_plugins.llamacpp.tiny import write_tiny_llama

    return write_tiny_llama(dest, seed=seed)


def _write_bandwidth(dest: Path, seed: int) -> Path:
    from harness_plugins.llamacpp.random_llama import write_random_llama

    return write_random_llama(dest, seed=seed)


def _writer_version(*modules: str) -> str:
    """The writers' source and the gguf package's version: what the bytes of a random model depend on."""
    import hashlib
    from importlib.metadata import version

    h = hashlib.sha256(version("gguf").encode())
    for name in modules:
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:16]


def _random_models() -> dict[str, RandomModel]:
    return {
        "tiny": RandomModel(write=_write_tiny, version=_writer_version("tiny.py"),
                            doc="2 layers of d=64, F32: loads and tokenizes in milliseconds"),
        "bandwidth": RandomModel(write=_write_bandwidth, version=_writer_version("tiny.py", "random_llama.py"),
                                 doc="0.72B parameters in Q4_0 (412 MB): decode bound by memory bandwidth"),
    }


def _convert(src_dir: Path, *, engine_tree: Path, outtype: str) -> tuple[Path, bool]:
    from harness_plugins.llamacpp.convert import ensure_converted

    return ensure_converted(src_dir, engine_tree=engine_tree, outtype=outtype)


def _cross_variant(model: Path, *, threads: int | None = None) -> dict[str, Any]:
    from harness_plugins.llamacpp.crossvariant import cross_variant

    return cross_variant(model, threads=threads)


def _emulated_levels(artifact: Path, **kw: Any) -> dict[str, Any]:
    from harness_plugins.llamacpp.emulated import emulated_levels

    return emulated_levels(artifact, **kw)


# ---------------------------------------------------------------------------
# architectures the pinned source knows
# ---------------------------------------------------------------------------


def architectures_from_source(text: str) -> frozenset[str]:
    """The names in ``LLM_ARCH_NAMES`` of a ``llama-arch.cpp`` (empty when there is none)."""
    m = _ARCH_NAMES.search(text)
    return frozenset(_ARCH_ENTRY.findall(m.group("body"))) if m else frozenset()


def pinned_source_file(relative: str) -> Path | None:
    """``relative`` in the pinned source tree when it is in the cache (never fetched here)."""
    from harness.core import paths
    from harness.engine.descriptor import load_engine

    try:
        src = load_engine(NAME).source
        roots = [paths.cache_root() / "sources" / key for key in (src.sha256, f"git-{src.commit}") if key]
    except Exception:  # no descriptor, no cache: nothing to read
        return None
    for root in roots:
        tree = root / "tree"
        if not tree.is_dir():
            continue
        tops = [p for p in tree.iterdir() if not p.name.startswith(".")]
        top = tops[0] if len(tops) == 1 and tops[0].is_dir() else tree
        candidate = (top / src.subdir if src.subdir else top) / relative
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def pinned_architectures() -> frozenset[str] | None:
    """Architectures the pinned llama.cpp loads, read from its source; None when it is not fetched."""
    path = pinned_source_file(ARCH_SOURCE)
    if path is None:
        return None
    names = architectures_from_source(path.read_text(encoding="utf-8", errors="replace"))
    return names or None


def architecture_problem(arch: Any) -> str | None:
    """Why the pinned llama.cpp cannot load ``arch``; None when it can (or it cannot be told)."""
    known = pinned_architectures()
    if known is None or not isinstance(arch, str):
        return None
    if arch in known:
        return None
    return (f"architecture {arch!r} is not one the pinned llama.cpp loads ({len(known)} known, "
            f"read from its {ARCH_SOURCE}){did_you_mean(arch, sorted(known))}")


# ---------------------------------------------------------------------------
# selection
# ---------------------------------------------------------------------------


#: What this engine's runtime serves, in LocalAI's use-case words (a config for none of them, e.g. an
#: image or transcript model, is another engine's).
SERVES = frozenset({"chat", "completion", "edit", "embeddings", "tokenize"})


def match(model: dict[str, Any], host: HostInfo) -> MatchResult:
    """Whether llama.cpp serves ``model`` (its facts) on ``host``, and on which variant."""
    uses = [str(u) for u in model.get("abilities") or ()]
    if uses and not SERVES.intersection(uses):
        return MatchResult(engine=NAME, ok=False,
                           reason=f"the config is for {', '.join(uses)}; llama.cpp serves {', '.join(sorted(SERVES))}")
    fmt = model.get("format")
    if fmt in UNSUPPORTED_QUANT or fmt not in FORMATS:
        return MatchResult(engine=NAME, ok=False,
                           reason=f"llama.cpp engine only supports ggufv2 format (or safetensors, converted); model is {fmt}")
    if fmt == "ggufv2" and model.get("exists") and not model.get("readable", True):
        return MatchResult(engine=NAME, ok=False, reason=str(model.get("error") or "the GGUF file is unreadable"))
    version = model.get("gguf_version")
    if fmt == "ggufv2" and isinstance(version, int) and version > 3:
        return MatchResult(engine=NAME, ok=False, reason=f"GGUF version {version} is newer than the supported 3")
    problem = architecture_problem(model.get("architecture")) if fmt == "ggufv2" else None
    if problem:
        return MatchResult(engine=NAME, ok=False, reason=problem)
    if host.os == "darwin" and host.arch == "arm64":
        variant = "metal"
    elif host.has_gpu("cuda"):
        variant = "cuda"
    else:
        variant = "cpu"
    note = ""
    if fmt == "ggufv2" and model.get("architecture") and pinned_architectures() is None:
        note = "architecture not checked: the pinned source is not fetched (harness fetch llamacpp)"
    return MatchResult(engine=NAME, ok=True, variant=variant, reason=note)


# ---------------------------------------------------------------------------
# config rules
# ---------------------------------------------------------------------------


def _runtime_bounds() -> dict[str, tuple[int, int]]:
    return dict(RUNTIME_BOUNDS)


#: llama.cpp's pinned source (engines/llamacpp/engine.yaml's upstream commit), where its rules are true.
_SOURCE = "ggml-org/llama.cpp@0c1e570"
#: Sampling values llama.cpp's server clamps into its soft limits (server-schema.cpp's set_limits).
_CLAMPED = (("top_p", "top-p sampling"), ("min_p", "min-p sampling"))


def config_rules() -> tuple[Any, ...]:
    """llama.cpp's config rules (``harness validate --explain``), each with its pinned source line."""
    from harness.config.refs import Rule

    return (
        Rule(code="LCP001", severity="note",
             summary="an option without ':' or with an empty key: LocalAI's llama-cpp backend reads a bare "
                     "name as a boolean set to true; this harness's engine takes key:value only"),
        Rule(code="LCP002", severity="error", source=f"{_SOURCE} ggml/src/gguf.cpp:482",
             summary="parameters.model is not a GGUF file (or a directory without config.json): llama.cpp "
                     "refuses it at load"),
        Rule(code="LCP003", severity="error", source=f"{_SOURCE} src/llama-model.cpp:371",
             summary="a GGUF model of an architecture the pinned llama.cpp does not know: it refuses it at load"),
        Rule(code="LCP004", severity="error", source=f"{_SOURCE} tools/mtmd/clip.cpp:1197",
             summary="mmproj is not a GGUF file: llama.cpp's multimodal projector loader refuses it"),
        Rule(code="LCP005", severity="note",
             summary="a number outside what this harness's llama.cpp binding takes (its runtime bounds)"),
        Rule(code="LCP006", severity="warning", source=f"{_SOURCE} tools/server/server-schema.cpp:598",
             summary="parameters.top_p or min_p outside 0..1: llama.cpp's server clamps it into 0..1 "
                     "(a top_p of 1 or more turns top-p sampling off: src/llama-sampler.cpp:1720)"),
        Rule(code="LCP007", severity="warning", source=f"{_SOURCE} common/fit.cpp:30",
             summary="the model at the config's context, layers and device does not fit the memory there is, by "
                     "llama.cpp's own estimate (harness inspect memory shows it): Runtime.load refuses it"),
        Rule(code="LCP008", severity="note",
             summary="the memory of the config's load could not be estimated (e.g. the config names a device the "
                     "installed variant lacks)"),
    )


@functools.cache
def _register_rules() -> None:
    from harness.config.refs import register

    register(*config_rules())


class _Rules:
    def __init__(self, config: ModelConfig, context: CheckContext) -> None:
        self.config, self.ctx = config, context
        self.out: list[Diagnostic] = []

    def error(self, path: Path_, message: str, *, key: bool = False, code: str) -> None:
        self.out.append(self.ctx.error(path, message, key=key, code=code))

    def run(self) -> list[Diagnostic]:
        self.options()
        self.model()
        self.mmproj()
        self.numbers()
        self.sampling()
        self.memory()
        return self.out

    def memory(self) -> None:
        """The engine's estimate of this config's load (LCP007), where the model file is here to read
        and a binding is installed to estimate with; silent otherwise (nothing is guessed)."""
        ref = self.config.parameters.model
        full = self.ctx.local_file(ref) if ref else None
        if full is None or not full.is_file() or self.out:
            return
        from harness.config.effective import effective
        from harness.engine.descriptor import load_engine
        from harness.runtime import discovery
        from harness_plugins.llamacpp.engine import _committed_fingerprint

        if discovery.choose_or_none(NAME, load_engine(NAME).pin, _committed_fingerprint()) is None:
            return
        from harness_plugins.llamacpp.placement import estimate

        try:
            eff = effective(self.config, self.ctx.options, models_dir=self.ctx.models_dir, engine=NAME)
            plan = estimate(full, effective=eff)
        except (errors.ModelError, errors.BindingError):
            return  # the file does not load as far as its metadata (the load says why), or the installed
            # binding cannot estimate (built before it could): nothing is guessed
        except errors.HarnessError as e:
            self.out.append(self.ctx.note(("parameters", "model"), f"memory not estimated: {e}", code="LCP008"))
            return
        if not plan["fits"]:
            self.out.append(self.ctx.warn(("parameters", "model"), f"does not fit on the {plan['variant']} variant "
                                          f"at n_ctx {plan['n_ctx']}: {plan['verdict']} (harness inspect memory "
                                          "shows the estimate; Runtime.load refuses it)", code="LCP007"))

    def sampling(self) -> None:
        for key, what in _CLAMPED:
            value = getattr(self.config.parameters, key)
            if isinstance(value, int | float) and not 0 <= value <= 1:
                to = 1 if value > 1 else 0
                off = f", which turns {what} off" if to == 1 and key == "top_p" else ""
                self.out.append(self.ctx.warn(("parameters", key), f"parameters.{key} {value!r} is outside 0..1: "
                                              f"llama.cpp clamps it to {to}{off}", code="LCP006"))

    def options(self) -> None:
        for i, key, value in self.ctx.options.items:
            item = f"{key}:{value}" if value is not None else key
            if value is None:
                self.error(("options", i), f"option {item!r} is not key:value (llama.cpp options are "
                                           "key:value; the key ends at the first colon)", code="LCP001")
            elif not key:
                self.error(("options", i), f"option {item!r} has an empty key", code="LCP001")

    def model(self) -> None:
        from harness.config.facts import gguf_header
        from harness.config.localai import remote_scheme
        from harness.config.rules import path_problem

        ref = self.config.parameters.model
        at: Path_ = ("parameters", "model")
        if not ref or remote_scheme(ref) or path_problem("parameters.model", ref):
            return  # the core's rules say what is wrong with it
        # No extension rule: LocalAI passes the file to llama.cpp whatever its name, and llama.cpp
        # reads its content (a GGUF named .bin loads). The file is judged when it is here to read.
        full = self.ctx.local_file(ref)
        if full is None:
            return
        if full.is_dir():
            if not (full / "config.json").is_file():
                self.error(at, f"parameters.model {ref!r} is a directory without config.json; "
                               "llama.cpp loads a .gguf file or a model directory with config.json", code="LCP002")
        else:
            header, why = gguf_header(full)
            if header is None:
                self.error(at, f"parameters.model: {why}", code="LCP002")
            else:
                problem = architecture_problem(header.get("general.architecture"))
                if problem:
                    self.error(at, f"parameters.model {ref!r}: {problem}", code="LCP003")

    def mmproj(self) -> None:
        from harness.config.localai import remote_scheme
        from harness.config.rules import path_problem

        ref = self.config.mmproj
        if not ref or remote_scheme(ref) or path_problem("mmproj", ref):
            return
        full = self.ctx.local_file(ref)
        if Path(ref).suffix.lower() != ".gguf" or (full is not None and not full.is_file()):
            self.error(("mmproj",), f"mmproj {ref!r} must be a .gguf file (llama.cpp's multimodal projector)",
                       code="LCP004")

    def numbers(self) -> None:
        from harness.runtime.requests import LIMITS

        bounds = _runtime_bounds()
        c, p = self.config, self.config.parameters
        checks: list[tuple[Path_, str, int | None, tuple[int, int]]] = [
            (("context_size",), "context_size", c.context_size, bounds["n_ctx"]),
            (("max_model_len",), "max_model_len", c.max_model_len, bounds["n_ctx"]),
            (("threads",), "threads", c.threads, bounds["n_threads"]),
            (("parameters", "seed"), "parameters.seed", p.seed, bounds["seed"]),
            (("parameters", "max_tokens"), "parameters.max_tokens", p.max_tokens, (0, LIMITS.max_tokens)),
            (("parameters", "top_k"), "parameters.top_k", p.top_k, (0, LIMITS.top_k)),
        ]
        opts = self.ctx.options.values
        for key, arg in (("n_parallel", "max_num_seqs"), ("threads", "n_threads"),
                         ("threads_batch", "n_threads_batch"), ("n_batch", "n_batch"),
                         ("n_ubatch", "n_ubatch"), ("max_model_len", "n_ctx")):
            s = opts.get(key)
            if s is not None and s.path is not None and isinstance(s.value, int):
                checks.append((s.path, f"{s.source} {key}", s.value, bounds[arg]))
        for path, label, value, (low, high) in checks:
            if isinstance(value, int) and not low <= value <= high:
                self.error(path, f"{label} {value} is outside what llama.cpp takes here ({low}..{high})",
                           code="LCP005")


def config_check(config: ModelConfig, context: CheckContext) -> list[Diagnostic]:
    """llama.cpp's rules for a model config whose backend resolves to it."""
    _register_rules()
    return _Rules(config, context).run()



# ---------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------


@hookimpl
def harness_engine_register() -> list[EngineImpl]:
    return [EngineImpl(name=NAME, serves=("text", "embeddings"), default=True, load=_load,
                       probe_model=_probe_model, random_models=_random_models(), convert=_convert,
                       cross_variant=_cross_variant, emulated_levels=_emulated_levels,
                       old_pin_bench_arm="llama-bench", bench_arms=bench_arms(), match=match,
                       config_check=config_check, estimate_memory=_estimate_memory, devices=_devices,
                       compare_outputs=_compare_outputs, localai_backends=("llama-cpp",))]


def _compare_outputs(a: Path, b: Path, **kwargs: Any) -> dict[str, Any]:
    from harness_plugins.llamacpp.outputs import compare_outputs

    return compare_outputs(a, b, **kwargs)
