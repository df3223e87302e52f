"""Docs extraction for the config dataclasses: the doc string written under each field.

Kept apart from the data classes (:mod:`harness.config.model`) and the schema generator
(:mod:`harness.config.schema`), as scikit-build-core splits ``settings/documentation.py``
from its model and its JSON Schema: both read this module, neither imports the other's.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap


def field_docs(cls: type) -> dict[str, str]:
    """Doc strings written under the fields of a dataclass, by field name."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    return docs
