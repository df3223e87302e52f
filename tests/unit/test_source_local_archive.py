"""Source kind ``local-archive``: a pinned archive file beside the project (file path or
``file://`` URL plus sha256), verified before extraction, extracted safely, its upstream
repository and commit recorded in the tree's stamp."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from harness.cli import main
from harness.core import paths
from harness.core.errors import ChecksumError, ConfigError, SourceError, UnsafeArchiveError
from harness.core.types import SourceSpec
from harness.engine.descriptor import ENGINES_PATH_ENV, load_engine, parse_engine
from harness.engine.plugin import make_manager
from harness.source.cache import STAMP, archive_path, checking

COMMIT = "d85906ae589661f8321ff393d24bef9d31f4214f"
REPO = "https://github.com/mudler/vllm.cpp"


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    return info, data


def _dir(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info, None


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _good(tmp_path: Path) -> Path:
    """A ``git archive``-shaped tarball: one top folder, the engine's header and sources."""
    return _tar(tmp_path / "shared" / "sources" / "toy-d85906ae.tar.gz", [
        _dir("toy-d85906ae/"), _dir("toy-d85906ae/include/"),
        _file("toy-d85906ae/include/toy.h", b"#define TOY_ABI_VERSION 5\n"),
        _file("toy-d85906ae/CMakeLists.txt", b"project(toy C)\n"),
        _link("toy-d85906ae/README", "CMakeLists.txt"),
    ])


def _spec(archive: Path, sha256: str | None = None, **kw: str) -> SourceSpec:
    return SourceSpec(kind="local-archive", path=str(archive), sha256=sha256 or _sha(archive), url=REPO,
                      commit=COMMIT, **kw)


def _fetch(spec: SourceSpec, engine: str = "toy") -> object:
    pm = make_manager(autoload=False)
    return pm.hook.harness_source_fetch(engine=engine, spec=spec, cache_dir=paths.sources_dir())


def test_fetch_verifies_extracts_once_and_records_the_upstream(tmp_path: Path, cache: Path) -> None:
    archive = _good(tmp_path)
    spec = _spec(archive)
    first = _fetch(spec)
    assert first.fetched and (first.path / "include" / "toy.h").read_bytes() == b"#define TOY_ABI_VERSION 5\n"
    assert first.path.name == "toy-d85906ae", "the archive's one top folder is the tree"
    assert first.digest == spec.sha256 and first.pin == COMMIT[:12]
    second = _fetch(spec)
    assert not second.fetched and second.path == first.path
    stamp = json.loads((paths.sources_dir() / spec.sha256 / STAMP).read_text())
    assert {k: stamp[k] for k in ("kind", "repository", "commit", "path", "filename", "sha256")} == {
        "kind": "local-archive", "repository": REPO, "commit": COMMIT, "path": str(archive),
        "filename": archive.name, "sha256": spec.sha256}
    kept = archive_path("toy", spec.sha256, archive.name)
    assert kept.read_bytes() == archive.read_bytes(), "the verified bytes are kept in the downloads cache"


def test_a_wrong_hash_is_refused_before_anything_is_extracted_or_copied(tmp_path: Path, cache: Path) -> None:
    archive = _good(tmp_path)
    pinned = "0" * 64
    with pytest.raises(ChecksumError) as e:
        _fetch(_spec(archive, pinned))
    assert str(archive) in str(e.value) and pinned in str(e.value) and _sha(archive) in str(e.value)
    assert not (paths.sources_dir() / pinned / "tree").exists()
    assert not archive_path("toy", pinned, archive.name).exists()


HOSTILE = {
    "dotdot": [_file("toy/ok.txt"), _file("toy/../../evil.txt", b"evil")],
    "absolute": [_file("toy/ok.txt"), _file("/tmp/harness-evil-absolute.txt", b"evil")],
    "symlink-out": [_file("toy/ok.txt"), _link("toy/link", "../../evil.txt")],
    "symlink-absolute": [_file("toy/ok.txt"), _link("toy/link", "/etc/passwd")],
    "write-through-symlink": [_dir("toy/"), _link("toy/out", "../.."), _file("toy/out/evil.txt", b"evil")],
    "hardlink-out": [_file("toy/ok.txt"), _link("toy/hard", "/etc/passwd", tarfile.LNKTYPE)],
    "device": [_file("toy/ok.txt"), _link("toy/dev", "", tarfile.CHRTYPE)],
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_archive_with_the_right_hash_is_refused(tmp_path: Path, cache: Path, name: str) -> None:
    # The hash is right (the pin was taken of a hostile file): extraction itself must refuse it.
    archive = _tar(tmp_path / "archives" / "hostile.tar.gz", HOSTILE[name])
    spec = _spec(archive)
    with pytest.raises(UnsafeArchiveError, match="refusing archive"):
        _fetch(spec)
    assert not (paths.sources_dir() / spec.sha256).exists(), "nothing is left under the source's name"
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "archives" / "evil.txt").exists()
    assert not Path("/tmp/harness-evil-absolute.txt").exists()


def test_not_a_regular_file_is_refused_without_blocking(tmp_path: Path, cache: Path) -> None:
    fifo = tmp_path / "archive.tar.gz"
    os.mkfifo(fifo)
    with pytest.raises(SourceError, match=r"a FIFO \(named pipe\), not a regular file"):
        _fetch(_spec(fifo, "1" * 64))


def test_a_missing_archive_names_the_path_hash_and_upstream(tmp_path: Path, cache: Path) -> None:
    missing = tmp_path / "nowhere" / "toy.tar.gz"
    with pytest.raises(SourceError) as e:
        _fetch(_spec(missing, "2" * 64))
    text = str(e.value)
    assert str(missing) in text and "2" * 64 in text and REPO in text and COMMIT in text


def test_the_kept_copy_serves_when_the_original_moved(tmp_path: Path, cache: Path) -> None:
    archive = _good(tmp_path)
    spec = _spec(archive)
    first = _fetch(spec)
    archive.rename(tmp_path / "moved.tar.gz")
    with checking(full=True, repair=True):  # --repair: the archive is needed again
        again = _fetch(spec)
    assert again.path == first.path


def test_verify_rehashes_the_original_and_refuses_a_changed_one(tmp_path: Path, cache: Path) -> None:
    archive = _good(tmp_path)
    spec = _spec(archive)
    _fetch(spec)
    _tar(archive, [_file("toy-d85906ae/include/toy.h", b"#define TOY_ABI_VERSION 6\n")])
    assert not _fetch(spec).fetched, "a plain use checks the tree, not the archive"
    with checking(full=True), pytest.raises(ChecksumError, match=r"toy-d85906ae\.tar\.gz"):
        _fetch(spec)


def test_a_wrong_subdir_and_a_short_commit_are_refused(tmp_path: Path, cache: Path) -> None:
    archive = _good(tmp_path)
    with pytest.raises(SourceError, match=r"source\.subdir"):
        _fetch(_spec(archive, subdir="vendor/toy"))
    short = SourceSpec(kind="local-archive", path=str(archive), sha256=_sha(archive), url=REPO, commit="d85906ae")
    with pytest.raises(SourceError, match="40-hex"):
        _fetch(short)


DESCRIPTOR = """\
name: toy
source:
  kind: local-archive
  path: {path}
  sha256: "{sha}"
  url: {repo}
  commit: {commit}
upstream: {{repository: mudler/toy, commit: d85906ae}}
cmake: {{base: {{CMAKE_BUILD_TYPE: Release}}}}
targets: [toy]
artifacts: {{lib: ["libtoy.so*"], include: ["include:*.h"]}}
abi: {{headers: [include/toy.h], version_macro: TOY_ABI_VERSION}}
"""


def _project(root: Path, path: str, sha: str = "3" * 64, *, drop: str = "") -> Path:
    d = root / "engines" / "toy"
    d.mkdir(parents=True, exist_ok=True)
    text = DESCRIPTOR.format(path=json.dumps(path), sha=sha, repo=REPO, commit=COMMIT)
    lines = [line for line in text.splitlines() if not (drop and line.startswith(f"  {drop}:"))]
    (d / "engine.yaml").write_text("\n".join(lines) + "\n")
    return d / "engine.yaml"


def test_the_descriptor_resolves_the_path_against_its_project_root(tmp_path: Path) -> None:
    project = tmp_path / "wt"
    rel = parse_engine(_project(project, "../shared/sources/toy.tar.gz"))
    assert rel.source.path == str(tmp_path / "shared" / "sources" / "toy.tar.gz")
    assert rel.pin == COMMIT[:12]
    url = parse_engine(_project(project, (tmp_path / "a b.tar.gz").as_uri()))
    assert url.source.path == str(tmp_path / "a b.tar.gz")
    absolute = parse_engine(_project(project, "/srv/toy.tar.gz"))
    assert absolute.source.path == "/srv/toy.tar.gz"


@pytest.mark.parametrize("path", ["https://example.com/toy.tar.gz", "file://otherhost/toy.tar.gz"])
def test_a_remote_path_is_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(ConfigError, match=r"source\.path"):
        parse_engine(_project(tmp_path, path))


@pytest.mark.parametrize("field", ["sha256", "url", "commit", "path"])
def test_the_schema_requires_hash_path_and_upstream(tmp_path: Path, field: str) -> None:
    with pytest.raises(ConfigError, match=f"'{field}' is a required property"):
        parse_engine(_project(tmp_path, "x.tar.gz", drop=field))


def test_harness_fetch_takes_a_descriptor_relative_archive(tmp_path: Path, cache: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    archive = _good(tmp_path)
    project = tmp_path / "wt"
    _project(project, "../shared/sources/toy-d85906ae.tar.gz", sha=_sha(archive))
    monkeypatch.setenv(ENGINES_PATH_ENV, str(project / "engines"))
    # the archive is outside the folder's project: read only for a recipe the user trusts
    monkeypatch.setenv("HARNESS_TRUST", "toy")
    assert load_engine("toy").source.path == str(archive)
    assert main(["fetch", "toy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fetched"] and out["digest"] == _sha(archive) and out["pin"] == COMMIT[:12]
    assert main(["fetch", "--verify", "toy", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checked"] == "full"
