"""JSON values only: what reports and results files hold."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any


def json_value(value: Any) -> Any:
    """Only JSON values: mappings with str keys, lists, str, finite numbers, bool, None.

    Arms describe themselves with whatever their engine hands out (a module's build-info
    dict, paths, tuples, numpy scalars); a Python repr in a JSON string is useless to a tool.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_value(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_value(dataclasses.asdict(value))
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        with contextlib.suppress(TypeError, ValueError):
            return json_value(item())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)
