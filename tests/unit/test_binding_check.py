"""The binding check points at the right file: a header the artifact's ``artifacts.include`` does not collect is
the descriptor's gap, reported once for every unit that hit it, with the #include chain that led there and the
entry to add; the fatal error it causes hides none of the real errors behind it.

The engine ``tinyinc`` is built here: a pinned tree whose ``common/peg.h`` includes ``<jsonlib/json_fwd.hpp>``
from ``vendor/``, which the descriptor does not collect (as an upstream header once included a vendored JSON
library's forward header), and a binding of three units that include ``common/chat.h``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.abi.binding import BindingCheck, check_binding, raise_for
from harness.abi.diagnostics import (
    CompileProblem,
    TreeFiles,
    locate_missing,
    merge,
    parse_diagnostics,
)
from harness.core.errors import ArtifactIncludeError, BindingSurfaceError
from harness.core.types import EngineSpec, SourceSpec

needs_compiler = pytest.mark.skipif(not all(shutil.which(t) for t in ("cmake", "c++")),
                                    reason="needs cmake and a C++ compiler (bash scripts/install-system-deps.sh)")

BINDING_CMAKE = """\
cmake_minimum_required(VERSION 3.21)
project(tinyinc_binding LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
set(HARNESS_ARTIFACT "" CACHE PATH "artifact dir")
option(HEADERS_ONLY "configure for the syntax-only compile check" OFF)
file(GLOB UNITS "${CMAKE_CURRENT_SOURCE_DIR}/src/*.cpp")
add_library(_core MODULE ${UNITS})
target_include_directories(_core PRIVATE "${HARNESS_ARTIFACT}/include")
"""
UNIT = """\
#include "tiny.h"
#include "common/chat.h"

int {name}() {{ chat c; return tiny_add(1, c.p.n); }}
"""
#: The real error, behind the include that stops the unit.
BROKEN_UNIT = """\
#include "common/chat.h"

int c() { return tiny_removed(3); }
"""
INCLUDE = ["include:*.h", ".:common/*.h"]


def _tree(root: Path, *, peg_includes: str = "<jsonlib/json_fwd.hpp>") -> Path:
    files = {
        "include/tiny.h": "#pragma once\nint tiny_add(int a, int b);\n",
        "common/chat.h": '#pragma once\n#include "peg.h"\nstruct chat { peg p; };\n',
        "common/peg.h": f"#pragma once\n#include {peg_includes}\nstruct peg {{ jsonlib::json * j = nullptr; int n = 0; }};\n",
        "vendor/jsonlib/json_fwd.hpp": "#pragma once\nnamespace jsonlib { struct json; }\n",
        "vendor/jsonlib/json.hpp": "#pragma once\n#include \"json_fwd.hpp\"\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _spec(tmp_path: Path, include: list[str]) -> EngineSpec:
    return EngineSpec(name="tinyinc", root=tmp_path / "engines" / "tinyinc", source=SourceSpec(kind="git"),
                      upstream={}, cmake={}, targets=(), artifacts={"include": tuple(include)}, abi={})


def _binding(tmp_path: Path, units: dict[str, str]) -> Path:
    src = tmp_path / "engines" / "tinyinc" / "binding"
    (src / "src").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(BINDING_CMAKE)
    for name, text in units.items():
        (src / "src" / name).write_text(text)
    return src


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_NO_PROGRESS", "1")
    monkeypatch.setattr("harness.engine.trust.is_trusted", lambda spec: True)  # compiled on the host
    return tmp_path


def _check(tmp_path: Path, tree: Path, include: list[str], source: Path) -> BindingCheck:
    result = check_binding(_spec(tmp_path, include), tree, source_dir=source, force=True)
    assert result is not None
    return result


@needs_compiler
def test_a_header_missing_from_the_artifact_is_one_problem_naming_every_unit_and_the_entry_to_add(env: Path) -> None:
    tree = _tree(env / "src")
    source = _binding(env, {f"{n}.cpp": UNIT.format(name=n) for n in ("a", "b", "c")})
    result = _check(env, tree, INCLUDE, source)

    assert len(result.problems) == 1, "\n".join(map(str, result.problems))  # not one copy per unit
    p = result.problems[0]
    assert (p.file, p.line) == ("common/peg.h", 2)  # the upstream header, by its path in the pinned tree
    assert p.missing_header == "jsonlib/json_fwd.hpp"
    assert sorted(Path(u).name for u in p.units) == ["a.cpp", "b.cpp", "c.cpp"]
    # the binding unit and the include chain that led into the upstream header, the unit first
    assert p.included_from[0].endswith(".cpp:2") and p.included_from[1:] == ("common/chat.h:2",)
    # found in the tree: the entry that puts it where the #include looks
    assert p.artifact_include == "vendor:jsonlib/json_fwd.hpp"
    assert result.as_json()["artifact_include"] == ["vendor:jsonlib/json_fwd.hpp"]

    with pytest.raises(ArtifactIncludeError) as e:
        raise_for(result)
    msg = str(e.value)
    assert msg.count("No such file or directory") == 1
    assert "in 3 units (" in msg and "a.cpp, b.cpp, c.cpp" in msg
    assert "included from: " in msg and " -> common/chat.h:2" in msg
    assert "the pinned tree has vendor/jsonlib/json_fwd.hpp" in msg
    assert 'add it to `artifacts.include` in ' in msg and 'engines/tinyinc/engine.yaml: "vendor:jsonlib/json_fwd.hpp"' in msg
    assert "binding must change" not in msg.lower()

    # the entry proposed is exactly the fix
    assert _check(env, tree, [*INCLUDE, p.artifact_include], source).ok


@needs_compiler
def test_the_fatal_error_hides_no_real_error_behind_it(env: Path) -> None:
    tree = _tree(env / "src")
    source = _binding(env, {"a.cpp": UNIT.format(name="a"), "b.cpp": UNIT.format(name="b"), "c.cpp": BROKEN_UNIT})
    result = _check(env, tree, INCLUDE, source)

    missing, real = result.missing_from_artifact, result.binding_errors
    assert len(missing) == 1 and len(missing[0].units) == 3
    # c.cpp stopped at the include; compiled again with vendor/ on its include path, its real error shows
    assert [(Path(p.file).name, p.line) for p in real] == [("c.cpp", 3)]
    assert "tiny_removed" in real[0].message and real[0].retried_with == ("vendor",)
    assert [Path(u).name for u in real[0].units] == ["c.cpp"]

    with pytest.raises(BindingSurfaceError) as e:
        raise_for(result)
    assert not isinstance(e.value, ArtifactIncludeError)
    msg = str(e.value)
    assert '"vendor:jsonlib/json_fwd.hpp" to `artifacts.include`' in msg
    assert "The binding must change (engines/tinyinc/binding/) for the other 1 error" in msg
    assert "found once the pinned tree's vendor/ was added to the include path" in msg


@needs_compiler
def test_a_header_that_exists_nowhere_is_a_real_error(env: Path) -> None:
    tree = _tree(env / "src", peg_includes="<nowhere/gone.hpp>")
    source = _binding(env, {f"{n}.cpp": UNIT.format(name=n) for n in ("a", "b")})
    result = _check(env, tree, INCLUDE, source)

    assert len(result.problems) == 1 and not result.missing_from_artifact
    p = result.problems[0]
    assert p.missing_header == "nowhere/gone.hpp" and len(p.units) == 2
    assert "nowhere in the pinned tree" in p.hint and "other errors are unknown" in p.hint
    with pytest.raises(BindingSurfaceError) as e:
        raise_for(result)
    assert not isinstance(e.value, ArtifactIncludeError)
    assert "The binding must change" in str(e.value) and "artifacts.include" not in str(e.value)


@needs_compiler
def test_a_quoted_include_beside_a_collected_header_is_collected_beside_it(env: Path) -> None:
    tree = _tree(env / "src")
    source = _binding(env, {"a.cpp": UNIT.format(name="a")})
    # chat.h collected, the peg.h it includes "beside" it not; json_fwd.hpp collected
    result = _check(env, tree, ["include:*.h", ".:common/chat.h", "vendor:jsonlib/*.hpp"], source)
    assert [p.artifact_include for p in result.problems] == [".:common/peg.h"]
    assert result.problems[0].file == "common/chat.h"


def test_clang_and_gcc_include_stacks_read_the_same(tmp_path: Path) -> None:
    include = tmp_path / "artifact" / "include"
    unit = str(tmp_path / "binding" / "a.cpp")
    names = {"common/chat.h": "common/chat.h", "common/peg.h": "common/peg.h"}
    gcc = (f"In file included from {include}/common/chat.h:2,\n"
           f"                 from {unit}:2:\n"
           f"{include}/common/peg.h:2:10: fatal error: jsonlib/json_fwd.hpp: No such file or directory\n"
           "    2 | #include <jsonlib/json_fwd.hpp>\n"
           "compilation terminated.\n")
    clang = (f"In file included from {unit}:2:\n"
             f"In file included from {include}/common/chat.h:2:\n"
             f"{include}/common/peg.h:2:10: fatal error: 'jsonlib/json_fwd.hpp' file not found\n"
             "#include <jsonlib/json_fwd.hpp>\n"
             "         ^~~~~~~~~~~~~~~~~~~~~~\n"
             "1 error generated.\n")
    for output in (gcc, clang):
        [p] = parse_diagnostics(output, include=include, names=names, unit=unit)
        assert (p.file, p.line, p.column, p.missing_header) == ("common/peg.h", 2, 10, "jsonlib/json_fwd.hpp")
        assert p.included_from[1:] == ("common/chat.h:2",) and p.included_from[0].endswith("a.cpp:2")

    # a later error in the same header has no stack printed again: it keeps the one it had
    more = gcc.replace("fatal error: jsonlib/json_fwd.hpp: No such file or directory", "error: 'x' was not declared")
    more += f"{include}/common/peg.h:3:1: error: 'y' was not declared\n{unit}:4:1: error: 'z' was not declared\n"
    chains = [p.included_from for p in parse_diagnostics(more, include=include, names=names, unit=unit)]
    assert chains[0] == chains[1] and chains[0] and chains[2] == ()


def test_identical_problems_merge_naming_every_unit() -> None:
    def problem(unit: str, line: int = 2) -> CompileProblem:
        return CompileProblem(file="common/peg.h", line=line, column=10, message="m", units=(unit,))

    merged = merge([[problem("a.cpp")], [problem("b.cpp"), problem("b.cpp", 3)], [problem("c.cpp")]])
    assert [(p.line, p.units) for p in merged] == [(2, ("a.cpp", "b.cpp", "c.cpp")), (3, ("b.cpp",))]
    assert "in 3 units: a.cpp, b.cpp, c.cpp" in str(merged[0])


def test_a_missing_header_is_looked_for_inside_the_tree_only(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "src")
    files = TreeFiles(tree)
    include = tmp_path / "include"

    def located(name: str) -> str | None:
        p = CompileProblem(file="x.cpp", line=1, column=1, message="", missing_header=name)
        found = locate_missing(p, include=include, names={}, files=files)
        return found.entry if found else None

    assert located("jsonlib/json.hpp") == "vendor:jsonlib/json.hpp"
    assert located("json.hpp") == "vendor/jsonlib:json.hpp"
    assert located("tiny.h") == "include:tiny.h"
    assert located("common/peg.h") == ".:common/peg.h"
    (tmp_path / "host.h").write_text("")
    (tree / "vendor" / "host.h").symlink_to(tmp_path / "host.h")  # a link out of the tree is never proposed
    for outside in (str(tmp_path / "src" / "include" / "tiny.h"), "../src/include/tiny.h", "nowhere.h", "*.h",
                    "host.h"):
        assert located(outside) is None, outside
    # already collected where the entry would put it: not the artifact's gap
    p = CompileProblem(file="x.cpp", line=1, column=1, message="", missing_header="tiny.h")
    assert locate_missing(p, include=include, names={"tiny.h": "include/tiny.h"}, files=files) is None


@needs_compiler
def test_an_error_in_the_binding_names_the_upstream_declaration_it_met(env: Path) -> None:
    tree = _tree(env / "src")
    source = _binding(env, {"d.cpp": '#include "common/chat.h"\n\nint d() { peg p; return p.gone; }\n'})
    result = _check(env, tree, [*INCLUDE, "vendor:jsonlib/*.hpp"], source)
    [p] = result.problems
    assert (Path(p.file).name, p.line, p.included_from) == ("d.cpp", 3, ())
    # read from the pinned tree (the stand-in's entries are links, which the confined accessor does not follow)
    assert len(p.upstream) == 1 and p.upstream[0].startswith("common/peg.h:3: struct peg {")
