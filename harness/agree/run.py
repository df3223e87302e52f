"""``harness agree A B``: feed the same token windows to two arms and compare, window by window.

Each arm is a bench arm (``in-process:variant=cpu,level=haswell,batch=4``) in its own worker
process (:mod:`harness.bench.arms`), loaded with the sizes its batch shape needs. The corpus is
tokenised by both arms (they must agree on the tokens), cut into windows of ``window`` tokens,
and evaluated a group at a time: arm A writes each window's log-probabilities (positions x
vocab float32, ~100 MB for 512 x 49152) to a file in shared memory, arm B does the same, the
parent compares the two and deletes them. Only per-position scalars stay (KLD, top-1 match,
each arm's NLL of the true next token): no logits file of the whole corpus. The arms run one
after the other, so neither competes with the other for the cores.

Batch shape options of an arm: ``batch=N`` evaluates N windows side by side (each decode holds
tokens of all N; a window is "alone" at batch=1), ``chunk=K`` feeds K tokens of each window per
decode (default: the whole window, like prompt processing; ``chunk=1`` is the shape of
generation, one row per sequence and step). ``level=NAME`` forces a CPU level in that arm's
worker (``$HARNESS_CPU_LEVEL``); ``pin=VERSION`` or ``rev=GITREV`` runs that recipe's build and
binding (built once, when the plugin prepares the arm).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.agree.corpus import Corpus
from harness.agree.stats import BOOTSTRAP_RESAMPLES, Accumulator, Summary, compare_window
from harness.agree.thresholds import Threshold
from harness.bench.arms import ArmHandle, ArmSpec, prepare_arm, started_arms
from harness.core.errors import UsageError

#: Tokens per window (positions compared per window).
DEFAULT_WINDOW = 512
#: Warm-up window length: the first decode of a process pays one-time costs (thread pools, repacks).
WARMUP_TOKENS = 32


@dataclass(frozen=True, kw_only=True)
class Shape:
    """How one arm batches: ``batch`` windows side by side, ``chunk`` tokens of each per decode."""

    batch: int
    chunk: int

    def describe(self) -> str:
        alone = "alone" if self.batch == 1 else f"with {self.batch - 1} other sequence(s)"
        return f"{alone}, {self.chunk} token(s) per sequence and decode"


def arm_spec(text: str, *, model: str, window: int, threads: int | None) -> tuple[ArmSpec, Shape]:
    """The arm of ``text`` (bench arm syntax) with the engine sizes its batch shape needs, prepared
    by its plugin first (an arm naming another pin or revision gets that recipe's artifact and
    binding built: its engine's ``BenchArmKind.prepare``)."""
    spec = prepare_arm(ArmSpec.parse(text))
    opts = dict(spec.options)
    batch = _positive(opts.get("batch", 1), "batch", text)
    chunk = _positive(opts.get("chunk", window), "chunk", text)
    if chunk > window:
        msg = f"arm {text!r}: chunk={chunk} is longer than the window ({window} tokens); expected 1..{window}"
        raise UsageError(msg)
    opts.setdefault("model", model)
    if threads is not None:
        opts.setdefault("threads", threads)
    opts.setdefault("max_num_seqs", batch)
    opts.setdefault("n_ctx", -(-batch * window // 256) * 256)
    # one decode = chunk tokens of each of the batch's windows, in one ubatch (a smaller ubatch would
    # split the batch back into single sequences)
    opts.setdefault("n_batch", batch * chunk)
    opts.setdefault("n_ubatch", batch * chunk)
    return ArmSpec(kind=spec.kind, name=spec.name, options=opts), Shape(batch=batch, chunk=chunk)


def _positive(value: Any, key: str, text: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"arm {text!r}: {key}={value!r}; expected a positive integer"
        raise UsageError(msg)
    return value


@dataclass(frozen=True, kw_only=True)
class Window:
    start: int
    """Corpus token index of the first position."""
    fed: list[int]
    """Tokens fed: corpus[start : start + n]."""
    targets: list[int]
    """The true next tokens: corpus[start + 1 : start + n + 1]."""


def cut_windows(tokens: Sequence[int], window: int, max_tokens: int | None = None) -> list[Window]:
    """Consecutive windows of ``window`` positions; each corpus token after the first is a target once."""
    if window < 2:
        msg = f"window must be at least 2 tokens, got {window}"
        raise UsageError(msg)
    usable = len(tokens) - 1 if max_tokens is None else min(len(tokens) - 1, max_tokens)
    out = []
    for start in range(0, usable - window + 1, window):
        out.append(Window(start=start, fed=list(tokens[start:start + window]),
                          targets=list(tokens[start + 1:start + window + 1])))
    if not out:
        msg = (f"the corpus has {len(tokens)} tokens{'' if max_tokens is None else f' (limit {max_tokens})'}: "
               f"not enough for one window of {window}; lower --window")
        raise UsageError(msg)
    return out


@dataclass(frozen=True, kw_only=True)
class ArmTiming:
    seconds: float = 0.0
    """In the worker's evaluate calls (engine, log-softmax, writing the rows)."""
    engine_s: float = 0.0
    """In the engine's evaluate (decodes and the log-softmax of every row)."""
    decode_s: float = 0.0
    """In the engine's decode calls only: the corpus evaluation itself."""

    def add(self, reply: dict[str, Any]) -> ArmTiming:
        return ArmTiming(seconds=self.seconds + float(reply["seconds"]), engine_s=self.engine_s + float(reply["engine_s"]),
                         decode_s=self.decode_s + float(reply["decode_s"]))


@dataclass(frozen=True, kw_only=True)
class AgreeResult:
    arms: dict[str, dict[str, Any]]
    """role -> spec, name, shape, describe()."""
    corpus: dict[str, Any]
    window: int
    n_tokens: int
    summary: Summary
    kld: list[list[float]]
    """Per window, per position: kept for the plot (a few floats per corpus token)."""
    timing: dict[str, Any]
    kind: str | None = None
    threshold: Threshold | None = None
    violations: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not (self.threshold is not None and self.threshold.gate and self.violations)

    def as_dict(self) -> dict[str, Any]:
        return {"arms": self.arms, "corpus": self.corpus, "window": self.window, "n_tokens": self.n_tokens,
                "summary": self.summary.as_dict(), "timing": self.timing, "kind": self.kind,
                "threshold": self.threshold.as_dict() if self.threshold else None,
                "violations": list(self.violations), "passed": self.passed}


def _scratch_dir() -> Path | None:
    """Shared memory when the host has it (the rows never touch a disk), else the temp dir."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and shm.stat().st_mode & 0o002 else None


@contextlib.contextmanager
def _rows_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="harness-agree-", dir=_scratch_dir()) as tmp:
        yield Path(tmp)


@dataclass(frozen=True, kw_only=True)
class _Kept:
    """Arm A's rows of one corpus cut, kept by an earlier :func:`agree` against the same reference."""

    tokens: list[int]
    n_vocab: int
    describe: dict[str, Any]
    timing: ArmTiming


class ReferenceRows:
    """A directory where :func:`agree` keeps the reference arm's per-window rows, so that a series of
    comparisons against one reference (every CPU level against ggml's pick) evaluates it once.
    Keyed by everything that determines the rows: arm A's spec with its sizes, the model, the corpus,
    the window and the token limit. The rows of 4096 tokens of a 49152-word vocabulary take ~0.8 GB:
    the directory is a temp dir on disk (not shared memory), removed by its owner."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def slot(self, spec: ArmSpec, shape: Shape, *, model: str, corpus: Corpus, window: int,
             max_tokens: int | None) -> Path:
        import hashlib
        import json

        key = json.dumps({"kind": spec.kind, "options": spec.options, "shape": vars(shape), "model": model,
                          "corpus": corpus.describe(), "window": window, "max_tokens": max_tokens},
                         sort_keys=True, default=str)
        return self.root / hashlib.sha256(key.encode()).hexdigest()[:24]

    @staticmethod
    def load(slot: Path) -> _Kept | None:
        import json

        meta = slot / "meta.json"
        if not meta.is_file():
            return None
        m = json.loads(meta.read_text())
        return _Kept(tokens=m["tokens"], n_vocab=m["n_vocab"], describe=m["describe"], timing=ArmTiming(**m["timing"]))

    @staticmethod
    def seal(slot: Path, kept: _Kept) -> None:
        """Written last: a slot without it (an interrupted comparison) is evaluated again."""
        import json

        (slot / "meta.json").write_text(json.dumps({"tokens": kept.tokens, "n_vocab": kept.n_vocab,
                                                    "describe": kept.describe, "timing": vars(kept.timing)}))


def agree(a: str, b: str, *, model: str, corpus: Corpus, window: int = DEFAULT_WINDOW, max_tokens: int | None = None,
          threads: int | None = None, kind: str | None = None, threshold: Threshold | None = None,
          resamples: int = BOOTSTRAP_RESAMPLES, isolate: bool = True, extra_plugins: Sequence[str] = (),
          on_window: Callable[[int, int], None] | None = None, reference: ReferenceRows | None = None) -> AgreeResult:
    """Compare arms ``a`` (the reference) and ``b`` over ``corpus``; see the module docstring.

    ``reference``: keep A's rows there, and take them from there when an earlier call evaluated the
    same A on the same cut (then A's worker is not started at all)."""
    spec_a, shape_a = arm_spec(a, model=model, window=window, threads=threads)
    spec_b, shape_b = arm_spec(b, model=model, window=window, threads=threads)
    shapes = {"A": shape_a, "B": shape_b}
    slot = None if reference is None else reference.slot(spec_a, shape_a, model=model, corpus=corpus, window=window,
                                                         max_tokens=max_tokens)
    kept = None if slot is None else ReferenceRows.load(slot)
    acc = Accumulator()
    t_start = time.perf_counter()
    specs = {"B": spec_b} if kept is not None else {"A": spec_a, "B": spec_b}
    with started_arms(specs, isolate=isolate, extra_plugins=extra_plugins) as arms:
        t_loaded = time.perf_counter()
        tokens = kept.tokens if kept is not None else [int(t) for t in arms["A"].call("tokenize", text=corpus.text)]
        if [int(t) for t in arms["B"].call("tokenize", text=corpus.text)] != tokens:
            msg = ("the two arms tokenise the corpus differently: they do not run the same model and vocabulary; "
                   "agreement compares one model on two arms")
            raise UsageError(msg)
        windows = cut_windows(tokens, window, max_tokens)
        timing = {role: ArmTiming() for role in arms}
        group = max(shape_a.batch, shape_b.batch)
        t_compare = 0.0
        n_vocab = kept.n_vocab if kept is not None else 0
        if slot is not None:
            slot.mkdir(parents=True, exist_ok=True)
        with _rows_dir() as rows:
            _warm_up(arms, shapes, windows[0], rows)
            t_loop = time.perf_counter()
            for lo in range(0, len(windows), group):
                part = windows[lo:lo + group]
                files: dict[str, list[str]] = {}
                if kept is not None and slot is not None:  # (kept implies slot)
                    files["A"] = [str(slot / f"A-{lo + i}.f32") for i in range(len(part))]
                for role, arm in arms.items():
                    where = slot if role == "A" and slot is not None else rows
                    files[role] = [str(where / f"{role}-{lo + i}.f32") for i in range(len(part))]
                    reply = arm.call("evaluate", windows=[w.fed for w in part], batch=shapes[role].batch,
                                     chunk=shapes[role].chunk, out=files[role])
                    timing[role] = timing[role].add(reply)
                    n_vocab = int(reply["n_vocab"])
                t0 = time.perf_counter()
                for i, w in enumerate(part):
                    shape = (len(w.fed), n_vocab)
                    la = np.memmap(files["A"][i], dtype=np.float32, mode="r", shape=shape)
                    lb = np.memmap(files["B"][i], dtype=np.float32, mode="r", shape=shape)
                    acc.add(w.start, compare_window(la, lb, np.asarray(w.targets)))
                    del la, lb
                    for role in files:
                        if not (role == "A" and slot is not None):
                            Path(files[role][i]).unlink()
                t_compare += time.perf_counter() - t0
                if on_window is not None:
                    on_window(min(lo + group, len(windows)), len(windows))
            t_end = time.perf_counter()
        described: dict[str, dict[str, Any]] = {role: {"spec": spec.spec, "name": spec.name, "shape": vars(shapes[role]),
                            "shape_text": shapes[role].describe(),
                            "describe": arms[role].describe() if role in arms else kept.describe if kept else {}}
                     for role, spec in (("A", spec_a), ("B", spec_b))}
        if kept is None and slot is not None:
            ReferenceRows.seal(slot, _Kept(tokens=tokens, n_vocab=n_vocab, describe=described["A"]["describe"],
                                           timing=timing["A"]))
    if kept is not None:
        timing["A"] = kept.timing  # A's own evaluation, from the call that made its rows
    summary = acc.summary(resamples=resamples)
    loop_s = t_end - t_loop
    per_arm = timing["A"].decode_s + timing["B"].decode_s
    timings = {"load_s": t_loaded - t_start, "loop_s": loop_s, "compare_s": t_compare,
               "arms": {role: vars(t) for role, t in timing.items()},
               "eval_tokens_per_s": {role: len(windows) * window / t.decode_s if t.decode_s else None
                                     for role, t in timing.items()},
               "cost_ratio": loop_s / per_arm if per_arm else None, "reference_rows_reused": kept is not None}
    violations = threshold.violations(summary) if threshold is not None else []
    return AgreeResult(arms=described, corpus=corpus.describe(), window=window, n_tokens=len(windows) * window,
                       summary=summary, kld=[k.tolist() for k in acc.kld], timing=timings, kind=kind,
                       threshold=threshold, violations=violations)


def _warm_up(arms: dict[str, ArmHandle], shapes: dict[str, Shape], first: Window, rows: Path) -> None:
    """One short evaluation per arm, not timed: the first decode of a process pays one-time costs."""
    fed = first.fed[:WARMUP_TOKENS]
    for role, arm in arms.items():
        out = rows / f"warmup-{role}.f32"
        arm.call("evaluate", windows=[fed], batch=shapes[role].batch, chunk=min(shapes[role].chunk, len(fed)),
                 out=[str(out)])
        out.unlink()
