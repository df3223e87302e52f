"""The engine contract (harness.runtime.contract): what each engine plugin's loaded engine claims, and
the one table that maps a binding's C++ errors. mypy --strict checks the claims statically (nox lint
and tests run it over the plugins); this checks them at run time, and the error table."""

from __future__ import annotations

import pytest

from harness.core import errors
from harness.runtime import contract, native


def test_each_engine_has_the_capabilities_it_claims() -> None:
    from harness_plugins import sdcpp
    from harness_plugins.llamacpp.engine import Engine as Llama
    from harness_plugins.vllmcpp.engine import Engine as Vllm

    assert contract.capabilities(Llama) == ["text", "chat", "embeddings", "tokens", "sessions"]
    assert contract.capabilities(Vllm) == ["text"]
    assert callable(sdcpp.video_generate)


def test_plugins_use_the_public_helpers_only() -> None:
    import ast

    from tests.unit.sources import ROOT, plugin_files

    private = [f"{p.relative_to(ROOT)}: {node.module}.{a.name}" for p in plugin_files()
               for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("harness.") for a in node.names if a.name.startswith("_")]
    assert private == []


class ContextOverflowError(Exception):
    """Stands for the binding's exception of that name (pybind11 registers it)."""


@pytest.mark.parametrize(("raised", "becomes"), [
    (ContextOverflowError("too long"), errors.ContextOverflowError),
    (ValueError("bad temperature"), errors.InvalidRequestError),
    (RuntimeError("decode failed"), errors.EngineError),
])
def test_binding_errors_map_through_one_table(raised: BaseException, becomes: type) -> None:
    out = native.translate_error(raised)
    assert isinstance(out, becomes) and str(out) == str(raised)


def test_an_unknown_exception_passes_unchanged() -> None:
    e = KeyError("n_vocab")
    assert native.translate_error(e) is e
    assert set(native.CORE_ERRORS) >= {"ContextOverflowError", "KVCacheFullError", "EngineClosedError",
                                         "ModelLoadError"}
