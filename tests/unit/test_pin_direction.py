"""What a pin move is, said before anything is written: which way it goes (backwards, sideways, forward),
which version constants go down, and whether a git commit is an upstream build at all.

The engine is ``tiny`` (tests/unit/test_third_engine.py: a small C library with ``TINY_ABI_VERSION``),
pinned from local bare repositories made here: upstream's mirror with the build tags b1..b5 and b7 (an
untagged commit between b5 and b7) and a feature branch off b3, and a fork's mirror that carries upstream's
tags and its own tag b12 on nine commits of its own off b3. A mirror names where it comes from by its
recorded ``remote.origin.url``, as ``git clone --mirror`` leaves it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from tests.unit.test_third_engine import CMAKELISTS, DESCRIPTOR, HEADER, SOURCE, _git

pytestmark = pytest.mark.skipif(not shutil.which("git"), reason="needs git (bash scripts/install-system-deps.sh)")

UPSTREAM = "https://example.invalid/example/tiny.git"
FORK = "https://example.invalid/someone/tiny.git"
RULE = "  build_tags: {repository: example/tiny, pattern: 'b(?P<build>[0-9]+)'}"


def _commit(work: Path, name: str, text: str) -> str:
    (work / name).write_text(text)
    _git("add", "-A", cwd=work)
    _git("commit", "-qm", f"{name}: {text.strip()}", cwd=work)
    return _git("rev-parse", "HEAD", cwd=work)


def _mirror(work: Path, bare: Path, origin: str) -> Path:
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=work.parent)
    _git("config", "remote.origin.url", origin, cwd=bare)  # what `git clone --mirror ORIGIN` records
    _git("config", "uploadpack.allowFilter", "true", cwd=bare)
    _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare)
    return bare


def _repos(proj: Path) -> dict[str, Any]:
    work = proj / "src" / "tiny"
    (work / "include").mkdir(parents=True)
    (work / "src").mkdir()
    (work / "include" / "tiny.h").write_text(HEADER)
    (work / "src" / "tiny.c").write_text(SOURCE)
    (work / "CMakeLists.txt").write_text(CMAKELISTS)
    _git("init", "-q", "-b", "master", cwd=work)
    c: dict[str, str] = {}
    for n in range(1, 6):
        c[f"b{n}"] = _commit(work, "BUILD", f"{n}\n")
        _git("tag", f"b{n}", cwd=work)
    c["untagged"] = _commit(work, "BUILD", "6\n")
    c["b7"] = _commit(work, "BUILD", "7\n")
    _git("tag", "b7", cwd=work)
    _git("checkout", "-q", "-b", "feature", c["b3"], cwd=work)
    c["feature"] = _commit(work, "FEATURE", "a feature no release holds\n")
    _git("checkout", "-q", "master", cwd=work)
    upstream = _mirror(work, proj / "mirrors" / "tiny.git", UPSTREAM)
    fork_work = proj / "src" / "fork"
    _git("clone", "-q", str(work), str(fork_work), cwd=proj)
    _git("checkout", "-q", "-b", "main", c["b3"], cwd=fork_work)
    for i in range(9):
        c["b12"] = _commit(fork_work, "FORK", f"{i}\n")
    _git("tag", "b12", cwd=fork_work)
    fork = _mirror(fork_work, proj / "mirrors" / "fork.git", FORK)
    return {"upstream": upstream, "fork": fork, "fork_work": fork_work, "commits": c}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    import harness.engine.plugin as plugin
    from harness.engine import registry

    proj = tmp_path / "proj"  # the repositories inside the recipe's project: an untrusted one may fetch them
    repos = _repos(proj)
    one = repos["commits"]["b3"]
    text = DESCRIPTOR.format(url=repos["upstream"].as_uri(), commit=one).replace(
        f'upstream: {{repository: example/tiny, commit: "{one}"}}',
        f'upstream: {{repository: example/tiny, build: 3, commit: "{one}"}}\nprovenance:\n{RULE}')
    assert "build_tags" in text
    folder = proj / "engines" / "tiny"
    folder.mkdir(parents=True)
    (folder / "engine.yaml").write_text(text)
    monkeypatch.setenv("HARNESS_ENGINES_PATH", str(proj / "engines"))
    monkeypatch.setenv("HARNESS_TRUST", "tiny")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_NO_PROGRESS", "1")
    plugin.get_manager.cache_clear()
    registry.reset()
    yield {**repos, "folder": folder}
    plugin.get_manager.cache_clear()
    registry.reset()


def test_the_direction_line() -> None:
    from harness.pin.direction import direction

    back = direction({"build": 11549}, {"build": 11063})
    assert back.direction == "backwards"
    assert back.text == "BACKWARDS, build 11549 -> 11063 (a downgrade: 486 builds older)"
    assert direction({"build": 11063}, {"build": 11549}).text == "forward, build 11063 -> 11549 (486 builds newer)"
    same = direction({"build": 11549}, {"build": 11549}, sideways_why="another source")
    assert same.text == "sideways, build 11549 -> 11549 (the same upstream build: another source)"
    unknown = direction({"build": 11549}, {"commit": "unknown"}, new_why="--upstream-build was not given")
    assert unknown.direction == "unknown"
    assert unknown.text == ("direction unknown, build 11549 -> ? (the new source's upstream build is unknown: "
                            "--upstream-build was not given)")
    assert "the current pin records no upstream build" in direction({}, {"build": 3}).text


def test_a_git_commit_is_an_upstream_build_only_as_upstreams_build_tag(tmp_path: Path) -> None:
    from harness.source.gitbuild import TagRule, classify, repository_name

    repos = _repos(tmp_path)
    c = repos["commits"]
    rule = TagRule(repository="example/tiny", pattern=r"b(?P<build>[0-9]+)")
    up, fork = repos["upstream"], repos["fork"]
    assert repository_name(up.as_uri()) == "example/tiny"  # a mirror is named by the origin it records
    assert repository_name(str(fork)) == "someone/tiny"
    assert repository_name("git@github.com:ggml-org/llama.cpp.git") == "ggml-org/llama.cpp"
    # a release: the commit IS upstream's build tag, on the line of the others
    release = classify(up, c["b3"], url=up.as_uri(), rule=rule)
    assert (release.kind, release.build, release.repository, release.tag) == ("release", 3, "example/tiny", "b3")
    # between two build tags, neither's own: not counted (a commit reached through a merge is on no main line)
    between = classify(up, c["untagged"], url=up.as_uri(), rule=rule)
    assert (between.kind, between.build, between.nearest) == ("untagged", None, "b5")
    assert "1 commit(s) after b5, first released in b7" in between.why
    # a branch no release holds
    branch = classify(up, c["feature"], url=up.as_uri(), rule=rule)
    assert (branch.kind, branch.build, branch.nearest) == ("branch", None, "b3")
    assert "is in no build tag of example/tiny" in branch.why
    # the fork's own tag b12 in the fork's mirror: another repository, whatever its tags say
    forked = classify(fork, c["b12"], url=fork.as_uri(), rule=rule)
    assert (forked.kind, forked.build, forked.repository, forked.tag) == ("fork", None, "someone/tiny", "b12")
    assert "someone/tiny is not example/tiny" in forked.why
    # even upstream's b3 served by the fork is the fork's word
    assert classify(fork, c["b3"], url=fork.as_uri(), rule=rule).build is None
    # the fork's tag b12 under upstream's name (a clone whose origin is upstream): off the line of the other
    # build tags, it is a fork's own, never build 12
    own = classify(repos["fork_work"] / ".git", c["b12"], url=UPSTREAM, rule=rule)
    assert (own.kind, own.build, own.nearest) == ("fork", None, "b3")
    assert "the tag b12 is a fork's own" in own.why and "lacks the lower build tag(s) b4, b5, b7" in own.why
    assert "carries 9 commit(s) no other build tag has" in own.why


def test_pin_says_which_way_the_move_goes_first(tiny: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = tiny["upstream"].as_uri()
    before = (tiny["folder"] / "engine.yaml").read_text()
    code, out, err = _run(capsys, "pin", "tiny", f"git:{url}@b1", "--dry-run")
    assert code == 0, err
    assert out.splitlines()[0] == "pin tiny: BACKWARDS, build 3 -> 1 (a downgrade: 2 builds older)"
    assert "provenance: build 1: commit" in err and "is the build tag b1 of example/tiny" in err
    code, out, err = _run(capsys, "pin", "tiny", f"git:{url}@b5", "--dry-run")
    assert code == 0, err
    assert out.splitlines()[0] == "pin tiny: forward, build 3 -> 5 (2 builds newer)"
    code, out, err = _run(capsys, "pin", "tiny", f"git:{url}@b3", "--dry-run")
    assert code == 0, err
    assert out.splitlines()[0].startswith("pin tiny: sideways, build 3 -> 3 (the same upstream build")
    code, out, err = _run(capsys, "pin", "tiny", f"git:{url}@b1", "--dry-run", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["direction"] == "backwards" and doc["move"]["old_build"] == 3 and doc["move"]["new_build"] == 1
    assert doc["git"]["kind"] == "release" and doc["git"]["tag"] == "b1"
    # the real run says it first too, and writes the release's build
    code, out, err = _run(capsys, "pin", "tiny", f"git:{url}@b1", "--no-check")
    assert code == 0, err
    assert out.splitlines()[0].startswith("pin tiny: BACKWARDS, build 3 -> 1")
    assert "build: 1," in (tiny["folder"] / "engine.yaml").read_text()
    assert (tiny["folder"] / "engine.yaml").read_text() != before


def test_a_fork_or_a_branch_needs_the_upstream_build(tiny: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url, fork = tiny["upstream"].as_uri(), tiny["fork"].as_uri()
    path = tiny["folder"] / "engine.yaml"
    before = path.read_text()
    # the fork's tag b12 is not build 12 of example/tiny (it was 9 builds *forward* by counting commits)
    code, _, err = _run(capsys, "pin", "tiny", f"git:{fork}@b12", "--dry-run")
    assert code == 2, err
    assert "is a fork, not an upstream release: someone/tiny is not example/tiny" in err
    assert "--upstream-build N (it descends from the build tag b3)" in err
    assert path.read_text() == before
    # a feature branch is not build 4 either
    code, _, err = _run(capsys, "pin", "tiny", f"git:{url}@feature", "--dry-run")
    assert code == 2, err
    assert "is a branch, not an upstream release" in err and "--upstream-build" in err
    # a release whose build the user gets wrong is refused: the tag says otherwise
    code, _, err = _run(capsys, "pin", "tiny", f"git:{url}@b5", "--upstream-build", "4", "--dry-run")
    assert code == 2, err
    assert "--upstream-build 4, but the source holds build 5" in err
    # the user's statement for the fork is taken and recorded; the repository is the fork's
    code, out, err = _run(capsys, "pin", "tiny", f"git:{fork}@b12", "--upstream-build", "3", "--no-check", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["direction"] == "sideways" and doc["git"]["kind"] == "fork"
    assert doc["new"]["upstream"]["repository"] == "someone/tiny" and doc["new"]["upstream"]["build"] == 3
    assert "build 3: given (--upstream-build)" in doc["provenance"]
    assert any(line.startswith("fork: someone/tiny is not example/tiny") for line in doc["provenance"])
    text = path.read_text()
    assert "repository: someone/tiny" in text and "build: 3," in text
    # the user's statement about a fork's commit is accepted at fetch: no build tag of upstream says otherwise
    code, _, err = _run(capsys, "fetch", "tiny")
    assert code == 0, err


def test_fetch_refuses_a_build_the_upstream_tag_contradicts(tiny: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tiny["folder"] / "engine.yaml"
    code, _, err = _run(capsys, "fetch", "tiny")
    assert code == 0, err
    # a hand-set build on the b3 commit: the cached tree is intact, the build is not what the tag says
    path.write_text(path.read_text().replace("build: 3,", "build: 5,"))
    code, _, err = _run(capsys, "fetch", "tiny")
    assert code == 3, err
    assert "upstream.build: 5, but the source holds build 3 (build 3: commit" in err
    assert "is the build tag b3 of example/tiny)" in err
    assert "harness pin tiny" in err


# --------------------------------------------------------------------------- version constants going down


def test_versions_going_down_come_first_in_check_diff_and_report(tmp_path: Path) -> None:
    from harness.abi.check import check_tree, snapshot_config
    from harness.abi.diff import diff, render_markdown, render_versions_down
    from harness.core.errors import AbiError
    from tests.unit.test_abi_version_macro import DECLARED, committed, tree
    from tests.unit.test_abi_version_macro import HEADER as VHEADER

    path = committed(tmp_path, DECLARED)  # TINY_ABI_LEVEL 3, TINY_FORMAT_VERSION 1
    older = (VHEADER.replace("TINY_ABI_LEVEL 3", "TINY_ABI_LEVEL 2").replace("TINY_FORMAT_VERSION 1",
             "TINY_FORMAT_VERSION 0").replace("int32_t n;", "int32_t n; int32_t m;"))
    with pytest.raises(AbiError) as e:
        check_tree("tiny", tree(tmp_path / "new", older), DECLARED, committed_path=path)
    lines = str(e.value).splitlines()
    assert lines[1:3] == ["the engine's declared ABI version goes DOWN from 3 to 2 (TINY_ABI_LEVEL)",
                          "TINY_FORMAT_VERSION 1 -> 0 (goes DOWN)"]
    assert set(lines[3:5]) == {"tiny_params: size 4 -> 8", "tiny_params.m: added at offset 4 (int32_t)"}
    # a version going up stays where it was (a move forward)
    a = snapshot_config(tree(tmp_path / "a"), DECLARED)
    b = snapshot_config(tree(tmp_path / "b", older), DECLARED)
    up = [str(c) for c in diff(b, a, version_macro="TINY_ABI_LEVEL")]
    assert up[0] == "the engine's declared ABI version moved from 2 to 3 (TINY_ABI_LEVEL)"
    assert "TINY_FORMAT_VERSION 0 -> 1" in up and not any("DOWN" in x for x in up)
    # without a declared macro, a constant named as a version going down still comes first; another
    # constant is an ordinary one
    changes = diff(a, b)
    assert str(changes[0]) == "TINY_FORMAT_VERSION 1 -> 0 (goes DOWN)"
    assert "TINY_ABI_LEVEL 3 -> 2" in [str(c) for c in changes[1:]]
    md = render_markdown(changes, old="tiny a", new="tiny b")
    assert md.index("### Versions going DOWN") < md.index("### Structs")
    top = render_versions_down(changes)
    assert top.startswith("### Versions going DOWN") and "- **`TINY_FORMAT_VERSION 1 -> 0 (goes DOWN)`**" in top
    assert render_versions_down(diff(b, a)) == ""


def test_abi_diff_lists_versions_going_down_first(tiny: Any, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    new, old = tmp_path / "v2", tmp_path / "v1"
    for root, text in ((new, HEADER.replace("TINY_ABI_VERSION 1", "TINY_ABI_VERSION 2")),
                       (old, HEADER.replace("int32_t tiny_abi_version(void);", ""))):
        (root / "include").mkdir(parents=True)
        (root / "include" / "tiny.h").write_text(text)
    # a move from version 2 back to 1 that also loses a function: the version comes first
    code, out, err = _run(capsys, "abi", "diff", str(new), str(old), "--engine", "tiny")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "the engine's declared ABI version goes DOWN from 2 to 1 (TINY_ABI_VERSION)", out
    assert "tiny_abi_version: removed" in lines[1:]
    code, out, err = _run(capsys, "abi", "diff", str(new), str(old), "--engine", "tiny", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["versions_down"] == ["the engine's declared ABI version goes DOWN from 2 to 1 (TINY_ABI_VERSION)"]
    assert doc["changes"][0]["group"] == "versions_down"


def test_the_pull_request_body_names_a_rollback_and_its_versions_going_down() -> None:
    from harness.qualify.report import pin_move_block

    doc = {"engine": "llamacpp", "pin": "2026.9.11063", "source": "xllamacpp 2026.9.11063",
           "old": {"source": "xllamacpp 2026.10.11549", "upstream": {"build": 11549, "commit": "unknown"},
                   "how": "--old-rev", "asked": "HEAD"},
           "upstream": {"build": 11063, "commit": "unknown"},
           "stages": [{"name": "old-pin-abi", "summary": "3 differences",
                       "data": {"versions_down": ["GGML_BACKEND_API_VERSION 3 -> 2 (goes DOWN)",
                                                  "LLAMA_STATE_SEQ_VERSION 4 -> 2 (goes DOWN)"],
                                "used_lines": ["llama_foo: removed"]}}]}
    lines = pin_move_block(doc)
    assert lines[0].startswith("## Pin move: llamacpp")
    assert lines[2] == "**BACKWARDS, build 11549 -> 11063 (a downgrade: 486 builds older)**"
    at = lines.index("**Binding and ABI** (what the binding uses first):")
    assert lines[at + 2:at + 4] == ["- **version going DOWN: `GGML_BACKEND_API_VERSION 3 -> 2 (goes DOWN)`**",
                                    "- **version going DOWN: `LLAMA_STATE_SEQ_VERSION 4 -> 2 (goes DOWN)`**"]
    assert lines.index("- C surface the binding uses: `llama_foo: removed`") > at + 3
