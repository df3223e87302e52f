"""Every descriptor and fixtures value is confined when the recipe loads (issue 54, cases 1, 3, 4, 6, 8).

Each hostile value the issue reproduced is written into the tiny engine's folder (found through
``$HARNESS_ENGINES_PATH``) and the installed ``harness`` is run on it as a user would: a
:class:`ConfigError` (exit 3) naming ``engine.yaml:field`` before anything is fetched or built, no
traceback, nothing written outside the test's directory. Below the loader, the artifact collector,
the init-cache writer, the smoke check and ``models env`` refuse the same values again (a recipe
the loader never saw: one from an older harness, a plugin's defines).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.build.cmake import _collect, _destination, init_cache_text, smoke_cpu_level
from harness.core.errors import BuildError, ConfigError
from harness.core.types import EngineSpec, SourceSpec, Variant
from harness.models.fixtures import env_lines

from . import hostile_engine
from .test_artifact_collect import plain, versioned, write_reply

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("git", "cmake", "ninja", "cc")),
    reason="needs git, cmake, ninja and a C compiler (bash scripts/install-system-deps.sh)")

CODE_NAME = 'X "" CACHE STRING "")\nexecute_process(COMMAND touch {outside}/pwned)\nset(Y'


def _set(*keys: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return change


#: case -> (descriptor edit, the field the refusal names, what it says)
REFUSED: dict[str, tuple[Callable[[dict[str, Any]], None], str, str]] = {
    "bin name climbing": (_set("artifacts", "bin", value=["../../../../harness-issue54-evil"]),
                          "engine.yaml:artifacts.bin", "a bare file name"),
    "include DIR:GLOB climbing": (_set("artifacts", "include", value=["include:../../../*"]),
                                  "engine.yaml:artifacts.include[0]", "no '..'"),
    "include DIR climbing": (_set("artifacts", "include", value=["../..:*"]),
                             "engine.yaml:artifacts.include[0]", "no '..'"),
    "absolute include glob": (_set("artifacts", "include", value=["/etc/*"]),
                              "engine.yaml:artifacts.include[0]", "not absolute"),
    "lib glob with a path": (_set("artifacts", "lib", value=["../../lib*.so*"]),
                             "engine.yaml:artifacts.lib[0]", "a bare file name"),
    "cross bin climbing": (_set("cross", "bin", value=["../x"]), "engine.yaml:cross.bin", "a bare file name"),
    "bisect program climbing": (_set("bisect", "programs", "speed", value=["../../x"]),
                                "engine.yaml:bisect.programs.speed", "a bare file name"),
    "toolchain file in a bisect level": (_set("bisect", "levels", "haswell", "CMAKE_TOOLCHAIN_FILE",
                                              value="/tmp/t.cmake"),
                                         "engine.yaml:bisect.levels.haswell.CMAKE_TOOLCHAIN_FILE", "toolchain file"),
    "compiler": (_set("cmake", "base", "CMAKE_C_COMPILER", value="/usr/bin/gcc"),
                 "engine.yaml:cmake.base.CMAKE_C_COMPILER", "does not choose the compiler"),
    "toolchain file in an intent": (_set("cmake", "intents", "cpu_levels", "runtime", "CMAKE_TOOLCHAIN_FILE",
                                         value="/tmp/t.cmake"),
                                    "engine.yaml:cmake.intents.cpu_levels.runtime.CMAKE_TOOLCHAIN_FILE",
                                    "toolchain file"),
    "project include": (_set("cmake", "base", "CMAKE_PROJECT_INCLUDE", value="/tmp/x.cmake"),
                        "cmake.base.CMAKE_PROJECT_INCLUDE", "project includes"),
    "project include before": (_set("cmake", "base", "CMAKE_PROJECT_INCLUDE_BEFORE", value="/tmp/x.cmake"),
                               "cmake.base.CMAKE_PROJECT_INCLUDE_BEFORE", "project includes"),
    "top-level includes": (_set("cmake", "base", "CMAKE_PROJECT_TOP_LEVEL_INCLUDES", value="/tmp/x.cmake"),
                           "cmake.base.CMAKE_PROJECT_TOP_LEVEL_INCLUDES", "project includes"),
    "cuda launcher": (_set("cmake", "base", "CMAKE_CUDA_COMPILER_LAUNCHER", value="/tmp/l"),
                      "cmake.base.CMAKE_CUDA_COMPILER_LAUNCHER", "launchers"),
    "c launcher": (_set("cmake", "base", "CMAKE_C_COMPILER_LAUNCHER", value="/tmp/l"),
                   "cmake.base.CMAKE_C_COMPILER_LAUNCHER", "launchers"),
    "define name that is CMake code": (_set("cmake", "base", CODE_NAME, value="1"),
                                       "engine.yaml:cmake.base", "is not a CMake variable name"),
    "smoke argv absolute": (_set("smoke", value={"argv": ["/usr/bin/id"]}), "engine.yaml:smoke.argv[0]",
                            "a relative path inside the artifact"),
    "smoke argv climbing": (_set("smoke", value={"argv": ["bin/../../../../usr/bin/id"]}),
                            "engine.yaml:smoke.argv[0]", "no '..'"),
    "provenance regex that does not compile": (_set("provenance", value={"build_from_version": {"x": "(?P<build>"}}),
                                               "engine.yaml:provenance.build_from_version.x",
                                               "is not a regular expression"),
}


@pytest.fixture
def recipe(tmp_path: Path) -> hostile_engine.Recipe:
    return hostile_engine.make(tmp_path)


def _untouched(recipe: hostile_engine.Recipe, before: dict[str, str]) -> None:
    assert recipe.outside_state() == before
    assert not (recipe.outside / "pwned").exists()
    assert not list(recipe.scratch.parent.glob("harness-issue54-*"))


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_hostile_descriptor_value_is_refused_when_it_loads(recipe: hostile_engine.Recipe, case: str) -> None:
    change, field, said = REFUSED[case]
    if case == "define name that is CMake code":
        change = _set("cmake", "base", CODE_NAME.format(outside=recipe.outside), value="1")
    recipe.edit_descriptor(change)
    before = recipe.outside_state()
    run = recipe.harness("build", "tiny", "--variant", "cpu")
    assert run.returncode == ConfigError.exit_code, run.output
    assert field in run.output and said in run.output, run.output
    assert "Traceback" not in run.output
    assert not (recipe.cache / "work").exists(), "refused before anything was fetched or built"
    _untouched(recipe, before)


def test_a_define_name_on_the_command_line_is_an_identifier(recipe: hostile_engine.Recipe) -> None:
    run = recipe.harness("build", "tiny", "--define", f"{CODE_NAME.format(outside=recipe.outside)}=1")
    assert run.returncode == 2 and "a CMake variable name is letters, digits and '_'" in run.output, run.output
    assert not (recipe.outside / "pwned").exists()


FIXTURES = """\
fixtures:
  tiny-scale:
    kind: tiny
    engine: tiny
    shape: scale
    dest: {dest}
env:
  {role}: tiny-scale
"""


@pytest.mark.parametrize(("dest", "role", "field"), [
    ("../../../harness-issue54-evil", "HARNESS_TINY", "fixtures.yaml:fixtures.tiny-scale.dest"),
    ("tiny.txt", "X;touch {outside}/pwned #", "fixtures.yaml:env"),
], ids=["dest climbing", "env role that is shell code"])
def test_a_hostile_fixture_is_refused_when_it_loads(recipe: hostile_engine.Recipe, dest: str, role: str,
                                                    field: str) -> None:
    (recipe.folder / "fixtures.yaml").write_text(
        FIXTURES.format(dest=dest, role=f'"{role.format(outside=recipe.outside)}"'))
    before = recipe.outside_state()
    for argv in (["models", "list"], ["models", "env"], ["models", "fetch", "--only", "tiny-scale"]):
        run = recipe.harness(*argv)
        assert run.returncode == ConfigError.exit_code, run.output
        assert field in run.output and "Traceback" not in run.output, run.output
    _untouched(recipe, before)


def test_models_env_output_is_safe_to_eval(tmp_path: Path) -> None:
    """Every value quoted (shlex.quote), every name an identifier: ``eval "$(harness models env)"`` runs nothing."""
    marker = tmp_path / "pwned"
    value = f"$(touch {marker}) `touch {marker}`; touch {marker} 'q\" \n"
    script = "\n".join(env_lines({"HARNESS_MODEL_X": value})) + '\nprintf %s "$HARNESS_MODEL_X"'
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    assert out == value and not marker.exists()
    with pytest.raises(ConfigError, match="not an environment variable name"):
        env_lines({"X;touch /tmp/x #": "v"})


# -- below the loader: the collector, the init-cache script, the smoke check ---------------------


def _engine(root: Path, **artifacts: tuple[str, ...]) -> EngineSpec:
    return EngineSpec(name="tiny", root=root / "engines" / "tiny", source=SourceSpec(kind="git"), upstream={},
                      cmake={"base": {}}, targets=("tiny",),
                      artifacts={"lib": ("lib*.so*",), "bin": (), "include": ("include:*.h",), **artifacts}, abi={})


def _trees(tmp_path: Path) -> tuple[Path, Path]:
    tree = tmp_path / "work" / "tree"
    (tree / "include").mkdir(parents=True)
    (tree / "include" / "tiny.h").write_text("int tiny(void);\n")
    build = tmp_path / "work" / "build"
    versioned(build, "tiny", "1", "1.0.0")
    plain(build / "bin", "tiny-info")
    write_reply(build, [("tiny", "SHARED_LIBRARY", ["libtiny.so"]), ("tiny-info", "EXECUTABLE", ["bin/tiny-info"])])
    return tree, build


@pytest.mark.parametrize("artifacts", [
    {"bin": ("../../build/bin/tiny-info",)},
    {"include": ("include:../../build/libtiny*",)},
], ids=["bin", "include"])
def test_a_destination_outside_the_artifact_is_refused(tmp_path: Path, artifacts: dict[str, tuple[str, ...]]) -> None:
    """A pattern the loader would refuse, given to the collector directly: each source is inside the
    trees, but where it would land is not."""
    tree, build = _trees(tmp_path)
    dest = tmp_path / "dist" / "artifact"
    with pytest.raises(BuildError, match=r"outside the artifact|climbs out with '\.\.'"):
        _collect(_engine(tmp_path, **artifacts), tree, build, dest)
    assert not (tmp_path / "dist" / "build").exists() and not (tmp_path / "build").exists()


def test_a_destination_through_a_link_out_of_the_artifact_is_refused(tmp_path: Path) -> None:
    artifact = tmp_path / "artifact"
    (artifact / "include").mkdir(parents=True)
    (artifact / "include" / "up").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(BuildError, match="through a symlink"):
        _destination(artifact, artifact / "include" / "up" / "x.h", "header")


def test_a_hard_link_to_a_host_file_is_refused(tmp_path: Path) -> None:
    """``ln /etc/shadow include/x.h`` (a build step, or a configure run without the sandbox): the
    symlink guard cannot see it; a file with a second name is refused."""
    tree, build = _trees(tmp_path)
    host = tmp_path / "host-file"
    host.write_text(hostile_engine.SECRET)
    os.link(host, tree / "include" / "zz-host.h")
    with pytest.raises(BuildError, match="has 2 hard links"):
        _collect(_engine(tmp_path), tree, build, tmp_path / "artifact")
    for p in (tmp_path / "artifact").rglob("*"):
        assert not (p.is_file() and hostile_engine.SECRET in p.read_text(errors="replace"))


def test_the_init_cache_script_holds_no_cmake_code(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="not an identifier"):
        init_cache_text({"X)\nexecute_process(COMMAND id)\nset(Y": "1"})
    marker = tmp_path / "pwned"
    value = f'a" CACHE STRING "")\nexecute_process(COMMAND touch {marker})\nset(Z "${{CMAKE_COMMAND}} $ENV{{HOME}} \\'
    script = tmp_path / "s.cmake"
    script.write_text(init_cache_text({"K": value, "RPATH": "$ORIGIN:$ORIGIN/../lib"})
                      + 'message("K=[${K}]")\nmessage("RPATH=[${RPATH}]")\n')
    r = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True, check=True)
    assert f"K=[{value}]" in r.stderr and "RPATH=[$ORIGIN:$ORIGIN/../lib]" in r.stderr
    assert not marker.exists()


def test_the_smoke_check_runs_only_a_file_inside_the_artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_TRUST", "tiny")  # an untrusted recipe's smoke check is not run at all
    artifact = tmp_path / "artifact"
    (artifact / "bin").mkdir(parents=True)
    (artifact / "bin" / "out").symlink_to("/usr/bin/id")
    row = Variant(name="cpu", platform="cpu")
    for argv0 in ("/usr/bin/id", "bin/out"):
        engine = _engine(tmp_path)
        engine = EngineSpec(**{**engine.__dict__, "smoke": {"argv": [argv0], "cpu_level": "(.*)"}})
        with pytest.raises(BuildError, match="outside the artifact"):
            smoke_cpu_level(engine, row, artifact)


def test_an_untrusted_recipes_smoke_check_is_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_TRUST", raising=False)
    marker = tmp_path / "ran"
    artifact = tmp_path / "artifact"
    (artifact / "bin").mkdir(parents=True)
    (artifact / "bin" / "tool").write_text(f"#!/bin/sh\ntouch {marker}\necho level=x\n")
    (artifact / "bin" / "tool").chmod(0o755)
    engine = _engine(tmp_path)
    engine = EngineSpec(**{**engine.__dict__, "smoke": {"argv": ["bin/tool"], "cpu_level": "level=(.*)"}})
    assert smoke_cpu_level(engine, Variant(name="cpu", platform="cpu"), artifact) is None and not marker.exists()
    monkeypatch.setenv("HARNESS_TRUST", "tiny")
    assert smoke_cpu_level(engine, Variant(name="cpu", platform="cpu"), artifact) == "x" and marker.exists()


def test_a_recipe_regex_that_backtracks_without_end_is_a_config_error_not_a_hang() -> None:
    """``(a|aa)+$`` over 48 a's and a '!' backtracks ~2^48 ways: the provenance check stops it at its
    time limit with an error naming the field, instead of a fetch that never returns."""
    from harness.source.provenance import from_source

    source = {"kind": "pypi-sdist", "package": "evil", "version": "a" * 48 + "!"}
    # no wall-clock bound is asserted (a busy host must not fail it): without the limit, 2^48 ways never end
    with pytest.raises(ConfigError, match=r"build_from_version\.evil: the regular expression .* backtracks"):
        from_source(source, {"build_from_version": {"evil": "(a|aa)+$"}})
    # a well-formed one still derives the build
    ok = from_source({"kind": "pypi-sdist", "package": "xllamacpp", "version": "2026.10.11549"},
                     {"build_from_version": {"xllamacpp": r"\d{4}\.\d{1,2}\.(?P<build>\d+)(?:\.\d+)?"}})
    assert ok.build == 11549


@pytest.mark.parametrize(("url", "said"), [
    ("--upload-pack=touch /tmp/pwned", "read as an option of git"),
    ("ext::sh -c touch% /tmp/pwned", "remote helper"),
    ("fd::17", "remote helper"),
    ("ftp://example.com/repo.git", "not ftp://"),
    ("https://example.com/r\n.git", "remote helper"),
])
def test_a_git_source_url_is_a_repository_not_an_option_or_a_helper(url: str, said: str) -> None:
    from harness.engine.confine import check_git_url

    with pytest.raises(ConfigError, match=r"source\.url: .* is not a git repository URL") as e:
        check_git_url(url, where="engine.yaml:source.url")
    assert said in str(e.value)
    for ok in ("https://github.com/ggml-org/llama.cpp.git", "git@github.com:ggml-org/llama.cpp.git",
               "ssh://git@host/repo.git", "file:///srv/mirror/llama.cpp.git"):
        assert check_git_url(ok, where="x") == ok


def test_an_untrusted_recipe_fetches_no_repository_of_this_host(tmp_path: Path) -> None:
    """A contributor's recipe naming file:///home/you/.password-store (any local repository outside its
    project) would copy it into the source tree its build sees and its artifact can carry: refused
    before git runs."""
    from harness.build.pipeline import check_source_path

    root = tmp_path / "contrib" / "engines" / "tiny"

    def spec(url: str) -> EngineSpec:
        return dataclasses.replace(_engine(tmp_path / "contrib"), source=SourceSpec(kind="git", url=url, commit="0" * 40))

    assert spec("x").root == root
    for url in ("file:///home/you/.password-store", "/home/you/.password-store", "../../secrets.git"):
        with pytest.raises(ConfigError, match=r"is a repository on this host outside.*--trust tiny"):
            check_source_path(spec(url))
    check_source_path(spec("https://example.com/tiny.git"))  # a server is fine, and a repository inside
    own = spec((tmp_path / "contrib" / "tiny.git").as_uri())   # the recipe's own project
    check_source_path(own)
