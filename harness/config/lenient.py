"""The typed config of an imperfect document: every value the checks refused left out.

``config show``, ``select`` and the engine plugins' rules answer for a config with
errors too; they work on this best-effort :class:`~harness.config.model.ModelConfig`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harness.config.loader import Path_
from harness.config.model import ModelConfig, Parameters, model_config


def _child(cur: Any, part: str | int) -> Any:
    """``cur[part]`` when it is there, else :data:`_DROPPED`."""
    if isinstance(cur, dict):
        return cur.get(part, _DROPPED)
    if isinstance(cur, list) and isinstance(part, int) and part < len(cur):
        return cur[part]
    return _DROPPED


def _drop(data: Any, path: Path_) -> None:
    cur = data
    for part in path[:-1]:
        cur = _child(cur, part)
        if cur is _DROPPED:
            return
    last = path[-1] if path else None
    if isinstance(cur, dict) and last in cur:
        del cur[last]
    elif isinstance(cur, list) and isinstance(last, int) and last < len(cur):
        cur[last] = _DROPPED


_DROPPED = object()


def _strip_dropped(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_dropped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_dropped(v) for v in value if v is not _DROPPED]
    return value


def _copy(value: Any) -> Any:
    """A copy of loaded YAML data (mappings, lists and immutable scalars), without deepcopy's memo."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def best_effort_config(data: Any, bad: Iterable[Path_]) -> ModelConfig:
    """The typed config of ``data`` with every refused value left out.

    Missing ``name`` / ``parameters.model`` (a gallery template, or an error) become "":
    what is left still tells ``config show``, ``select`` and engine rules everything else.
    """
    if not isinstance(data, dict):
        return ModelConfig(name="", parameters=Parameters(model=""))
    drop = sorted({path for path in bad if path}, key=len, reverse=True)
    if drop:  # a copy to drop from: the document keeps what was written
        clean = _copy(data)
        for path in drop:
            _drop(clean, path)
        clean = _strip_dropped(clean)
    else:  # nothing to drop: the top level is copied only to fill name / parameters.model in
        clean = dict(data)
    if not isinstance(clean.get("name"), str):
        clean["name"] = ""
    params = clean.get("parameters")
    params = clean["parameters"] = dict(params) if isinstance(params, dict) else {}
    if not isinstance(params.get("model"), str):
        params["model"] = ""
    try:
        return model_config(clean)
    except (TypeError, ValueError):  # a shape the schema let through but the types do not take
        return ModelConfig(name=clean["name"], parameters=Parameters(model=params["model"]))


def best_effort(data: Any, bad: Iterable[Path_]) -> ModelConfig:
    """:func:`best_effort_config`, never raising (a nesting too deep to copy gives an empty config)."""
    try:
        return best_effort_config(data, bad)
    except RecursionError:  # nesting within the loader's limit can still be too deep to copy
        return ModelConfig(name="", parameters=Parameters(model=""))
