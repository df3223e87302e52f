from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from harness.core.errors import ChecksumError, UnsafeArchiveError
from harness.source.cache import download, extract_once, safe_extract


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def test_download_verifies_sha256(tmp_path: Path) -> None:
    src = tmp_path / "pkg.tar.gz"
    src.write_bytes(b"payload")
    good = hashlib.sha256(b"payload").hexdigest()
    out = download(src.as_uri(), tmp_path / "dl" / "pkg.tar.gz", sha256=good)
    assert out.read_bytes() == b"payload"


def test_sha256_mismatch_refuses_and_names_both_hashes(tmp_path: Path) -> None:
    src = tmp_path / "pkg.tar.gz"
    src.write_bytes(b"tampered")
    expected = "0" * 64
    dest = tmp_path / "dl" / "pkg.tar.gz"
    with pytest.raises(ChecksumError) as e:
        download(src.as_uri(), dest, sha256=expected)
    assert expected in str(e.value)
    assert hashlib.sha256(b"tampered").hexdigest() in str(e.value)
    assert not dest.exists(), "a file with the wrong hash must not be left in the cache"


@pytest.mark.parametrize(
    "member",
    [
        _file("../evil.txt"),
        _file("pkg/../../evil.txt"),
        _file("/etc/evil.txt"),
        _link("pkg/link", "/etc/passwd"),
        _link("pkg/link", "../../outside"),
        _link("pkg/hard", "/etc/passwd", tarfile.LNKTYPE),
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "abs-symlink", "escaping-symlink", "abs-hardlink"],
)
def test_malicious_tar_members_are_refused(tmp_path: Path, member: tuple[tarfile.TarInfo, bytes | None]) -> None:
    archive = _tar(tmp_path / "bad.tar.gz", [_file("pkg/ok.txt"), member])
    with pytest.raises(UnsafeArchiveError):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()


def test_malicious_zip_member_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("pkg/ok.txt", "ok")
        zf.writestr("../evil.txt", "evil")
    with pytest.raises(UnsafeArchiveError, match=r"evil\.txt"):
        safe_extract(archive, tmp_path / "out")


def test_symlink_inside_tree_is_allowed(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "ok.tar.gz", [_file("pkg/a.txt", b"A"), _link("pkg/b.txt", "a.txt")])
    safe_extract(archive, tmp_path / "out")
    assert (tmp_path / "out" / "pkg" / "b.txt").read_text() == "A"


def test_extract_once_is_idempotent_and_read_only(tmp_path: Path, cache: Path) -> None:
    archive = _tar(tmp_path / "ok.tar.gz", [_file("pkg/a.txt", b"A")])
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    root, first = extract_once(archive, sha, meta={})
    root2, second = extract_once(archive, sha, meta={})
    assert (first, second) == (True, False)
    assert root == root2
    f = root / "tree" / "pkg" / "a.txt"
    assert f.read_text() == "A"
    assert not f.stat().st_mode & 0o222, "the pristine source is read-only"
