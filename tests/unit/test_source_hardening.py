"""The source cache, second pass (issue 27, parts 3 and 4).

3. Integrity covers every file and directory of a cached tree, ``__pycache__`` included, with
   full mode bits, and a sealed manifest; nothing runs byte code from a cached tree.
4. Descriptor fields that name files are validated (a bare file name, a subdir inside the
   tree), downloads are kept per engine and sha256, ``.bad-*`` copies are pruned, and
   ``fetch --verify`` with no archive (or a FIFO, a directory, /dev/zero in its place) says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.build import pipeline
from harness.cli import main
from harness.core.errors import ChecksumError, ConfigError, IntegrityError, SourceError, UsageError
from harness.core.types import SourceSpec
from harness.engine import descriptor as engines
from harness.engine.plugin import make_manager
from harness.source import cache as source

from .test_source_integrity import FILES, Toy, _edit, toy  # noqa: F401 (the fixture)

# --- 3. integrity covers everything ------------------------------------------------------


def _forge_pyc(directory: Path, module: str, source_file: Path, code: str) -> Path:
    """A ``.pyc`` that Python accepts for ``source_file`` (its mtime and size in the header) but
    that runs ``code``: what an attacker drops into a ``__pycache__``."""
    cache = directory / "__pycache__"
    cache.mkdir(exist_ok=True)
    st = source_file.stat()
    from importlib import _bootstrap_external  # type: ignore[attr-defined]

    data = _bootstrap_external._code_to_timestamp_pyc(compile(code, str(source_file), "exec"),
                                                     int(st.st_mtime), st.st_size)
    pyc = cache / f"{module}.{sys.implementation.cache_tag}.pyc"
    pyc.write_bytes(bytes(data))
    return pyc


def test_a_forged_pyc_in_the_pristine_tree_is_refused_and_repair_removes_it(toy: Toy) -> None:  # noqa: F811
    tree = toy.fetch()
    pyc = _forge_pyc(tree.path / "src", "a", tree.path / "src" / "a.c", "print('owned')")
    with pytest.raises(IntegrityError) as e:
        toy.fetch(full=True)
    assert str(pyc) in str(e.value) and "added" in str(e.value)
    with pytest.raises(IntegrityError):
        toy.fetch()  # the cheap check sees it too
    assert toy.fetch(repair=True).fetched
    assert not (tree.path / "src" / "__pycache__").exists(), "repair restores exactly the archive's content"
    assert not toy.fetch(full=True).fetched


def _patched(t: Toy, **kw: bool) -> pipeline.PatchedTree:
    return pipeline.patched_tree(t.engine, make_manager(autoload=False), **kw)


def test_a_forged_pyc_in_the_patched_copy_is_found_and_the_copy_re_created(toy: Toy) -> None:  # noqa: F811
    copy = _patched(toy)
    pkg = copy.path / "src"
    pyc = _forge_pyc(pkg, "a", pkg / "a.c", "print('owned')")
    again = _patched(toy)
    assert again.applied, "a .pyc in the copy is an edit: the copy is made again"
    assert not pyc.exists() and not pyc.parent.exists()
    assert not _patched(toy, full=True).applied


@pytest.mark.parametrize("mode", [0o4444, 0o2444, 0o1444, 0o454, 0o445, 0o644])
def test_any_mode_change_of_a_file_is_an_edit(toy: Toy, mode: int) -> None:  # noqa: F811
    tree = toy.fetch()
    target = tree.path / "src" / "a.c"
    target.chmod(mode)
    assert target.stat().st_mode & 0o7777 == mode
    with pytest.raises(IntegrityError, match=r"1 edited") as e:
        toy.fetch()
    assert str(target) in str(e.value)


@pytest.mark.parametrize("damage", ["chmod", "extra-dir", "extra-deep-file", "dir-removed"])
def test_directories_are_in_the_manifest(toy: Toy, damage: str) -> None:  # noqa: F811
    tree = toy.fetch()
    src = tree.path / "src"
    if damage == "chmod":
        src.chmod(0o777)
        target, what = src, "edited"
    elif damage == "extra-dir":
        target, what = src / "empty", "added"
        target.mkdir()
    elif damage == "extra-deep-file":
        target, what = src / "x" / "y" / "z.h", "added"
        target.parent.mkdir(parents=True)
        target.write_text("#define EVIL 1\n")
    else:
        (src / "a.c").unlink()
        src.rmdir()
        target, what = src, "removed"
    with pytest.raises(IntegrityError) as e:
        toy.fetch(full=True)
    assert what in str(e.value) and str(target) in str(e.value)
    toy.fetch(repair=True)
    assert not toy.fetch(full=True).fetched


def _stamp(t: Toy) -> tuple[Path, dict[str, object]]:
    path = t.cache / "sources" / t.sha256 / source.STAMP
    return path, json.loads(path.read_text())


def test_editing_the_manifest_to_hide_an_edit_is_found(toy: Toy) -> None:  # noqa: F811
    tree = toy.fetch()
    target = tree.path / "src" / "a.c"
    _edit(target, b"int a(void) { return 666; }\n")
    target.chmod(0o444)
    # The attacker rewrites the file's record so that it matches the edit, stat vouchers included.
    path, stamp = _stamp(toy)
    st = target.stat()
    manifest = stamp["manifest"]
    assert isinstance(manifest, dict)
    rec = manifest["toy-1.0/vendor/lib/src/a.c"]
    rec[:2] = [st.st_size, hashlib.sha256(target.read_bytes()).hexdigest()]
    rec[3:] = [st.st_mtime_ns, st.st_ctime_ns]
    path.write_text(json.dumps(stamp))
    with pytest.raises(IntegrityError, match=r"seal") as e:
        toy.fetch()
    assert str(path) in str(e.value) and "--repair" in str(e.value)
    # a full check does not read the manifest at all: it compares the tree with the archive (issue 48)
    with pytest.raises(IntegrityError, match=r"differs from toy-1\.0\.tar\.gz .* itself") as e:
        toy.fetch(full=True)
    assert f"edited  {target}" in str(e.value) and "--repair" in str(e.value)
    assert toy.fetch(repair=True).fetched
    assert target.read_bytes() == FILES["toy-1.0/vendor/lib/src/a.c"]


def test_an_edited_patched_copy_manifest_is_found(toy: Toy) -> None:  # noqa: F811
    from harness.source.patches import STAMP

    copy = _patched(toy)
    target = copy.path / "src" / "a.c"
    target.write_bytes(b"int a(void) { return 666; }\n")
    path = copy.path.parent / STAMP
    stamp = json.loads(path.read_text())
    st = target.stat()
    rec = stamp["manifest"]["src/a.c"]  # the mode did not change: only content and vouchers are forged
    rec[:2] = [st.st_size, hashlib.sha256(target.read_bytes()).hexdigest()]
    rec[3:] = [st.st_mtime_ns, st.st_ctime_ns]
    path.write_text(json.dumps(stamp))
    assert _patched(toy).applied
    assert target.read_bytes() == FILES["toy-1.0/vendor/lib/src/a.c"]


FAKE_CONVERTER = """\
import sys
import gguf
import gguf.util
args = sys.argv[1:]
with open(args[args.index("--outfile") + 1], "wb") as f:
    f.write(b"GGUF")
"""


def test_the_converter_refuses_byte_code_in_the_tree_and_writes_none(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness_plugins.llamacpp import convert

    monkeypatch.setattr(convert, "CONVERTER_MODULES", ())  # the fake needs no torch
    tree = tmp_path / "tree"
    (tree / "gguf-py" / "gguf").mkdir(parents=True)
    init = tree / "gguf-py" / "gguf" / "__init__.py"
    init.write_text("LOADED = 'source'\n")
    (tree / "gguf-py" / "gguf" / "util.py").write_text("X = 1\n")
    (tree / "convert_hf_to_gguf.py").write_text(FAKE_CONVERTER)
    marker = tmp_path / "owned"
    forged = _forge_pyc(init.parent, "__init__", init, f"open({str(marker)!r}, 'w').write('owned')")
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(SourceError, match=r"byte code") as e:
        convert.convert_hf_dir(model, engine_tree=tree)
    assert str(forged.parent) in str(e.value) and "harness fetch --verify llamacpp" in str(e.value)
    assert not marker.exists(), "a .pyc in the tree's __pycache__ was run"
    source.remove(forged.parent)
    convert.convert_hf_dir(model, engine_tree=tree)
    assert not list(tree.rglob("__pycache__")) and not list(tree.rglob("*.pyc")), "no byte code written into the tree"
    meta = json.loads(next((cache / "models" / "converted").glob("*.json")).read_text())
    assert meta["command"][1] == "-B"


# --- 4. descriptors, downloads ------------------------------------------------------------


DESCRIPTOR = """\
name: toy
source: {source}
upstream: {{commit: abcdef1}}
cmake: {{base: {{}}{cmake}}}
targets: [toy]
artifacts: {{lib: [], include: []}}
abi: {{headers: [toy.h]}}
"""
SDIST = "{{kind: pypi-sdist, package: toy, version: '1.0', filename: {filename}, sha256: {sha}{extra}}}"


@pytest.mark.parametrize(("field", "value"), [
    ("source.filename", "/etc/passwd"),
    ("source.filename", "../../outside.tar.gz"),
    ("source.filename", "sub/toy.tar.gz"),
    ("source.filename", ".."),
    ("source.filename", "x" * 300),
    ("source.subdir", "../../../../etc"),
    ("source.subdir", "/etc"),
    ("source.subdir", "vendor/../../.."),
    ("source.version", "../1.0"),
    ("cmake.source_subdir", "../elsewhere"),
])
def test_descriptor_fields_that_name_files_are_refused_with_their_location(
        tmp_path: Path, field: str, value: str) -> None:
    filename = json.dumps(value) if field == "source.filename" else "toy-1.0.tar.gz"
    extra = f", subdir: {json.dumps(value)}" if field == "source.subdir" else ""
    src = SDIST.format(filename=filename, sha="0" * 64, extra=extra)
    if field == "source.version":
        src = src.replace("version: '1.0'", f"version: {json.dumps(value)}")
    cmake = f", source_subdir: {json.dumps(value)}" if field == "cmake.source_subdir" else ""
    path = tmp_path / "engines" / "toy" / "engine.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(DESCRIPTOR.format(source=src, cmake=cmake))
    with pytest.raises(ConfigError) as e:
        engines.parse_engine(path)
    assert f"{path}:{field}: " in str(e.value)
    assert "is not allowed" in str(e.value) and len(str(e.value)) < 600


def test_the_shipped_descriptors_still_validate() -> None:
    for name in engines.engine_names():
        engines.load_engine(name)


def _with_source(t: Toy, **changes: str) -> Toy:
    spec = dataclasses.replace(t.engine.source, **changes)
    return dataclasses.replace(t, engine=dataclasses.replace(t.engine, source=spec))


@pytest.mark.parametrize("name", ["abs", "dotdot"])
def test_a_filename_outside_the_cache_never_touches_that_file(toy: Toy, tmp_path: Path, name: str) -> None:  # noqa: F811
    victim = tmp_path / "victim.tar.gz"
    victim.write_bytes(b"someone else's file")
    filename = str(victim) if name == "abs" else "../../victim.tar.gz"  # downloads/ is cache/downloads
    bad = _with_source(toy, filename=filename)
    with pytest.raises(SourceError, match=r"source\.filename"):
        bad.fetch(full=True)
    assert victim.read_bytes() == b"someone else's file"
    assert not list(tmp_path.glob("victim.tar.gz.bad-*"))


def test_a_subdir_outside_the_tree_is_refused(toy: Toy) -> None:  # noqa: F811
    with pytest.raises(SourceError, match=r"source\.subdir"):
        _with_source(toy, subdir="/".join([".."] * 40 + ["etc"])).fetch()  # /etc, from any depth


def test_two_engines_with_the_same_archive_name_never_share_a_path(toy: Toy) -> None:  # noqa: F811
    toy.fetch()
    good = toy.archive.read_bytes()
    wrong = "1" * 64
    other = dataclasses.replace(toy.engine, name="toy2",
                                source=dataclasses.replace(toy.engine.source, sha256=wrong))
    with pytest.raises(ChecksumError):
        pipeline.fetch(other, make_manager(autoload=False))
    assert toy.archive.read_bytes() == good, "the first engine's archive is untouched"
    assert source.archive_path("toy2", wrong, "toy-1.0.tar.gz").parent != toy.archive.parent
    assert not list(toy.archive.parent.glob("*.bad-*"))
    assert not toy.fetch(full=True).fetched


def test_verify_with_no_archive_downloads_it_again_and_says_so(
        toy: Toy, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    toy.fetch()
    toy.archive.unlink()
    capsys.readouterr()
    assert not toy.fetch(full=True).fetched
    assert hashlib.sha256(toy.archive.read_bytes()).hexdigest() == toy.sha256
    assert f"{toy.archive}: no archive there" in capsys.readouterr().err


def test_an_archive_an_older_harness_downloaded_is_taken_not_downloaded(
        toy: Toy, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    legacy = toy.cache / "downloads" / "toy-1.0.tar.gz"
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(toy.served.read_bytes())
    toy.served.unlink()  # the index has nothing to serve
    assert toy.fetch().fetched
    assert toy.archive.read_bytes() == legacy.read_bytes() and legacy.exists()


def _bad_name(archive: Path, age_s: float, pid: int) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(time.time() - age_s))
    return archive.with_name(f"{archive.name}.bad-{stamp}-{pid}")


def test_bad_copies_are_pruned_by_age_and_count(toy: Toy) -> None:  # noqa: F811
    hour, day = 3600, 24 * 3600
    toy.archive.parent.mkdir(parents=True)
    young = [_bad_name(toy.archive, a, i) for i, a in enumerate((1 * hour, 2 * hour), 1)]
    old = [_bad_name(toy.archive, a, i) for i, a in enumerate((3 * day, 4 * day, 5 * day), 10)]
    other = toy.archive.with_name("unrelated.bin.bad-20000101T000000-1")
    for p in (*young, *old, other):
        p.write_bytes(b"x" * 10)
    toy.archive.write_bytes(b"corrupt")
    toy.fetch()
    assert all(p.exists() for p in young), "younger than a day: kept, even beyond the count"
    assert not any(p.exists() for p in old), "older than a day and beyond the newest 2: removed"
    assert len(list(toy.archive.parent.glob("toy-1.0.tar.gz.bad-*"))) == 3, "the two young ones and the new one"
    assert other.exists(), "another name's only copy is among its newest 2"


def _within(seconds: float, call: Callable[[], object]) -> BaseException | None:
    """Run ``call`` in a thread; fail the test when it does not return in time (a hang)."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            out.append(None)
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"still running after {seconds} s: it hangs"
    return out[0]


@pytest.mark.parametrize("where", ["archive", "partial"])
@pytest.mark.parametrize("what", ["fifo", "dir", "dev-zero"])
def test_a_special_file_at_the_archive_or_partial_path_is_refused_at_once(
        toy: Toy, where: str, what: str) -> None:  # noqa: F811
    path = toy.archive if where == "archive" else source.partial_path(toy.archive)
    path.parent.mkdir(parents=True)
    if what == "fifo":
        os.mkfifo(path)
    elif what == "dir":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    error = _within(10, lambda: toy.fetch(full=True))
    assert isinstance(error, SourceError), repr(error)
    assert str(path) in str(error) and "remove it" in str(error)


def test_an_engine_name_too_long_for_a_file_name_is_a_usage_error(
        cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="300 characters"):
        engines.load_engine("x" * 300)
    assert main(["fetch", "x" * 300]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_an_archive_spec_with_a_non_bare_name_is_refused_before_any_path_is_made(cache: Path) -> None:
    spec = SourceSpec(kind="pypi-sdist", package="toy", version="1.0", filename="a/b.tar.gz", sha256="0" * 64)
    with pytest.raises(SourceError, match=r"source\.filename"):
        source.archive_path("toy", spec.sha256, spec.filename)
    assert not (cache / "downloads" / "toy").exists()
