"""The llama.cpp binding's JSON adapter (engines/llamacpp/binding/src/json_compat.h) picks the JSON type of
the pin's common library from what its headers provide, compiled here against two header layouts shaped
like the real ones: 0.3.36's common/json.h (``common_json``, which chat.h's functions take and give) and
0.3.35's vendor nlohmann (``nlohmann::ordered_json``, no common/json.h). A layout whose chat.h disagrees
with the pick fails to compile with the adapter's own message."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.core import paths

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (scripts/install-system-deps.sh)")

SRC = paths.project_root() / "engines" / "llamacpp" / "binding" / "src"

# common/json.h of 0.3.36, reduced to what the adapter calls (a class of its own, not an alias)
COMMON_JSON = """\
#pragma once
#include <cstdint>
#include <string>
class common_json {
  public:
    static common_json parse(const std::string & text);
    static common_json array();
    static common_json object();
    static common_json make(const std::string & val);
    static common_json make(int64_t val);
    std::string dump(int indent = -1) const;
    std::string dump_safe(int indent = -1) const;  // invalid UTF-8 replaced (nlohmann's error_handler_t::replace)
};
"""
# vendor/nlohmann/json.hpp, reduced the same way (basic_json's static parse/array/object, its converting
# constructors and dump with its defaulted indent, indent character, ensure_ascii and error handler)
NLOHMANN = """\
#pragma once
#include <cstdint>
#include <string>
namespace nlohmann {
class ordered_json {
  public:
    enum class error_handler_t { strict, replace, ignore };
    ordered_json(const std::string & s);
    ordered_json(int64_t v);
    static ordered_json parse(const std::string & text);
    static ordered_json array();
    static ordered_json object();
    std::string dump(int indent = -1, char indent_char = ' ', bool ensure_ascii = false,
                     error_handler_t error_handler = error_handler_t::strict) const;
};
}
"""
CHAT = """\
#pragma once
{include}
struct common_chat_msg {{
    {type} to_json_oaicompat(bool concat_typed_text = false) const;
}};
"""
USE = """\
#include "json_compat.h"
#include <type_traits>
static_assert(std::is_same<harness::cjson::json, {type}>::value, "picked the wrong type");
static_assert(HARNESS_COMMON_JSON == {flag}, "HARNESS_COMMON_JSON");
std::string use(const common_chat_msg & m) {{
    auto out = harness::cjson::array();
    auto o = harness::cjson::object();
    (void) harness::cjson::string("x");
    (void) harness::cjson::integer(3);
    (void) harness::cjson::parse("{{}}");
    (void) harness::cjson::dump_safe(harness::cjson::string("\\xff"));
    return harness::cjson::dump(m.to_json_oaicompat()) + harness::cjson::dump(out) + harness::cjson::dump(o);
}}
"""


def _layout(root: Path, *, common_json: bool, chat_type: str) -> Path:
    common = root / "include" / "common"
    common.mkdir(parents=True)
    if common_json:
        (common / "json.h").write_text(COMMON_JSON)
        include = '#include "json.h"'
    else:
        (root / "include" / "nlohmann").mkdir()
        (root / "include" / "nlohmann" / "json.hpp").write_text(NLOHMANN)
        include = "#include <nlohmann/json.hpp>"
    if chat_type == "nlohmann::ordered_json" and common_json:
        # a pin whose chat.h still speaks nlohmann although it ships common/json.h
        (root / "include" / "nlohmann").mkdir()
        (root / "include" / "nlohmann" / "json.hpp").write_text(NLOHMANN)
        include += "\n#include <nlohmann/json.hpp>"
    (common / "chat.h").write_text(CHAT.format(include=include, type=chat_type))
    return root / "include"


def _compile(include: Path, tu: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    src = tmp_path / "use.cpp"
    src.write_text(tu)
    # as the binding's CMakeLists: include/ and include/common on the path, json_compat.h beside engine.cpp
    argv = ["g++", "-std=c++17", "-fsyntax-only", f"-I{SRC}", f"-I{include}", f"-I{include / 'common'}", str(src)]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def test_a_pin_with_common_json_gets_common_json(tmp_path: Path) -> None:
    inc = _layout(tmp_path / "pin", common_json=True, chat_type="common_json")
    r = _compile(inc, USE.format(type="common_json", flag=1), tmp_path)
    assert r.returncode == 0, r.stderr


def test_an_older_pin_gets_nlohmanns_ordered_json(tmp_path: Path) -> None:
    inc = _layout(tmp_path / "pin", common_json=False, chat_type="nlohmann::ordered_json")
    r = _compile(inc, USE.format(type="nlohmann::ordered_json", flag=0), tmp_path)
    assert r.returncode == 0, r.stderr


def test_a_chat_api_of_another_type_than_the_pick_fails_with_the_adapters_message(tmp_path: Path) -> None:
    inc = _layout(tmp_path / "pin", common_json=True, chat_type="nlohmann::ordered_json")
    r = _compile(inc, '#include "json_compat.h"\n', tmp_path)
    assert r.returncode != 0
    assert "json_compat.h picked another JSON type than common/chat.h of this pin uses" in r.stderr


def test_the_binding_has_no_json_call_outside_the_adapter() -> None:
    # every call site goes through harness::cjson: a common_json or nlohmann name in an engine*.cpp or
    # module.cpp would compile against one side of the 0.3.35/0.3.36 boundary only
    for name in ("engine.cpp", "engine_submit.cpp", "engine_loop.cpp", "engine_speculation.cpp",
                 "engine_eval.cpp", "module.cpp", "engine.h", "engine_internal.h"):
        text = (SRC / name).read_text()
        assert "common_json" not in text and "nlohmann" not in text, name
        assert '#include "json.h"' not in text, name
