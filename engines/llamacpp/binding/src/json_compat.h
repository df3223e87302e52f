// The JSON type of the pinned llama.cpp's common library, picked by what the pin's headers provide.
//
// From 0.3.36 on, common/json.h wraps the vendored JSON library in `common_json` (a class of its own,
// pimpl, not an alias), and json_schema_to_grammar, common_chat_msgs_parse_oaicompat,
// common_chat_tools_parse_oaicompat and common_chat_msg::to_json_oaicompat take and give it. Earlier
// pins (0.3.35 and before) have no common/json.h: the same functions take nlohmann::ordered_json
// (vendor/nlohmann, which their artifact carries as include/nlohmann/). The binding writes every JSON
// call site once against the functions below; this header is the only place that knows which API the
// pin has. The choice is checked against the real chat.h (the static_assert): a pin whose chat API
// hands back another type than the one picked here fails to compile with that message, not later.
#pragma once

#if __has_include("json.h")
#include "json.h"
#define HARNESS_COMMON_JSON 1
#else
#include <nlohmann/json.hpp>
#define HARNESS_COMMON_JSON 0
#endif

#include "chat.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace harness::cjson {

#if HARNESS_COMMON_JSON
using json = common_json;
#else
using json = nlohmann::ordered_json;
#endif

static_assert(std::is_same<json, decltype(std::declval<const common_chat_msg &>().to_json_oaicompat())>::value,
              "json_compat.h picked another JSON type than common/chat.h of this pin uses "
              "(common_json when common/json.h exists, nlohmann::ordered_json otherwise): "
              "adapt json_compat.h to this pin's common library");

// Throws (common_json_error or nlohmann's parse_error, both std::exception) on text that is not JSON.
inline json parse(const std::string & text) { return json::parse(text); }

inline json object() { return json::object(); }

inline json array() { return json::array(); }

// A JSON string holding `s`; dumping it quotes and escapes it.
inline json string(const std::string & s) {
#if HARNESS_COMMON_JSON
    return common_json::make(s);
#else
    return json(s);
#endif
}

inline json integer(int64_t v) {
#if HARNESS_COMMON_JSON
    return common_json::make(v);
#else
    return json(v);
#endif
}

// Compact (no indentation), as both libraries dump by default.
inline std::string dump(const json & j) { return j.dump(); }

// Compact, with bytes that are not UTF-8 written as U+FFFD instead of an exception.
inline std::string dump_safe(const json & j) {
#if HARNESS_COMMON_JSON
    return j.dump_safe();
#else
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
#endif
}

}  // namespace harness::cjson
