"""YAML data files the project ships or reads (descriptors, matrix rows, vocabularies).

One loader for all of them: libyaml's C parser where PyYAML has it (about 10x faster than the
pure-Python one, which made start-up slow), the safe subset always. Model configs have their
own loader with positions (harness.config.loader).

A recipe is untrusted input (an ``$HARNESS_ENGINES_PATH`` folder, a descriptor from git history),
so the loader is bounded as well as safe: no aliases (nine lines of nested ``*a`` expand to
hundreds of millions of nodes once anything walks the result), no merge keys (they exist to merge
aliases), no key given twice (PyYAML keeps the last silently; LocalAI's yaml.v3 refuses it), and
numbers within 64 bits (a 100,000-digit integer is otherwise a traceback from ``int()``). Each
refusal is a :class:`ConfigError` that says ``file:line``.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, NoReturn

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode

from harness.core.errors import ConfigError

if TYPE_CHECKING:
    _Base = yaml.SafeLoader
else:
    _Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: the longest number a data file may write: 64 bits in binary with a separator every 4 digits
#: fits; anything longer is refused before ``int()``/``float()`` sees it.
MAX_NUMBER_CHARS = 100
INT_MIN, INT_MAX = -(2**63), 2**64 - 1

_construct_object = yaml.constructor.BaseConstructor.construct_object
_MERGE = "tag:yaml.org,2002:merge"
_VALUE = "tag:yaml.org,2002:value"
_TAG_PREFIX = "tag:yaml.org,2002:"


class _AliasError(Exception):
    """A node reached a second time; :func:`load_yaml` finds the alias's own line and name."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        self.node = node


class _Loader(_Base):
    """The safe loader, refusing aliases, merge keys, duplicate keys and absurd numbers.

    libyaml composes the node graph in C; an alias there is the anchored node object itself, so
    construction (Python either way) sees a node it has already built exactly when the text has an
    alias. Refusing rather than bounding the expansion: no recipe needs one, and a refusal leaves
    no size to tune."""

    where = "<string>"

    def _error(self, node: Node, message: str) -> NoReturn:
        msg = f"{self.where}:{node.start_mark.line + 1}: {message}"
        raise ConfigError(msg)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        if node in self.constructed_objects:
            raise _AliasError(node)
        try:
            return _construct_object(self, node, deep)
        except (ValueError, KeyError, AttributeError, IndexError, TypeError, OverflowError) as e:
            # PyYAML's own converters under an explicit tag (``!!int twelve``, ``!!timestamp soon``)
            tag = node.tag.replace(_TAG_PREFIX, "!!")
            value = f" {node.value[:60]!r}" if isinstance(node, ScalarNode) else ""
            self._error(node, f"{tag}{value} cannot be read as {tag} ({type(e).__name__}: {str(e)[:120]}); "
                              "fix the value or drop the tag")

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        # SafeConstructor's flatten_mapping and BaseConstructor's loop in one pass, with the checks
        if not isinstance(node, MappingNode):
            raise ConstructorError(None, None, f"expected a mapping node, but found {type(node).__name__}", node.start_mark)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self._error(key_node, "merge key '<<': recipe YAML takes no merge keys or aliases; "
                                      "write the keys out in this mapping")
            if key_node.tag == _VALUE:
                key_node.tag = "tag:yaml.org,2002:str"
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in mapping
            except TypeError:  # a list or mapping as a key
                raise ConstructorError("while constructing a mapping", node.start_mark, "found unhashable key",
                                       key_node.start_mark) from None
            if duplicate:
                first = next(k for k, _ in node.value if self.constructed_objects.get(k, self) == key)
                self._error(key_node, f"duplicate key {str(key)[:80]!r} (first on line {first.start_mark.line + 1}): "
                                      "a mapping gives each key once (the YAML spec, and LocalAI's yaml.v3, "
                                      "refuse a repeat; PyYAML would keep the last silently); remove one")
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping

    def _refuse_long(self, node: ScalarNode, kind: str) -> None:
        if len(node.value) > MAX_NUMBER_CHARS:
            self._out_of_range(node, kind)

    def _out_of_range(self, node: Node, kind: str) -> NoReturn:
        text = str(node.value)
        shown = f"{text[:20]}... ({len(text)} characters)" if len(text) > 40 else text
        bound = ("64-bit (-2**63 to 2**64-1)" if kind == "integer"
                 else "finite doubles (infinity and NaN written .inf and .nan)")
        self._error(node, f"{kind} {shown} is out of range: numbers in recipe YAML are {bound}, written in at "
                          f"most {MAX_NUMBER_CHARS} characters; quote it if it is text (a hash, a version)")

    def construct_yaml_int(self, node: ScalarNode) -> int:
        self._refuse_long(node, "integer")
        value: int = super().construct_yaml_int(node)
        if not INT_MIN <= value <= INT_MAX:
            self._out_of_range(node, "integer")
        return value

    def construct_yaml_float(self, node: ScalarNode) -> float:
        self._refuse_long(node, "float")
        value: float = super().construct_yaml_float(node)
        if not math.isfinite(value) and str(node.value).lstrip("+-").lower() not in (".inf", ".nan"):
            self._out_of_range(node, "float")  # 1e999: a finite spelling that overflowed
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)


def load_yaml(text: str, *, where: str | os.PathLike[str] = "<string>") -> Any:
    """Parse ``text`` with the safe, bounded loader (no Python tags, no aliases, no duplicate keys,
    numbers within 64 bits); ``where`` (the file's path) starts every error as ``where:line:``.

    :raises ConfigError: for invalid YAML as well as for what the loader refuses."""
    loader = _Loader(text)
    loader.where = os.fspath(where)
    try:
        return loader.get_single_data()
    except _AliasError as e:
        _refuse_alias(text, loader.where, e.node)
    except yaml.MarkedYAMLError as e:
        mark, context = e.problem_mark or e.context_mark, e.context
        if context and e.context_mark and e.context_mark.line != getattr(mark, "line", None):
            context += f" (from line {e.context_mark.line + 1})"
        problem = "; ".join(str(p) for p in (context, e.problem) if p)
        at = f":{mark.line + 1}" if mark else ""
        msg = f"{loader.where}{at}: not valid YAML: {problem}" + (f" (column {mark.column + 1})" if mark else "")
        raise ConfigError(msg) from None
    except yaml.reader.ReaderError as e:  # its position is in bytes (libyaml) or characters: find the line
        char = chr(e.character) if isinstance(e.character, int) else str(e.character)
        pos = text.find(char)
        line = f":{text.count(chr(10), 0, pos) + 1}" if pos >= 0 else ""
        msg = (f"{loader.where}{line}: not valid YAML: character {char!r}: {e.reason}; remove it, or write "
               "it as an escape in a double-quoted string")
        raise ConfigError(msg) from None
    except yaml.YAMLError as e:
        msg = f"{loader.where}: not valid YAML: {e}"
        raise ConfigError(msg) from None
    finally:
        loader.dispose()


def _refuse_alias(text: str, where: str, node: Node) -> NoReturn:
    """The refusal of the text's first alias, with its line and name (found again by events: a node
    does not know the aliases that reach it)."""
    line, name = node.start_mark.line + 1, "?"
    for event in yaml.parse(text, Loader=_Base):
        if isinstance(event, yaml.AliasEvent):
            line, name = (event.start_mark.line + 1 if event.start_mark else line), str(event.anchor)
            break
    msg = (f"{where}:{line}: alias *{name}: recipe YAML takes no aliases (an alias repeats an anchored "
           "value, and nested ones expand without bound); write the value out where it is used")
    raise ConfigError(msg)
