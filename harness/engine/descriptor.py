"""Engine descriptors: ``engines/<name>/engine.yaml``, validated by a JSON Schema.

Descriptors are found by name in the folders of ``$HARNESS_ENGINES_PATH`` (``os.pathsep``-separated,
searched first, like ``PATH``) and then in the checkout's ``engines/``. Each such folder sits in a
project-shaped root: an engine's ``engines/<name>/patches/`` and ``engines/<name>/abi/`` are beside it, in its parent.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from harness.core import inputs, paths
from harness.core.datafile import load_yaml
from harness.core.errors import ConfigError, HarnessError, UnknownNameError, UsageError
from harness.core.types import EngineSpec, SourceSpec
from harness.engine import confine

DESCRIPTOR = "engine.yaml"
#: Extra folders of engine descriptors, searched before the checkout's ``engines/``.
ENGINES_PATH_ENV = "HARNESS_ENGINES_PATH"


@functools.cache
def engine_schema() -> dict[str, Any]:
    text = resources.files("harness").joinpath("schemas/engine.schema.json").read_text()
    return dict(json.loads(text))


def engines_dir() -> Path:
    """The checkout's ``engines/``."""
    return paths.project_root() / "engines"


def engine_dirs() -> list[Path]:
    """Where descriptors are looked up, in order: ``$HARNESS_ENGINES_PATH``, then ``engines/``."""
    extra = [Path(p).expanduser() for p in os.environ.get(ENGINES_PATH_ENV, "").split(os.pathsep) if p]
    return [*extra, engines_dir()]


def descriptor_path(name: str) -> Path | None:
    """The first ``<dir>/<name>/engine.yaml`` of :func:`engine_dirs`, or None."""
    for d in engine_dirs():
        path = d / name / DESCRIPTOR
        if path.is_file():
            return path
    return None


def engine_names() -> list[str]:
    """Every engine that has a descriptor, sorted."""
    return sorted({p.parent.name for d in engine_dirs() for p in d.glob(f"*/{DESCRIPTOR}")})


def _expand(value: str, upstream: dict[str, Any]) -> str:
    """Replace ``{upstream.key}`` placeholders so the pin is written once."""

    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in upstream:
            msg = f"placeholder {{upstream.{key}}} has no value in upstream:"
            raise ConfigError(msg)
        return str(upstream[key])

    return re.sub(r"\{upstream\.(\w+)\}", sub, value)


def expand_upstream(value: str, upstream: dict[str, Any]) -> str:
    """``value`` with its ``{upstream.key}`` placeholders replaced from ``upstream`` (a recipe whose
    upstream moves, e.g. a bisect's probe of one commit)."""
    return _expand(value, upstream)


def check_name(name: str) -> str:
    """``name`` when it can name an engine (the schema's ``name`` rule): a name no descriptor
    can have is refused before it reaches the file system (a 300-character name is a usage
    error, not "file name too long")."""
    rule = engine_schema()["properties"]["name"]
    if len(name) > rule["maxLength"]:
        msg = (f"engine name {name[:40]!r}... is {len(name)} characters; engine names are at most "
               f"{rule['maxLength']} (`harness engines` lists them)")
        raise UsageError(msg)
    if not re.search(rule["pattern"], name) or "\n" in name:
        raise unknown_engine(name)
    return name


def unknown_engine(name: str) -> UnknownNameError:
    """An unknown engine name; the upstream project's spelling (``stable-diffusion.cpp``, the last part
    of a descriptor's ``upstream.repository``) is answered with the engine's one name."""
    err = UnknownNameError("engine", name, engine_names())
    for engine in engine_names():
        path = descriptor_path(engine)
        try:
            data = load_yaml(inputs.read_text(path, kind="descriptor", error=ConfigError), where=path) if path else {}
            repository = str(data["upstream"]["repository"]) if path else ""
        except (HarnessError, KeyError, TypeError):
            continue
        if repository.rsplit("/", 1)[-1].lower() == name.lower():
            err.args = (f"{err.args[0]}: {name} is the upstream project of engine {engine!r}; "
                        f"engines are named by their folder (engines/{engine}/)",)
            break
    return err


def load_engine(name: str) -> EngineSpec:
    """Load and validate one engine descriptor; unknown names get a 'did you mean'."""
    path = descriptor_path(check_name(name))
    if path is None:
        raise unknown_engine(name)
    return parse_engine(path)


def _field(e: jsonschema.ValidationError) -> str:
    """``source.filename``, ``source.sparse[0]``: where in the descriptor an error is."""
    out = ""
    for part in e.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "<root>"


def _message(e: jsonschema.ValidationError) -> str:
    """The validator's message, or for a rule on a string what the field must be (its
    description) instead of a regex, with the value shortened."""
    if e.validator in ("pattern", "maxLength") and isinstance(e.instance, str):
        value = repr(e.instance) if len(e.instance) <= 80 else f"{e.instance[:60]!r}... ({len(e.instance)} characters)"
        description = e.schema.get("description") if isinstance(e.schema, dict) else None
        return f"{value} is not allowed: {description or e.message}"
    return str(e.message)


def resolve_source_path(value: str, project: Path, *, where: Path) -> Path:
    """``source.path`` as an absolute path: a ``file://`` URL is read as its path (no host but
    ``localhost``), ``~`` is expanded, and a relative path is taken from ``project`` (the root that
    holds the descriptor's ``engines/``), so ``../shared/sources/x.tar.gz`` sits beside it."""
    from urllib.parse import urlsplit
    from urllib.request import url2pathname

    from harness.engine import locations

    value = locations.expand(value, where=f"{where}:source.path")
    if "://" in value:
        parts = urlsplit(value)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            msg = (f"{where}:source.path: {value[:200]!r} is not a local file: give a path or a file:// URL "
                   "(a remote archive belongs to another source kind)")
            raise ConfigError(msg)
        return Path(url2pathname(parts.path))
    p = Path(value).expanduser()
    return p if p.is_absolute() else Path(os.path.normpath(project.absolute() / p))


def resolve_git_url(value: str, project: Path, *, where: Path) -> str:
    """A git ``source.url`` as git fetches it: ``$HARNESS_MIRRORS/...`` and a relative path (taken from
    ``project``, like ``source.path``) become ``file://`` URLs; any other URL is left as written."""
    from harness.engine import locations

    if locations.is_reference(value):
        return Path(locations.expand(value, where=f"{where}:source.url")).as_uri()
    if confine.git_url_is_local(value) and "://" not in value and ":" not in value.split("/", 1)[0]:
        p = Path(value)
        if not p.is_absolute() and not value.startswith("~"):
            return Path(os.path.normpath(project.absolute() / p)).as_uri()
    return value


def parse_engine(path: Path, *, project: Path | None = None) -> EngineSpec:
    """The descriptor at ``path``, validated and confined (:mod:`harness.engine.confine`).

    ``project``: the root a relative ``source.path`` is taken from (default: the folder holding
    the descriptor's ``engines/``; a recipe from git history passes the checkout's, where its
    paths were written)."""
    data = load_yaml(inputs.read_text(path, kind="descriptor", error=ConfigError), where=path)
    return engine_from_data(data, path, project=project)


def engine_from_data(data: Any, path: Path, *, project: Path | None = None) -> EngineSpec:
    """:func:`parse_engine` of a descriptor's parsed ``data`` that will be at ``path`` (``harness pin`` checks
    the text it would write before it writes it)."""
    errors = sorted(jsonschema.Draft202012Validator(engine_schema()).iter_errors(data), key=str)
    if errors:
        lines = [f"{path}:{_field(e)}: {_message(e)}" for e in errors]
        msg = "invalid engine descriptor:\n" + "\n".join(lines)
        raise ConfigError(msg)
    if data["name"] != path.parent.name:
        msg = f"{path}: name {data['name']!r} must match its folder {path.parent.name!r}"
        raise ConfigError(msg)
    confine.check_descriptor(path, data)
    upstream = dict(data["upstream"])
    cmake = dict(data["cmake"])
    cmake["base"] = {k: _expand(str(v), upstream) for k, v in cmake["base"].items()}
    intents = {key: {value: {k: _expand(str(v), upstream) for k, v in defines.items()}
                     for value, defines in values.items()}
               for key, values in cmake.get("intents", {}).items()}
    source = dict(data["source"])
    source["sparse"] = tuple(source.get("sparse", ()))
    if "path" in source:
        source["path"] = str(resolve_source_path(str(source["path"]), project or path.parent.parent.parent, where=path))
    if source.get("kind") == "git" and source.get("url"):
        source["url"] = resolve_git_url(str(source["url"]), project or path.parent.parent.parent, where=path)
    return EngineSpec(
        name=data["name"],
        root=path.parent,
        source=SourceSpec(**source),
        upstream=upstream,
        cmake=cmake,
        targets=tuple(data["targets"]),
        artifacts={k: tuple(v) for k, v in data["artifacts"].items()},
        abi=dict(data["abi"]),
        pinned_on=str(data.get("pinned_on", "")),
        variants=tuple(data.get("variants", ())),
        intents=intents,
        smoke=dict(data.get("smoke", {})),
        cross={k: tuple(v) for k, v in data.get("cross", {}).items()},
        raw=data,
    )


def with_current_build_data(spec: EngineSpec) -> EngineSpec:
    """A recipe from git history written before ``cmake.intents`` and ``smoke:`` existed takes them
    from the working tree's descriptor of the same engine: how an engine spells a matrix row does
    not depend on its pin, and the rows themselves always come from the working tree."""
    if not spec.recipe_commit or (spec.intents and spec.smoke):
        return spec
    try:
        current = load_engine(spec.name)
    except HarnessError:
        return spec
    return dataclasses.replace(spec, intents=spec.intents or current.intents, smoke=spec.smoke or current.smoke)
