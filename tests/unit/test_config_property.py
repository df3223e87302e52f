"""Property tests: whatever YAML arrives, validation never raises and every message is located."""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness.cli
import harness.config.validate as validate
from harness.config.loader import Diagnostic
from harness.config.validate import Validated, Validator
from harness.core.errors import ConfigError
from harness.engine.plugin import make_manager

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
LOCALAI = Path(__file__).resolve().parents[2] / "tests" / "data" / "localai"
TEXTS = [p.read_text() for p in sorted([*EXAMPLES.glob("*.yaml"), *LOCALAI.glob("*.yaml")])]
DOCS: list[dict[str, Any]] = [yaml.safe_load(t) for t in TEXTS]
#: What `harness validate` prints: every finding with its rule's code, as ruff prints one.
LINE = re.compile(r"^(?P<file>[^\n]+):(?P<line>\d+):(?P<col>\d+): (?P<code>[A-Z]{3}\d{3}) (error|warning|note): [^\n]+$")
#: With the built-in plugins: each engine's own rules are fuzzed too.
VALIDATOR = Validator(engines={"llamacpp", "sdcpp"}, pm=make_manager(autoload=False))
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True), st.text(max_size=20),
    st.sampled_from(["", ":", "a:b", "../x", "/abs", "x.gguf", "{", "video_vae:v", "llama-cpp", "whisper",
                     "sdcpp", "stablediffusion-ggml", "huggingface://a/b.gguf",
                     "name: x\nbackend: llamacpp\n", "video_family:wan"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)
keys = st.one_of(
    st.sampled_from(["name", "backend", "context_size", "parameters", "options", "engine_args",
                     "known_usecases", "cuda", "draft_model", "mmproj", "template", "threads",
                     "model", "temperature", "top_p", "stop", "contex_size", "stopwords", "roles",
                     "function", "max_model_len", "flash_attention", "config_file", "seed"]),
    st.text(max_size=12),
)
option_items = st.one_of(
    st.text(max_size=30),
    st.builds(lambda k, v: f"{k}:{v}",
              st.sampled_from(["block_size", "video_vae", "audio_vae", "video_partition",
                               "speculative_config", "enable_prefix_caching", "sampling.top_k",
                               "video_num_frames", "video_width", "scheduling_policy", "bogus",
                               "video_family", "clip_l_path", "n_parallel", "video_canvas"]),
              st.one_of(st.text(max_size=12), st.integers(-5, 2000).map(str))),
)


def check(items: list[Validated | Diagnostic], text: str) -> None:
    n_lines = len(re.split(r"\r\n|[\r\n\x85\u2028\u2029]", text)) + 1  # YAML's line breaks
    for item in items:
        diags = item.diagnostics if isinstance(item, Validated) else (item,)
        for d in diags:
            assert LINE.match(d.text()), d.text()  # every finding carries its code
            assert 1 <= d.line <= n_lines and d.col >= 1
            assert d.severity in ("error", "warning", "note")


@SETTINGS
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    check(VALIDATOR.validate_text(text, "r.yaml"), text)


@SETTINGS
@given(st.dictionaries(keys, values, max_size=8))
def test_random_documents(doc: dict[str, Any]) -> None:
    text = yaml.safe_dump(doc, allow_unicode=True)
    check(VALIDATOR.validate_text(text, "r.yaml"), text)


def _mutate(doc: Any, path: list[Any], op: str, value: Any) -> Any:
    if not path:
        return value if op == "replace" else doc
    head, *rest = path
    if isinstance(doc, dict) and head in doc:
        out = dict(doc)
        if not rest and op == "delete":
            del out[head]
        else:
            out[head] = _mutate(doc[head], rest, op, value)
        return out
    return doc


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc: Any = draw(st.sampled_from(DOCS))
    for _ in range(draw(st.integers(1, 4))):
        path = list(draw(st.sampled_from(_paths(doc))))
        op = draw(st.sampled_from(["replace", "delete", "add", "option"]))
        if op == "add":
            path.append(draw(keys))
            op = "replace"
        if op == "option" and isinstance(doc, dict):
            opts = doc.get("options")
            doc = {**doc, "options": [*(opts if isinstance(opts, list) else []), draw(option_items)]}
            continue
        doc = _mutate(doc, path, op, draw(values))
    return doc if isinstance(doc, dict) else {"root": doc}


@SETTINGS
@given(mutated())
def test_mutated_documents(doc: dict[str, Any]) -> None:
    text = yaml.safe_dump(doc, allow_unicode=True, default_flow_style=False)
    check(VALIDATOR.validate_text(text, "m.yaml"), text)


@st.composite
def mutated_text(draw: st.DrawFn) -> str:
    text: str = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 5))):
        i = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "dup"]))
        if kind == "insert":
            text = text[:i] + draw(st.sampled_from([":", "-", " ", "\n", "[", "{", "'", '"', "&a",
                                                    "*a", "\t", "#", "0", "x", "<<: *a\n"])) + text[i:]
        elif kind == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 10)):]
        else:
            text = text[:i] + text[max(0, i - 20):i] + text[i:]
    return text


@SETTINGS
@given(mutated_text())
def test_mutated_text(text: str) -> None:
    check(VALIDATOR.validate_text(text, "t.yaml"), text)


@pytest.fixture(scope="module")
def workdir() -> Any:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(mutated_text(), mutated().map(yaml.safe_dump)), st.booleans())
def test_cli_exit_codes(workdir: Path, monkeypatch: pytest.MonkeyPatch, text: str, as_json: bool) -> None:
    monkeypatch.setattr(harness.cli, "COMMAND_MODULES", ("harness.cli.config",))
    monkeypatch.setattr(validate, "known_engines_from_plugins", lambda: frozenset({"llamacpp"}))
    f = workdir / "c.yaml"
    f.write_text(text, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = harness.cli.main(["validate", *(["--json"] if as_json else []), str(f)])
    assert code in (0, ConfigError.exit_code)  # an invalid config is a ConfigError (exit 3)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    if not as_json:
        lines = out.getvalue().splitlines()
        assert all(LINE.match(line) for line in lines)
        assert (code == ConfigError.exit_code) == any(" error: " in line for line in lines)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(mutated_text(), mutated().map(yaml.safe_dump)), st.sampled_from(["show", "select"]),
       st.booleans())
def test_show_and_select_always_answer(workdir: Path, monkeypatch: pytest.MonkeyPatch, text: str, cmd: str,
                                       as_json: bool) -> None:
    """Any config: diagnostics and what can be resolved, never a traceback; --json is valid JSON."""
    import harness.cli.config as config_cli
    import harness.engine.plugin
    from harness.core.types import HostInfo

    monkeypatch.setattr(harness.cli, "COMMAND_MODULES", ("harness.cli.config",))
    monkeypatch.setattr(harness.engine.plugin, "get_manager", lambda: VALIDATOR._pm)
    monkeypatch.setattr(config_cli, "probe_host", lambda: HostInfo(
        os="linux", arch="x86_64", cpu_model="t", microarch="x", simd=(), cores=2, memory_bytes=1))
    f = workdir / "c.yaml"
    f.write_text(text, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    argv = [*(["config", "show"] if cmd == "show" else ["select"]), *(["--json"] if as_json else []), str(f)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = harness.cli.main(argv)
    # 3: the config is invalid (ConfigError); 1: select found no engine for a valid one; 2: usage
    assert code in (0, 1, 2, ConfigError.exit_code)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    if as_json and code != 2:
        json.loads(out.getvalue(), parse_constant=lambda c: pytest.fail(f"bare {c} in --json output"))
