"""``harness pin`` writes nothing until it validates, writes local sources where every machine finds them, and
pins a mirror that is a partial clone (issue 61, points 3, 5 and 6).

The engine ``tinypp`` is one folder of a project in a temporary directory (``$HARNESS_ENGINES_PATH``), its
upstream a local git repository with two commits (tag ``v2``) whose tree holds ``include/tiny.h``, ``src/tiny.c``,
``CMakeLists.txt`` and a large ``testdata/huge.bin`` the build does not need. Only ``--no-check`` runs and
``harness fetch``: no compiler, no libclang.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli import main
from tests.unit.test_third_engine import CMAKELISTS, HEADER, SOURCE, _git

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

DESCRIPTOR = """\
name: tinypp
pinned_on: "2026-01-01"
source:
  kind: git
  url: "{url}"
  commit: "{commit}"
upstream:
  repository: example/tiny
  commit: "{commit}"
cmake:
  base: {{CMAKE_BUILD_TYPE: Release}}
targets: [tiny]
artifacts:
  lib: ["libtiny.so*"]
  include: ["include:*.h"]
abi:
  headers: [include/tiny.h]
  include_dirs: [include]
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _upstream(where: Path) -> tuple[Path, str, str]:
    """A bare repository at ``where/tiny.git``: commit one, then two (tagged v2)."""
    work = where / "tiny-src"
    for d in ("include", "src", "testdata", "docs"):
        (work / d).mkdir(parents=True)
    (work / "include" / "tiny.h").write_text(HEADER)
    (work / "src" / "tiny.c").write_text(SOURCE)
    (work / "CMakeLists.txt").write_text(CMAKELISTS)
    (work / "docs" / "README.md").write_text("tiny\n")
    (work / "testdata" / "huge.bin").write_bytes(bytes(range(256)) * 512)
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-qm", "tiny 1", cwd=work)
    one = _git("rev-parse", "HEAD", cwd=work)
    (work / "src" / "tiny.c").write_text(SOURCE + "\n/* two */\n")
    (work / "testdata" / "huge.bin").write_bytes(bytes(range(255, -1, -1)) * 512)
    _git("commit", "-qam", "tiny 2", cwd=work)
    _git("tag", "v2", cwd=work)
    two = _git("rev-parse", "HEAD", cwd=work)
    bare = where / "tiny.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=where)
    _serve(bare)
    shutil.rmtree(work)
    return bare, one, two


def _serve(repo: Path) -> None:
    _git("config", "uploadpack.allowFilter", "true", cwd=repo)
    _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=repo)


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path, str, str]]:
    """``(project root, bare upstream inside it, commit one, commit two)``; the descriptor pins commit one by
    the repository's absolute file:// URL (what a hand edit on one machine writes)."""
    import harness.engine.plugin as plugin
    from harness.engine import registry

    root = tmp_path / "proj"
    root.mkdir()
    bare, one, two = _upstream(root)
    folder = root / "engines" / "tinypp"
    folder.mkdir(parents=True)
    (folder / "engine.yaml").write_text(DESCRIPTOR.format(url=bare.as_uri(), commit=one))
    monkeypatch.setenv("HARNESS_ENGINES_PATH", str(root / "engines"))
    monkeypatch.setenv("HARNESS_TRUST", "tinypp")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_NO_PROGRESS", "1")
    monkeypatch.delenv("HARNESS_MIRRORS", raising=False)
    plugin.get_manager.cache_clear()
    registry.reset()
    yield root, bare, one, two
    plugin.get_manager.cache_clear()
    registry.reset()


def _descriptor(root: Path) -> str:
    return (root / "engines" / "tinypp" / "engine.yaml").read_text()


# -- point 3: a mirror that is a partial clone ------------------------------------------------------------------


def _partial_mirror(root: Path, bare: Path) -> Path:
    """A release mirror as they often are: a blob-less clone holding only the blobs of the paths it checked
    out (at v2), its own upstream gone."""
    mirror = root / "mirror"
    _git("clone", "-q", "--filter=blob:none", "--no-checkout", bare.as_uri(), str(mirror), cwd=root)
    _git("sparse-checkout", "set", "--no-cone", "/include", "/src", "/CMakeLists.txt", cwd=mirror)
    _git("checkout", "-q", "main", cwd=mirror)
    _serve(mirror)
    shutil.rmtree(bare)
    return mirror


def test_a_partial_mirror_fails_with_a_named_hint_then_pins_with_filter_and_sparse(
        project: tuple[Path, Path, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    root, bare, _, two = project
    url = _partial_mirror(root, bare).as_uri()
    (root / "engines" / "tinypp" / "engine.yaml").write_text(DESCRIPTOR.format(url=url, commit=_git(
        "rev-parse", "v2~1", cwd=root / "mirror")))
    code, _, err = _run(capsys, "pin", "tinypp", f"git:{url}@v2", "--no-check")
    assert code == 0, err
    # the fetch meets git's missing objects: a typed error naming the cause and what to do, not raw git (exit 14)
    code, _, err = _run(capsys, "fetch", "tinypp")
    assert code == 5, err
    assert "partial clone without its large blobs" in err
    assert "--filter blob:none" in err and "--sparse PATH" in err and "full mirror" in err

    # a sparse checkout that leaves out an engine file is refused before anything is written
    before = _descriptor(root)
    code, _, err = _run(capsys, "pin", "tinypp", f"git:{url}@v2", "--filter", "blob:none", "--sparse", "src",
                        "--dry-run")
    assert code == 2, err
    assert "leaves out include/tiny.h, CMakeLists.txt" in err
    code, _, err = _run(capsys, "pin", "tinypp", f"git:{url}@v2", "--filter", "blob:none", "--sparse", "nowhere",
                        "--sparse", "include", "--no-check")
    assert code == 2 and "has no nowhere" in err, err
    code, _, err = _run(capsys, "pin", "tinypp", f"git:{url}@v2", "--filter", "blob:nothing", "--no-check")
    assert code == 2 and "--filter 'blob:nothing'" in err, err
    assert _descriptor(root) == before

    code, _, err = _run(capsys, "pin", "tinypp", f"git:{url}@v2", "--filter", "blob:none", "--sparse", "CMakeLists.txt",
                        "--sparse", "include", "--sparse", "src/", "--no-check")
    assert code == 0, err
    text = _descriptor(root)
    assert "  filter: blob:none\n" in text and "  sparse: [CMakeLists.txt, include, src]\n" in text
    code, out, err = _run(capsys, "fetch", "tinypp", "--json")
    assert code == 0, err
    tree = Path(json.loads(out)["path"])
    assert sorted(p.name for p in tree.iterdir()) == ["CMakeLists.txt", "include", "src"]
    assert json.loads(out)["digest"].startswith(two)


def test_git_s_missing_object_errors_are_named_and_others_are_left_alone() -> None:
    from harness.core.errors import SourceError, SubprocessError
    from harness.core.types import SourceSpec
    from harness_plugins.source_git import _missing_objects

    spec = SourceSpec(kind="git", url="https://example.com/tiny.git", commit="1" * 40)
    corrupt = SubprocessError(["git", "fetch"], 128, "remote: fatal: could not fetch 4ab0 from promisor remote\n"
                              "fatal: git upload-pack: aborting due to possible repository corruption on the remote side.")
    e = _missing_objects(spec, corrupt)
    assert isinstance(e, SourceError) and "filter: blob:none" in str(e) and "possible repository corruption" in str(e)
    filtered = SourceSpec(kind="git", url="https://example.com/tiny.git", commit="1" * 40, filter="blob:none")
    missing = SubprocessError(["git", "checkout"], 128, "fatal: could not read 4ab064f0a0bf551d6de069a965a60e045b72150b")
    assert "name the paths the build needs with `sparse:`" in str(_missing_objects(filtered, missing))
    login = SubprocessError(["git", "fetch"], 128, "fatal: could not read Username for 'https://example.com'")
    assert _missing_objects(spec, login) is None


# -- point 5: nothing is written until it validates -------------------------------------------------------------


@pytest.mark.parametrize("dry", [True, False])
def test_a_subdir_without_the_engine_is_refused_by_the_dry_run_as_by_the_run(
        project: tuple[Path, Path, str, str], capsys: pytest.CaptureFixture[str], dry: bool) -> None:
    root, bare, _, _ = project
    before = _descriptor(root)
    code, _, err = _run(capsys, "pin", "tinypp", f"git:{bare.as_uri()}@v2#docs", *(["--dry-run"] if dry else []))
    assert code == 5, err
    assert "'docs' holds none of the engine's files (include/tiny.h, CMakeLists.txt)" in err
    assert "patch" not in err
    assert _descriptor(root) == before


def _archive(root: Path, bare: Path, *, git_archive: bool = True) -> tuple[Path, str]:
    """``sources/tiny-2.tar.gz`` under the project: v2 as ``git archive`` makes it (its commit recorded), or a
    plain tarball of the same files."""
    dest = root / "sources" / "tiny-2.tar.gz"
    dest.parent.mkdir(exist_ok=True)
    if git_archive:
        _git("archive", "--format=tar.gz", "--prefix=tiny-2/", "-o", str(dest), "v2", cwd=bare)
    else:
        with tarfile.open(dest, "w:gz") as tf:
            for name, text in (("include/tiny.h", HEADER), ("src/tiny.c", SOURCE), ("CMakeLists.txt", CMAKELISTS)):
                info = tarfile.TarInfo(f"tiny-2/{name}")
                info.size = len(text.encode())
                tf.addfile(info, io.BytesIO(text.encode()))
    return dest, hashlib.sha256(dest.read_bytes()).hexdigest()


def test_an_archive_source_is_written_complete_and_loads(
        project: tuple[Path, Path, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    from harness.engine.descriptor import load_engine

    root, bare, _, two = project
    archive, sha = _archive(root, bare)
    code, out, err = _run(capsys, "pin", "tinypp", f"archive:{archive}#sha256={sha}", "--upstream-build", "2",
                          "--no-check", "--json")
    assert code == 0, err
    new = json.loads(out)["new"]["source"]
    # the schema's required fields: the commit git archive recorded, the old source's repository (its path
    # written relative to the project, like the archive's)
    assert new == {"kind": "local-archive", "path": "sources/tiny-2.tar.gz", "sha256": sha, "url": "tiny.git",
                   "commit": two}
    spec = load_engine("tinypp")
    assert spec.source.path == str(archive) and spec.upstream["commit"] == two
    code, _, err = _run(capsys, "fetch", "tinypp")
    assert code == 0, err
    # a subdir of the archive without the engine, refused and nothing written
    before = _descriptor(root)
    code, _, err = _run(capsys, "pin", "tinypp", f"archive:{archive}#sha256={sha}&subdir=src", "--dry-run")
    assert code == 5 and "'src' holds none of the engine's files" in err, err
    assert _descriptor(root) == before


def test_an_archive_that_cannot_say_its_commit_is_refused_and_nothing_written(
        project: tuple[Path, Path, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    root, bare, _, two = project
    archive, sha = _archive(root, bare, git_archive=False)
    before = _descriptor(root)
    for dry in ([], ["--dry-run"]):
        code, _, err = _run(capsys, "pin", "tinypp", f"archive:{archive}#sha256={sha}", "--upstream-build", "2",
                            "--no-check", *dry)
        assert code == 3, err
        assert "--upstream-commit" in err and "Nothing was written" in err
    assert _descriptor(root) == before
    code, _, err = _run(capsys, "pin", "tinypp", f"archive:{archive}#sha256={sha}&url=https://example.com/tiny",
                        "--upstream-commit", two, "--upstream-build", "2", "--no-check")
    assert code == 0, err
    assert '  url: "https://example.com/tiny"\n' in _descriptor(root)


def test_the_plan_is_checked_against_the_schema_before_anything_is_written(
        project: tuple[Path, Path, str, str]) -> None:
    from harness.core.errors import ConfigError
    from harness.pin import plan
    from harness.pin.sources import Resolved

    root, *_ = project
    folder = root / "engines" / "tinypp"
    before = _descriptor(root)
    # what `pin archive:` wrote before: a local-archive source without the upstream it was made from
    bad = Resolved(source={"kind": "local-archive", "path": "sources/x.tar.gz", "sha256": "3" * 64})
    with pytest.raises(ConfigError, match=r"nothing was written(.|\n)*'url' is a required property"):
        plan(folder, bad, build=2, commit="2" * 40)
    assert _descriptor(root) == before


# -- point 6: portable local sources ----------------------------------------------------------------------------


def test_a_mirror_under_the_project_is_written_relative_and_no_output_names_this_machine(
        project: tuple[Path, Path, str, str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.build import pipeline
    from harness.core.errors import PatchError

    root, bare, _, two = project
    code, out, err = _run(capsys, "pin", "tinypp", f"git:{bare.as_uri()}@v2", "--dry-run", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["new"]["source"]["url"] == "tiny.git"
    assert str(root) not in json.dumps([doc["new"], doc["provenance"]])
    assert str(root) not in "".join(line for line in doc["diff"].splitlines(True) if line.startswith("+"))

    # the real run; the checks stop after the fetch (no patch check wanted here): its label names a commit
    def stop(*_: object, **__: object) -> None:
        raise PatchError("stop after the fetch")

    monkeypatch.setattr(pipeline, "check_patches", stop)
    code, _, err = _run(capsys, "pin", "tinypp", f"git:{bare}@v2")
    assert code == 6, err
    assert '  url: "tiny.git"\n' in _descriptor(root)
    assert "  fetch: ok" in err and f"{two[:12]} (commit {two[:12]})" in err and "sha256" not in err
    assert str(root) not in err


def test_a_mirror_outside_the_project_is_refused_unless_under_harness_mirrors(
        project: tuple[Path, Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.abi.revisions import locate
    from harness.core.errors import ConfigError
    from harness.engine.descriptor import load_engine

    root, bare, *_ = project
    outside = tmp_path / "srv" / "mirrors"
    outside.mkdir(parents=True)
    moved = outside / "tiny.git"
    shutil.move(str(bare), moved)
    before = _descriptor(root)
    code, _, err = _run(capsys, "pin", "tinypp", f"git:{moved.as_uri()}@v2", "--dry-run")
    assert code == 2, err
    assert "lies outside the project" in err and "HARNESS_MIRRORS" in err
    assert _descriptor(root) == before

    monkeypatch.setenv("HARNESS_MIRRORS", str(outside))
    for source in (f"git:{moved}@v2", "git:$HARNESS_MIRRORS/tiny.git@v2"):
        code, out, err = _run(capsys, "pin", "tinypp", source, "--dry-run", "--json")
        assert code == 0, err
        assert json.loads(out)["new"]["source"]["url"] == "$HARNESS_MIRRORS/tiny.git"
    code, _, err = _run(capsys, "pin", "tinypp", "git:$HARNESS_MIRRORS/tiny.git@v2", "--no-check")
    assert code == 0, err
    assert '  url: "$HARNESS_MIRRORS/tiny.git"\n' in _descriptor(root)
    code, _, err = _run(capsys, "fetch", "tinypp")
    assert code == 0, err
    # the diff report's title names the mirror as the descriptor does, never this machine's path
    found = locate("v2", load_engine("tinypp"))
    assert found.label == "$HARNESS_MIRRORS/tiny.git @ v2"

    # another machine without the variable: told what to set
    monkeypatch.delenv("HARNESS_MIRRORS")
    with pytest.raises(ConfigError, match="HARNESS_MIRRORS, which is not set"):
        load_engine("tinypp")


def test_an_archive_outside_the_project_is_refused(
        project: tuple[Path, Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    root, bare, _, _ = project
    archive, sha = _archive(root, bare)
    outside = tmp_path / "elsewhere" / archive.name
    outside.parent.mkdir()
    shutil.move(str(archive), outside)
    before = _descriptor(root)
    code, _, err = _run(capsys, "pin", "tinypp", f"archive:{outside}#sha256={sha}", "--upstream-build", "2",
                        "--no-check")
    assert code == 2 and "lies outside the project" in err, err
    assert _descriptor(root) == before
    monkeypatch.setenv("HARNESS_MIRRORS", str(outside.parent))
    code, out, err = _run(capsys, "pin", "tinypp", f"archive:{outside.as_uri()}#sha256={sha}", "--upstream-build",
                          "2", "--no-check", "--json")
    assert code == 0, err
    assert json.loads(out)["new"]["source"]["path"] == f"$HARNESS_MIRRORS/{archive.name}"
    code, _, err = _run(capsys, "fetch", "tinypp")
    assert code == 0, err


def test_digest_labels() -> None:
    from harness.pin import digest_label

    assert digest_label({"kind": "git"}, "a" * 40) == f"commit {'a' * 12}"
    assert digest_label({"kind": "git"}, f"{'a' * 40}-sparse-0123456789ab") == (
        f"commit {'a' * 12}, sparse checkout 0123456789ab")
    assert digest_label({"kind": "local-archive"}, "b" * 64) == f"sha256 {'b' * 12}"
