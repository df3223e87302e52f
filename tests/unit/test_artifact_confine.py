"""Artifacts carry only the trees' own bytes (issue 48, part 3).

A header turned into a symlink to /etc/passwd was collected into ``include/`` as a regular file
holding the host's /etc/passwd. Collecting headers, libraries and programs now follows no symlink
out of the build or source tree (each is refused, named), records a link inside the tree as a
link, and copies the tree's own file where a link inside the tree cannot be kept as one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.build.cmake import _collect
from harness.core.errors import BuildError
from harness.core.types import EngineSpec, SourceSpec

from .test_artifact_collect import listing, plain, versioned, write_reply

SECRET = b"root:*:0:0:the host's own file\n"


def _engine(tmp_path: Path, include: tuple[str, ...] = ("include:*.h",), bins: tuple[str, ...] = ()) -> EngineSpec:
    return EngineSpec(name="tiny", root=tmp_path / "engines" / "tiny", source=SourceSpec(kind="git"), upstream={},
                      cmake={"base": {}}, targets=("tiny",),
                      artifacts={"lib": ("lib*.so*",), "bin": bins, "include": include}, abi={})


def _trees(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(source tree, build dir, an outside file holding a secret)."""
    outside = tmp_path / "host" / "passwd"
    outside.parent.mkdir()
    outside.write_bytes(SECRET)
    tree = tmp_path / "work" / "tree"
    (tree / "include").mkdir(parents=True)
    (tree / "include" / "tiny.h").write_text("int tiny(void);\n")
    build = tmp_path / "work" / "build"
    versioned(build, "tiny", "1", "1.0.0")
    plain(build / "bin", "tiny-info")
    write_reply(build, [("tiny", "SHARED_LIBRARY", ["libtiny.so"]), ("tiny-info", "EXECUTABLE", ["bin/tiny-info"])])
    return tree, build, outside


def _no_secret(dest: Path) -> None:
    for p in dest.rglob("*") if dest.exists() else ():
        assert not (p.is_file() and SECRET in p.read_bytes()), f"{p} carries the host's file"


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_a_header_linked_to_a_host_file_is_refused_by_name(tmp_path: Path, how: str) -> None:
    tree, build, outside = _trees(tmp_path)
    link = tree / "include" / "tiny-passwd.h"
    link.symlink_to(outside if how == "absolute" else os.path.relpath(outside, link.parent))
    with pytest.raises(BuildError) as e:
        _collect(_engine(tmp_path), tree, build, tmp_path / "dest")
    why = f"is a link to {outside}" if how == "absolute" else "leads out of the tree through a link"
    assert f"header {link}" in str(e.value) and why in str(e.value) and "never the host's" in str(e.value)
    _no_secret(tmp_path / "dest")


def test_etc_passwd_itself_is_refused(tmp_path: Path) -> None:
    tree, build, _ = _trees(tmp_path)
    (tree / "include" / "llama-passwd.h").symlink_to("/etc/passwd")
    with pytest.raises(BuildError, match=r"llama-passwd\.h \(patched source tree\) is a link to /etc/passwd"):
        _collect(_engine(tmp_path), tree, build, tmp_path / "dest")


def test_a_header_directory_linked_out_is_refused(tmp_path: Path) -> None:
    tree, build, outside = _trees(tmp_path)
    (outside.parent / "evil.h").write_bytes(SECRET)
    (tree / "include" / "sub").symlink_to(outside.parent)
    # a linked directory is never entered: nothing of it is collected
    _collect(_engine(tmp_path, ("include:*/*.h",)), tree, build, tmp_path / "dest")
    assert not (tmp_path / "dest" / "include" / "sub").exists()
    (tree / "include" / "sub").unlink()
    (tree / "inc-out").symlink_to(outside.parent)
    with pytest.raises(BuildError, match=r"inc-out \(patched source tree\) is a link, not a directory"):
        _collect(_engine(tmp_path, ("inc-out:*.h",)), tree, build, tmp_path / "dest2")
    _no_secret(tmp_path / "dest")
    _no_secret(tmp_path / "dest2")


def test_a_library_linked_out_is_refused(tmp_path: Path) -> None:
    tree, build, outside = _trees(tmp_path)
    (build / "libtiny-host.so").symlink_to(outside)
    with pytest.raises(BuildError, match=r"library .*libtiny-host\.so \(build dir\) is a link to"):
        _collect(_engine(tmp_path), tree, build, tmp_path / "dest")
    _no_secret(tmp_path / "dest")


def test_a_program_linked_out_is_refused(tmp_path: Path) -> None:
    tree, build, outside = _trees(tmp_path)
    (build / "bin" / "tiny-info").unlink()
    (build / "bin" / "tiny-info").symlink_to(outside)
    with pytest.raises(BuildError, match=r"program .*bin/tiny-info \(build dir\) is a link to"):
        _collect(_engine(tmp_path, bins=("tiny-info",)), tree, build, tmp_path / "dest")
    _no_secret(tmp_path / "dest")


def test_links_inside_the_tree_are_kept_as_links_or_copied_from_the_tree(tmp_path: Path) -> None:
    tree, build, _ = _trees(tmp_path)
    (tree / "include" / "tiny-alias.h").symlink_to("tiny.h")  # kept: its target is collected too
    (tree / "src").mkdir()
    (tree / "src" / "impl.h").write_text("/* impl */\n")
    (tree / "include" / "tiny-impl.h").symlink_to("../src/impl.h")  # leaves include/: the tree's bytes
    (tree / "include" / "deep").mkdir()
    (tree / "include" / "deep" / "only.txt").write_text("/* deep */\n")
    (tree / "include" / "tiny-deep.h").symlink_to("deep/only.txt")  # target not collected: the tree's bytes
    dest = tmp_path / "dest"
    _collect(_engine(tmp_path, bins=("tiny-info",)), tree, build, dest)
    got = listing(dest)
    assert got["include/tiny-alias.h"] == "-> tiny.h"
    assert got["lib/libtiny.so"] == "-> libtiny.so.1"
    assert got["include/tiny-impl.h"] == "file" and (dest / "include" / "tiny-impl.h").read_text() == "/* impl */\n"
    assert got["include/tiny-deep.h"] == "file" and (dest / "include" / "tiny-deep.h").read_text() == "/* deep */\n"
    assert got["bin/tiny-info"] == "file"


def test_packaging_refuses_an_artifact_whose_link_leads_out(tmp_path: Path) -> None:
    import json

    from harness.build.artifacts import package
    from harness.build.cmake import MANIFEST, file_hashes
    from harness.core.errors import ArtifactError

    _, _, outside = _trees(tmp_path)
    art = tmp_path / "dist" / "tiny-1-cpu"
    for sub in ("lib", "bin", "include"):
        (art / sub).mkdir(parents=True)
    (art / "lib" / "libtiny.so.1").write_bytes(b"elf")
    (art / "lib" / "libtiny.so").symlink_to("libtiny.so.1")
    (art / "lib" / "libtiny-host.so").symlink_to(outside)  # a manifest that vouches for it: verify passes
    manifest = {"engine": "tiny", "pin": "1", "patch_series_hash": "s", "abi_fingerprint": "a", "variant": "cpu"}
    (art / MANIFEST).write_text(json.dumps({**manifest, "files": file_hashes(art)}))
    with pytest.raises(ArtifactError, match=r"libtiny-host\.so leads to .*outside the artifact"):
        package([art], tmp_path / "pkg")
    (art / "lib" / "libtiny-host.so").unlink()
    (art / MANIFEST).write_text(json.dumps({**manifest, "files": file_hashes(art)}))
    package([art], tmp_path / "pkg")
    assert os.readlink(tmp_path / "pkg" / "lib" / "libtiny.so") == "libtiny.so.1"
