"""``harness agree``: arm specs and batch shapes, windows, the streamed run (toy arms), the CLI,
the thresholds of the descriptor and the pinned corpus."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from harness.agree import corpus as corpora
from harness.agree.run import agree, arm_spec, cut_windows
from harness.agree.stats import Accumulator, PositionStats, summarize
from harness.agree.thresholds import KINDS, Threshold, for_engine, thresholds
from harness.core.errors import (
    AgreementError,
    ChecksumError,
    ConfigError,
    SourceError,
    UnknownNameError,
    UsageError,
)

FAKE = "tests.fakes.agree_arm"


def test_arm_spec_sizes_the_engine_for_its_batch_shape() -> None:
    spec, shape = arm_spec("in-process:variant=cpu,level=haswell,batch=4,chunk=1", model="m.gguf", window=512,
                           threads=2)
    assert (shape.batch, shape.chunk) == (4, 1)
    o = spec.options
    assert (o["max_num_seqs"], o["n_ctx"], o["n_batch"], o["n_ubatch"]) == (4, 2048, 4, 4)
    assert (o["model"], o["threads"], o["level"]) == ("m.gguf", 2, "haswell")
    assert spec.name == "in-process:cpu,level=haswell,batch=4,chunk=1"
    alone, shape1 = arm_spec("in-process", model="m.gguf", window=300, threads=None)
    assert (shape1.batch, shape1.chunk) == (1, 300)
    assert (alone.options["n_ctx"], alone.options["n_batch"]) == (512, 300)
    assert "threads" not in alone.options
    assert "alone" in shape1.describe() and "3 other" in shape.describe()


@pytest.mark.parametrize("text", ["in-process:batch=0", "in-process:chunk=x", "in-process:chunk=513",
                                  "in-process:batch=true"])
def test_arm_spec_refuses_bad_shapes(text: str) -> None:
    with pytest.raises(UsageError, match=r"batch|chunk"):
        arm_spec(text, model="m", window=512, threads=None)


def test_windows_score_each_token_once() -> None:
    tokens = list(range(100, 111))  # 11 tokens: 10 targets
    ws = cut_windows(tokens, 4)
    assert [w.start for w in ws] == [0, 4]
    assert ws[0].fed == [100, 101, 102, 103] and ws[0].targets == [101, 102, 103, 104]
    assert ws[1].fed == [104, 105, 106, 107] and ws[1].targets == [105, 106, 107, 108]
    assert len(cut_windows(tokens, 4, max_tokens=5)) == 1
    with pytest.raises(UsageError, match="not enough"):
        cut_windows(tokens, 20)
    with pytest.raises(UsageError, match="at least 2"):
        cut_windows(tokens, 1)


def _corpus(text: str) -> corpora.Corpus:
    pin = corpora.CorpusPin(name="t", doc="", package="", version="", filename="t.txt", sha256="0", members={})
    return corpora.Corpus(name="t", text=text, archive=Path("t.txt"), pin=pin)


TEXT = "".join(chr(33 + (i * 7) % 90) for i in range(200))


def test_same_arm_twice_agrees_exactly() -> None:
    r = agree("agree-fake", "agree-fake:batch=3,chunk=5", model="toy", corpus=_corpus(TEXT), window=16,
              isolate=False, extra_plugins=[FAKE], resamples=100)
    s = r.summary
    assert (s.n_windows, s.n_positions) == (12, 192)
    assert s.kld_max == 0.0 and s.top1 == 1.0 and s.ppl_ratio == 1.0
    assert r.arms["B"]["shape"] == {"batch": 3, "chunk": 5}
    assert r.timing["cost_ratio"] is not None and len(r.kld) == 12


def test_reference_rows_are_evaluated_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A series against one reference (cross-variant: every level against ggml's pick) evaluates the
    reference once; the figures are those of a fresh comparison."""
    from harness.agree.run import ReferenceRows
    from tests.fakes import agree_arm

    made: list[agree_arm.AgreeFakeArm] = []
    real = agree_arm.AgreeFakeArm

    def counted(options: dict[str, object]) -> agree_arm.AgreeFakeArm:
        made.append(real(options))
        return made[-1]

    monkeypatch.setattr(agree_arm, "AgreeFakeArm", counted)
    keep = ReferenceRows(tmp_path / "keep")
    kw = {"model": "toy", "corpus": _corpus(TEXT), "window": 16, "isolate": False, "extra_plugins": [FAKE],
          "resamples": 100}
    first = agree("agree-fake", "agree-fake:perturb=0.3", reference=keep, **kw)  # type: ignore[arg-type]
    assert len(made) == 2 and not first.timing["reference_rows_reused"]
    second = agree("agree-fake", "agree-fake:perturb=0.3", reference=keep, **kw)  # type: ignore[arg-type]
    assert len(made) == 3, "the reference's worker was started again"
    assert second.timing["reference_rows_reused"]
    assert second.summary == first.summary
    assert second.summary == agree("agree-fake", "agree-fake:perturb=0.3", **kw).summary  # type: ignore[arg-type]
    # another reference (or another cut) is another slot, evaluated afresh
    agree("agree-fake:shift=1.0", "agree-fake", reference=keep, **kw)  # type: ignore[arg-type]
    agree("agree-fake", "agree-fake", reference=keep, max_tokens=64, **kw)  # type: ignore[arg-type]
    assert len(made) == 3 + 2 + 2 + 2  # the fresh comparison, then the two new slots
    assert len(list((tmp_path / "keep").iterdir())) == 3


def test_a_perturbed_arm_is_seen_and_gated() -> None:
    limit = Threshold(kind="level", why="test", kld_mean=1e-4, top1_min=0.995)
    r = agree("agree-fake", "agree-fake:perturb=0.3", model="toy", corpus=_corpus(TEXT), window=16,
              isolate=False, extra_plugins=[FAKE], resamples=100, kind="level", threshold=limit)
    assert r.summary.kld_mean > 1e-3
    assert not r.passed and any("mean KLD" in v for v in r.violations)
    shifted = agree("agree-fake", "agree-fake:shift=4.0", model="toy", corpus=_corpus(TEXT), window=16,
                    isolate=False, extra_plugins=[FAKE], resamples=100, threshold=limit)
    assert shifted.passed and shifted.summary.kld_max < 1e-6


def test_arms_that_tokenise_differently_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fakes import agree_arm

    calls = {"n": 0}
    real = agree_arm.AgreeFakeArm.tokenize

    def tokenize(self: agree_arm.AgreeFakeArm, text: str) -> list[int]:
        calls["n"] += 1
        return real(self, text) + ([1] if calls["n"] == 2 else [])

    monkeypatch.setattr(agree_arm.AgreeFakeArm, "tokenize", tokenize)
    with pytest.raises(UsageError, match="tokenise the corpus differently"):
        agree("agree-fake", "agree-fake", model="toy", corpus=_corpus(TEXT), window=16, isolate=False,
              extra_plugins=[FAKE])


def _summary(kld_mean: float, top1: float) -> object:
    acc = Accumulator()
    n = 1000
    k = np.full(n, kld_mean)
    t = np.arange(n) < round(top1 * n)
    acc.add(0, PositionStats(kld=k, top1=t, nll_a=np.ones(n), nll_b=np.ones(n)))
    return summarize(acc, resamples=50)


def test_threshold_violations_name_each_limit() -> None:
    t = Threshold(kind="level", why="w", kld_mean=1e-4, top1_min=0.995, kld_p99=1e-3, ppl_ratio_max=1.01)
    assert t.violations(_summary(5e-5, 0.999)) == []  # type: ignore[arg-type]
    v = t.violations(_summary(2e-3, 0.99))  # type: ignore[arg-type]
    assert any(x.startswith("mean KLD") for x in v) and any(x.startswith("top-1") for x in v)
    assert any(x.startswith("p99 KLD") for x in v)


def test_descriptor_thresholds_cover_every_kind_with_a_reason() -> None:
    table = for_engine("llamacpp")
    assert set(table) == set(KINDS)
    for kind, t in table.items():
        assert len(t.why) > 40, kind  # a reason, not a placeholder
    assert table["pin"].gate is False  # pin moves are reported, gated only where the descriptor says
    assert table["level"].kld_mean is not None and table["level"].top1_min is not None
    with pytest.raises(UnknownNameError):
        thresholds({"thresholds": {"levle": {"why": "x"}}})
    with pytest.raises(ConfigError, match=r"thresholds\.level"):
        thresholds({"thresholds": {"level": {"why": "x", "kld": 1}}})


def test_schema_refuses_a_threshold_without_why(tmp_path: Path) -> None:
    import jsonschema

    from harness.engine.descriptor import engine_schema

    schema = engine_schema()["properties"]["qualify"]
    v = jsonschema.Draft202012Validator({**schema, "$defs": engine_schema()["$defs"]})
    assert not list(v.iter_errors({"agreement": {"thresholds": {"level": {"why": "measured", "kld_mean": 1e-4}}}}))
    assert list(v.iter_errors({"agreement": {"thresholds": {"level": {"kld_mean": 1e-4}}}}))
    assert list(v.iter_errors({"agreement": {"thresholds": {"level": {"why": "x", "top1_min": 2}}}}))


# ---------------------------------------------------------------------------- the corpus


def _sdist(tmp_path: Path, files: dict[str, bytes]) -> Path:
    path = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_members_are_read_in_pin_order_and_verified(tmp_path: Path) -> None:
    one, two = b"First text.\n", b"Second text.\n"
    archive = _sdist(tmp_path, {"pkg-1.0/b.txt": two, "pkg-1.0/a.txt": one})
    pins = {"pkg-1.0/a.txt": hashlib.sha256(one).hexdigest(), "pkg-1.0/b.txt": hashlib.sha256(two).hexdigest()}
    assert corpora.read_members(archive, pins) == "First text.\n\nSecond text.\n"
    with pytest.raises(ChecksumError, match=r"a\.txt"):
        corpora.read_members(archive, {**pins, "pkg-1.0/a.txt": "0" * 64})
    with pytest.raises(SourceError, match="no member"):
        corpora.read_members(archive, {"pkg-1.0/c.txt": "0" * 64})


def test_the_pinned_corpus_is_public_domain_prose() -> None:
    pins, default = corpora.load_pins()
    pin = pins[default]
    assert pin.sha256 and len(pin.members) >= 4
    assert all(len(h) == 64 for h in pin.members.values())
    assert "public domain" in pin.doc


def test_a_pin_outside_the_archive_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "corpora.yaml"
    bad.write_text("corpora:\n  x:\n    package: p\n    version: '1'\n    filename: p.tar.gz\n    sha256: a\n"
                   "    members:\n      ../etc/passwd: b\n")
    with pytest.raises(ConfigError, match="relative path"):
        corpora.load_pins(bad)


# ---------------------------------------------------------------------------- the command line


def test_cli_parses_and_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import build_parser, main

    args = build_parser().parse_args(["agree", "in-process:level=haswell", "in-process:level=zen4", "--kind", "level",
                                      "--gate", "--tokens", "4096", "--window", "256", "--json"])
    assert (args.a, args.b, args.kind, args.gate, args.tokens, args.window) == (
        "in-process:level=haswell", "in-process:level=zen4", "level", True, 4096, 256)
    assert main(["agree", "fake", "fake", "--gate"]) == 2
    captured = capsys.readouterr()
    assert "--gate needs --kind" in captured.out + captured.err
    assert main(["agree", "fake", "fake", "--window", "1"]) == 2
    assert main(["agree", "fake", "fake", "--window", "512", "--tokens", "100"]) == 2


def test_cli_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole command on the toy arms (in this process): JSON, markdown, plot, the gate's exit code."""
    from harness.agree import run
    from harness.cli import main

    real = run.agree
    monkeypatch.setattr(run, "agree", lambda *a, **k: real(*a, **{**k, "isolate": False, "extra_plugins": [FAKE]}))
    text = tmp_path / "c.txt"
    text.write_text(TEXT)
    base = ["agree", "agree-fake", "agree-fake:perturb=0.3", "--model", "toy", "--corpus-file", str(text),
            "--window", "16", "--resamples", "50", "--out", str(tmp_path / "r")]
    assert main([*base, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    out = Path(data["report_dir"])
    assert data["summary"]["kld_mean"] > 0 and Path(data["plot"]).is_file()
    md = (out / "agree.md").read_text()
    assert "| mean KLD (nats) |" in md and "top-1 agreement" in md
    assert json.loads((out / "agree.json").read_text())["kld"]
    assert main([*base, "--no-plot", "--kind", "level", "--gate"]) == AgreementError.exit_code
    captured = capsys.readouterr()
    assert "AgreementError" in captured.out + captured.err and "worst position" in captured.out + captured.err
