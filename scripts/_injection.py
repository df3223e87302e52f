"""Test-only bindings for the studies in scripts/: a copy of the engine's recipe with a few lines of
C++ put after an anchor of its binding source, built and unpacked beside the installed binding (as an
old pin's is), never over it. Used by ``sim_error_rates.py`` (extra work per decoded token) and
``stall_study.py`` (a second OpenMP team)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

ENGINE = "llamacpp"
#: the binding's sources; an injection names its file there (engine.cpp unless told)
SOURCE_DIR = Path("engines") / ENGINE / "binding" / "src"


def injected_binding(work: Path, tag: str, anchor: str, code: str,
                     source: str = "engine.cpp") -> dict[str, str]:
    """Build the binding with ``code`` after the one occurrence of ``anchor`` in ``source``, a file of its
    src/ (engine.cpp, engine_loop.cpp, ...); ``tag`` names the recipe copy and its own build dir. Returns
    the options an in-process target (or arm) needs to load it first (``_engines_path``, ``_binding_path``)."""
    from harness.binding.wheel import unpacked_binding
    from harness.build.cmake import artifact_dir
    from harness.build.matrix import get_variant
    from harness.core import paths
    from harness.engine.descriptor import load_engine, parse_engine

    recipe = work / f"binding-recipe-{tag}"
    src = paths.project_root()
    # the engine's one folder (descriptor, patches, ABI surface, binding source), without its plugin and specs
    shutil.copytree(src / "engines" / ENGINE, recipe / "engines" / ENGINE, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("plugin", "e2e", "__pycache__"))
    # the bindings' shared headers (harness_pydict.h, ...)
    shutil.copytree(src / "engines" / "_shared", recipe / "engines" / "_shared", dirs_exist_ok=True)
    rel = SOURCE_DIR / source
    cpp = recipe / rel
    text = (src / rel).read_text()
    if text.count(anchor) != 1:
        msg = f"{src / rel}: the injection's anchor is not there exactly once (moved?):\n{anchor}"
        raise SystemExit(msg)
    cpp.write_text(text.replace(anchor, anchor + code))
    spec = parse_engine(recipe / "engines" / ENGINE / "engine.yaml")
    # its own binding build dir (a recipe "commit" of its own), never the installed binding's
    spec = dataclasses.replace(spec, recipe_commit=f"study-{tag}")
    artifact = artifact_dir(load_engine(ENGINE), get_variant("cpu"))
    site = unpacked_binding(spec, artifact)
    return {"_engines_path": str(recipe / "engines"), "_binding_path": str(site)}
