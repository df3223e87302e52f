// Requests and what feeds the decode loop: sampling params, the request's event queue, tokens,
// submit (the sampler chain), and chat (the template, tool calls, the generic tool envelope).
#include "engine.h"
#include "engine_internal.h"

#include "common.h"
#include "json-schema-to-grammar.h"
#include "json_compat.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace harness {

namespace {

std::string json_str(const std::string & s) { return cjson::dump(cjson::string(s)); }

// JSON Schema of the envelope: {"tool_call": {"name": ..., "arguments": {...}}} (or {"response": "..."}).
std::string generic_tool_schema(const std::vector<common_chat_tool> & tools, bool required) {
    std::string calls;
    for (const auto & t : tools) {
        std::string params = t.parameters.empty() ? std::string("{\"type\":\"object\"}") : t.parameters;
        calls += (calls.empty() ? "" : ",") + std::string("{\"type\":\"object\",\"properties\":{\"name\":{\"const\":") +
                 json_str(t.name) + "},\"arguments\":" + params + "},\"required\":[\"name\",\"arguments\"]}";
    }
    std::string call = "{\"type\":\"object\",\"properties\":{\"tool_call\":{\"oneOf\":[" + calls +
                       "]}},\"required\":[\"tool_call\"]}";
    if (required) return call;
    return "{\"oneOf\":[" + call +
           ",{\"type\":\"object\",\"properties\":{\"response\":{\"type\":\"string\"}},\"required\":[\"response\"]}]}";
}

std::string generic_tool_prompt(const std::vector<common_chat_tool> & tools, bool required) {
    std::string s = "You can call these tools:\n";
    for (const auto & t : tools) {
        s += "- " + t.name + ": " + t.description + " Parameters (JSON Schema): " + t.parameters + "\n";
    }
    s += required ? "Respond with a JSON object {\"tool_call\": {\"name\": <tool name>, \"arguments\": {...}}}."
                  : "Respond with a JSON object: either {\"tool_call\": {\"name\": <tool name>, \"arguments\": {...}}} "
                    "to call a tool, or {\"response\": <your answer>}.";
    return s;
}
}  // namespace

// ---------------------------------------------------------------------------
// SamplingParams
// ---------------------------------------------------------------------------

void SamplingParams::validate() const {
    auto bad = [](const std::string & what) { throw std::invalid_argument(what); };
    if (!(temperature >= 0.0f) || !std::isfinite(temperature)) bad("temperature must be >= 0, got " + std::to_string(temperature));
    if (!(top_p > 0.0f && top_p <= 1.0f)) bad("top_p must be in (0, 1], got " + std::to_string(top_p));
    if (top_k < 0) bad("top_k must be >= 0 (0 = whole vocabulary), got " + std::to_string(top_k));
    if (!(min_p >= 0.0f && min_p <= 1.0f)) bad("min_p must be in [0, 1], got " + std::to_string(min_p));
    if (max_tokens < 0) bad("max_tokens must be >= 0 (0 = until the context is full), got " + std::to_string(max_tokens));
    if (!(repetition_penalty > 0.0f)) bad("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
    if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) bad("presence_penalty must be in [-2, 2], got " + std::to_string(presence_penalty));
    if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) bad("frequency_penalty must be in [-2, 2], got " + std::to_string(frequency_penalty));
    if (penalty_last_n < -1) bad("penalty_last_n must be >= -1");
    for (const auto & s : stop) if (s.empty()) bad("stop strings must not be empty");
    if (!grammar.empty() && !json_schema.empty()) bad("give either grammar or json_schema, not both");
}

// ---------------------------------------------------------------------------
// Request
// ---------------------------------------------------------------------------

void Request::push(Event e) {
    std::unique_lock<std::mutex> lk(mu_);
    if (writer_ && e.kind == Event::Delta) {
        // Taken before mu_ is let go, so that unset_writer(), which sets writer_ under mu_ and then
        // takes write_mu_, returns only after this write.
        std::unique_lock<std::mutex> wlk(write_mu_);
        Writer w = writer_;
        lk.unlock();
        if (w(e.text)) return;
        wlk.unlock();
        lk.lock();
        writer_ = nullptr;
        events_.push_back({Event::Delta, "", ""});  // wakes the caller, who writes what the writer kept
    } else {
        events_.push_back(std::move(e));
    }
    lk.unlock();
    cv_.notify_all();
}

bool Request::set_writer(Writer w) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!events_.empty() || finished_) return false;
    writer_ = std::move(w);
    return true;
}

void Request::unset_writer() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        writer_ = nullptr;
    }
    std::lock_guard<std::mutex> wlk(write_mu_);
}

void Request::finish(const std::string & reason) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (finished_) return;
        finished_ = true;
        finish_reason_ = reason;
        t.t_done = now_seconds();
        events_.push_back({Event::Done, reason, ""});
    }
    cv_.notify_all();
}

void Request::fail(const std::string & type, const std::string & message) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (finished_) return;
        finished_ = true;
        finish_reason_ = "error";
        t.t_done = now_seconds();
        events_.push_back({Event::Error, message, type});
    }
    cv_.notify_all();
}

Event Request::wait() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return finished_; });
    // The end event is the last one queued: return it, dropping any deltas before it.
    Event e = events_.empty() ? Event{Event::Done, finish_reason_, ""} : events_.back();
    events_.clear();
    consumed_end_ = true;
    return e;
}

std::optional<Event> Request::next() {
    std::unique_lock<std::mutex> lk(mu_);
    if (consumed_end_) return std::nullopt;
    cv_.wait(lk, [&] { return !events_.empty(); });
    Event e = std::move(events_.front());
    events_.pop_front();
    if (e.kind != Event::Delta) consumed_end_ = true;
    return e;
}

std::optional<Event> Request::try_next() {
    std::lock_guard<std::mutex> lk(mu_);
    if (consumed_end_ || events_.empty()) return std::nullopt;
    Event e = std::move(events_.front());
    events_.pop_front();
    if (e.kind != Event::Delta) consumed_end_ = true;
    return e;
}

bool Request::done() const {
    std::lock_guard<std::mutex> lk(mu_);
    return finished_;
}

std::string Request::finish_reason() const {
    std::lock_guard<std::mutex> lk(mu_);
    return finish_reason_;
}

Timings Request::timings() const {
    std::lock_guard<std::mutex> lk(mu_);
    return t;
}

std::string Request::text() const {
    std::lock_guard<std::mutex> lk(mu_);
    return final_text;
}

// ---------------------------------------------------------------------------
// tokens
// ---------------------------------------------------------------------------

std::vector<llama_token> Engine::tokenize(const std::string & text, bool add_special, bool parse_special) const {
    return common_tokenize(vocab_, text, add_special, parse_special);
}

std::string Engine::detokenize(const std::vector<llama_token> & tokens, bool special) const {
    int32_t n_vocab = llama_vocab_n_tokens(vocab_);
    for (auto t : tokens) {
        if (t < 0 || t >= n_vocab) throw std::invalid_argument("token id " + std::to_string(t) + " out of range [0, " + std::to_string(n_vocab) + ")");
    }
    return common_detokenize(vocab_, tokens, special);
}

// ---------------------------------------------------------------------------
// submit
// ---------------------------------------------------------------------------

std::shared_ptr<Request> Engine::submit_text(const std::string & prompt, const SamplingParams & sp, bool streaming) {
    return submit(tokenize(prompt, true, true), sp, nullptr, streaming);
}

std::shared_ptr<Request> Engine::submit(std::vector<llama_token> prompt, const SamplingParams & sp,
                                        std::shared_ptr<ChatSetup> chat, bool streaming) {
    if (embedding_only_) throw std::invalid_argument("model architecture '" + arch_ + "' is an embedding model: use embed()");
    sp.validate();
    if (prompt.empty()) throw std::invalid_argument("prompt is empty");
    const int32_t n_vocab = llama_vocab_n_tokens(vocab_);
    for (auto t : prompt) {
        if (t < 0 || t >= n_vocab) throw std::invalid_argument("prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    }
    const int32_t n_keep = params_.context_shift ? keep_for(prompt, chat.get()) : 0;
    int32_t n_erased = 0;
    if ((int32_t) prompt.size() >= n_ctx_) {
        if (!params_.context_shift) {
            throw ContextOverflowError("request of " + std::to_string(prompt.size()) + " prompt tokens does not fit the context of " +
                                       std::to_string(n_ctx_) + " tokens (raise context_size, shorten the prompt, or turn "
                                       "context_shift on to drop its oldest tokens)");
        }
        n_erased = truncate_prompt(prompt, n_keep);
    }
    auto req = std::make_shared<Request>();
    req->n_keep = n_keep;
    req->t.n_erased = n_erased;
    req->prompt = std::move(prompt);
    req->sampling = sp;
    req->chat = std::move(chat);
    req->streaming = streaming;

    common_params_sampling cps;
    cps.seed = sp.seed;
    cps.temp = sp.temperature;
    cps.top_p = sp.top_p;
    cps.top_k = sp.top_k;
    cps.min_p = sp.min_p;
    cps.penalty_repeat = sp.repetition_penalty;
    cps.penalty_freq = sp.frequency_penalty;
    cps.penalty_present = sp.presence_penalty;
    cps.penalty_last_n = sp.penalty_last_n;
    cps.ignore_eos = sp.ignore_eos;
    if (sp.temperature <= 0.0f) {
        // Greedy: the argmax is the whole answer, so skip the truncation samplers that
        // would each walk the vocabulary (penalties still shape the logits first).
        cps.samplers.clear();
        if (sp.repetition_penalty != 1.0f || sp.frequency_penalty != 0.0f || sp.presence_penalty != 0.0f) {
            cps.samplers.push_back(COMMON_SAMPLER_TYPE_PENALTIES);
        }
        cps.samplers.push_back(COMMON_SAMPLER_TYPE_TOP_K);
        cps.top_k = 1;
    }
    if (sp.ignore_eos) {
        for (llama_token t = 0; t < llama_vocab_n_tokens(vocab_); ++t) {
            if (llama_vocab_is_eog(vocab_, t)) cps.logit_bias.push_back({t, -INFINITY});
        }
    }
    try {
        if (!sp.json_schema.empty()) {
            cps.grammar = {COMMON_GRAMMAR_TYPE_OUTPUT_FORMAT, json_schema_to_grammar(cjson::parse(sp.json_schema))};
        } else if (!sp.grammar.empty()) {
            cps.grammar = {COMMON_GRAMMAR_TYPE_USER, sp.grammar};
        }
    } catch (const std::exception & e) {
        throw std::invalid_argument(std::string("invalid json_schema: ") + e.what());
    }
    if (req->chat) {
        const auto & cp = req->chat->params;
        if (!cp.grammar.empty() && sp.grammar.empty() && sp.json_schema.empty()) {
            cps.grammar = {COMMON_GRAMMAR_TYPE_TOOL_CALLS, cp.grammar};
            cps.grammar_lazy = cp.grammar_lazy;
            // The template's own grammar starts at the generation prompt it prefilled;
            // our JSON-schema grammars start at the first generated byte.
            cps.generation_prompt = cp.generation_prompt;
        }
        for (const auto & t : cp.preserved_tokens) {
            auto ids = common_tokenize(vocab_, t, false, true);
            if (ids.size() == 1) cps.preserved_tokens.insert(ids[0]);
        }
        for (const auto & trig : cp.grammar_triggers) {
            if (trig.type == COMMON_GRAMMAR_TRIGGER_TYPE_WORD) {
                auto ids = common_tokenize(vocab_, trig.value, false, true);
                if (ids.size() == 1 && cps.preserved_tokens.count(ids[0])) {
                    common_grammar_trigger t2;
                    t2.type = COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN;
                    t2.value = trig.value;
                    t2.token = ids[0];
                    cps.grammar_triggers.push_back(t2);
                    continue;
                }
            }
            cps.grammar_triggers.push_back(trig);
        }
        for (const auto & s : cp.additional_stops) req->sampling.stop.push_back(s);
    }
    // Greedy with nothing that reshapes the logits: take the argmax directly instead of
    // building the sampler's candidate array over the whole vocabulary every token.
    // ignore_eos too: the sampler's -inf bias on end-of-generation tokens is the argmax skipping them.
    req->plain_greedy = sp.temperature <= 0.0f && cps.grammar.grammar.empty() && !req->chat &&
                        sp.repetition_penalty == 1.0f && sp.frequency_penalty == 0.0f && sp.presence_penalty == 0.0f;
    req->sampler.reset(common_sampler_init(model_, cps));
    if (!req->sampler) throw std::invalid_argument("could not build the sampler (invalid grammar?): " + last_errors());
    req->t.n_prompt = (int32_t) req->prompt.size();
    req->t.t_submit = now_seconds();
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) throw EngineClosedError("engine is closed");
        req->id = next_id_++;
        pending_.push_back(req);
    }
    cv_.notify_all();
    return req;
}

// ---------------------------------------------------------------------------
// chat
// ---------------------------------------------------------------------------

std::shared_ptr<Request> Engine::submit_chat(const std::string & messages_json, const std::string & tools_json,
                                             const std::string & tool_choice, const std::string & json_schema,
                                             SamplingParams sp, bool streaming) {
    if (!templates_) throw std::invalid_argument("model has no usable chat template (tokenizer.chat_template)");
    common_chat_templates_inputs in;
    try {
        in.messages = common_chat_msgs_parse_oaicompat(cjson::parse(messages_json));
        if (!tools_json.empty()) in.tools = common_chat_tools_parse_oaicompat(cjson::parse(tools_json));
    } catch (const std::exception & e) {
        throw std::invalid_argument(std::string("invalid messages/tools: ") + e.what());
    }
    if (in.messages.empty()) throw std::invalid_argument("messages must not be empty");
    if (tool_choice == "auto" || tool_choice.empty()) {
        in.tool_choice = COMMON_CHAT_TOOL_CHOICE_AUTO;
    } else if (tool_choice == "required") {
        in.tool_choice = COMMON_CHAT_TOOL_CHOICE_REQUIRED;
    } else if (tool_choice == "none") {
        in.tool_choice = COMMON_CHAT_TOOL_CHOICE_NONE;
    } else {
        // A named function: keep only that tool and require a call.
        auto it = std::find_if(in.tools.begin(), in.tools.end(), [&](const common_chat_tool & t) { return t.name == tool_choice; });
        if (it == in.tools.end()) throw std::invalid_argument("tool_choice names function '" + tool_choice + "' which is not in tools");
        common_chat_tool keep = *it;
        in.tools = {keep};
        in.tool_choice = COMMON_CHAT_TOOL_CHOICE_REQUIRED;
    }
    if (!in.tools.empty() && in.tool_choice != COMMON_CHAT_TOOL_CHOICE_NONE) in.parallel_tool_calls = false;
    in.json_schema = json_schema;
    in.use_jinja = true;
    in.add_generation_prompt = true;
    auto setup = std::make_shared<ChatSetup>();
    try {
        setup->params = common_chat_templates_apply(templates_.get(), in);
    } catch (const std::exception & e) {
        throw std::invalid_argument(std::string("chat template failed: ") + e.what());
    }
    if (!in.tools.empty() && in.tool_choice != COMMON_CHAT_TOOL_CHOICE_NONE && setup->params.grammar.empty()) {
        sp.json_schema = generic_tool_schema(in.tools, in.tool_choice == COMMON_CHAT_TOOL_CHOICE_REQUIRED);
        std::string sys = generic_tool_prompt(in.tools, in.tool_choice == COMMON_CHAT_TOOL_CHOICE_REQUIRED);
        if (!in.messages.empty() && in.messages.front().role == "system") {
            in.messages.front().content += "\n\n" + sys;
        } else {
            common_chat_msg m;
            m.role = "system";
            m.content = sys;
            in.messages.insert(in.messages.begin(), m);
        }
        in.tools.clear();
        in.json_schema.clear();
        try {
            setup->params = common_chat_templates_apply(templates_.get(), in);
        } catch (const std::exception & e) {
            throw std::invalid_argument(std::string("chat template failed: ") + e.what());
        }
        setup->generic_tools = true;
    }
    // The template's PEG parser (an arena since llama.cpp b11549; it parses tool calls only when the
    // template was applied with tools, so there is no separate switch for them any more).
    setup->parser = common_chat_parser_params(setup->params);
    setup->parser.parser = setup->params.parser;
    if (!json_schema.empty() && setup->params.grammar.empty() && !setup->generic_tools) sp.json_schema = json_schema;
    // The template already holds BOS when it wants one.
    auto tokens = tokenize(setup->params.prompt, false, true);
    if (params_.context_shift) setup->n_keep = system_tokens(in, tokens);
    return submit(std::move(tokens), sp, setup, streaming);
}

namespace {

// Reads the generic tool envelope ({"tool_call": {"name": ..., "arguments": {...}}} or
// {"response": "..."}) as far as it has been written. The arguments are the model's own bytes,
// so the fragments streamed while partial add up to the final string.
struct EnvelopeReader {
    const std::string & s;
    size_t i = 0;
    bool partial;

    void ws() { while (i < s.size() && std::isspace((unsigned char) s[i])) ++i; }
    bool at_end() { ws(); return i >= s.size(); }
    bool eat(char c) {
        ws();
        if (i < s.size() && s[i] == c) { ++i; return true; }
        return false;
    }
    // A JSON string starting at s[i] == '"'. complete=false when the text ends inside it; then
    // `out` holds what is decoded so far (never half an escape).
    bool string(std::string & out, bool & complete) {
        ws();
        if (i >= s.size() || s[i] != '"') return false;
        ++i;
        complete = false;
        while (i < s.size()) {
            char c = s[i];
            if (c == '"') { ++i; complete = true; return true; }
            if (c != '\\') { out += c; ++i; continue; }
            if (i + 1 >= s.size()) return true;
            char e = s[i + 1];
            static const std::string simple = "\"\\/bfnrt", mapped = "\"\\/\b\f\n\r\t";
            auto k = simple.find(e);
            if (k != std::string::npos) { out += mapped[k]; i += 2; continue; }
            if (e != 'u') return false;
            auto hex4 = [&](size_t at, uint32_t & v) {
                if (at + 4 > s.size()) return false;
                v = 0;
                for (size_t j = at; j < at + 4; ++j) {
                    char h = s[j];
                    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (d < 0) return false;
                    v = v * 16 + (uint32_t) d;
                }
                return true;
            };
            uint32_t cp;
            if (!hex4(i + 2, cp)) return true;  // incomplete (or bad: the final parse says so)
            size_t used = 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (i + 12 > s.size() || s[i + 6] != '\\' || s[i + 7] != 'u' || !hex4(i + 8, lo)) return true;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                used = 12;
            }
            if (cp < 0x80) out += (char) cp;
            else if (cp < 0x800) { out += (char) (0xC0 | (cp >> 6)); out += (char) (0x80 | (cp & 0x3F)); }
            else if (cp < 0x10000) { out += (char) (0xE0 | (cp >> 12)); out += (char) (0x80 | ((cp >> 6) & 0x3F)); out += (char) (0x80 | (cp & 0x3F)); }
            else { out += (char) (0xF0 | (cp >> 18)); out += (char) (0x80 | ((cp >> 12) & 0x3F)); out += (char) (0x80 | ((cp >> 6) & 0x3F)); out += (char) (0x80 | (cp & 0x3F)); }
            i += used;
        }
        return true;
    }
    // The raw text of one JSON value; complete=false when the text ends inside it.
    std::string raw_value(bool & complete) {
        ws();
        size_t start = i;
        int depth = 0;
        bool in_str = false;
        complete = false;
        for (; i < s.size(); ++i) {
            char c = s[i];
            if (in_str) {
                if (c == '\\') ++i;
                else if (c == '"') in_str = false;
                continue;
            }
            if (c == '"') in_str = true;
            else if (c == '{' || c == '[') ++depth;
            else if (c == '}' || c == ']') {
                if (--depth == 0) { ++i; complete = true; break; }
                if (depth < 0) break;
            } else if (depth == 0 && (c == ',' )) { complete = true; break; }
        }
        if (i > s.size()) i = s.size();
        return s.substr(start, std::min(i, s.size()) - start);
    }

    // false: not the envelope (or, when complete, not a whole one)
    bool read(common_chat_msg & msg, const std::string & call_id) {
        msg.role = "assistant";
        if (!eat('{')) return partial && at_end();
        std::string key;
        bool done;
        if (!string(key, done)) return partial && at_end();
        if (!done) return partial;
        if (!eat(':')) return partial && at_end();
        if (key == "response") {
            if (!string(msg.content, done)) return partial && at_end();
            return partial || (done && eat('}') && at_end());
        }
        if (key != "tool_call") return false;
        if (!eat('{')) return partial && at_end();
        common_chat_tool_call call;
        bool have_name = false, args_done = false;
        while (true) {
            std::string k;
            if (!string(k, done)) return partial && at_end();
            if (!done || !eat(':')) return partial;
            if (k == "name") {
                std::string name;
                if (!string(name, done)) return partial && at_end();
                if (!done) return partial;
                call.name = name;
                call.id = call_id;
                have_name = true;
                msg.tool_calls = {call};
            } else if (k == "arguments") {
                if (!have_name) return false;
                call.arguments = raw_value(args_done);
                while (!call.arguments.empty() && std::isspace((unsigned char) call.arguments.back())) call.arguments.pop_back();
                msg.tool_calls = {call};
                if (!args_done) return partial;
            } else {
                return false;
            }
            if (eat(',')) continue;
            if (!eat('}')) return partial && at_end();
            break;
        }
        if (!have_name) return false;
        if (call.arguments.empty()) {
            call.arguments = "{}";
            msg.tool_calls = {call};
        }
        return partial || (eat('}') && at_end());
    }
};

}  // namespace

common_chat_msg Engine::chat_message(const Request & req, bool partial) const {
    if (!req.chat) throw std::invalid_argument("not a chat request");
    const std::string text = req.text();
    common_chat_msg msg;
    if (req.chat->generic_tools) {
        const std::string id = "call_" + std::to_string(req.id) + "_0";
        EnvelopeReader rd{text, 0, partial};
        if (rd.read(msg, id)) return msg;
        if (partial) throw std::invalid_argument("not (yet) the tool envelope");
        // Cut short (max_tokens): what the envelope holds so far, as the stream reported it.
        msg = common_chat_msg();
        EnvelopeReader cut{text, 0, true};
        if (cut.read(msg, id)) return msg;
        msg = common_chat_msg();
        msg.role = "assistant";
        msg.content = text;  // not the envelope at all: hand back what came
        return msg;
    }
    try {
        msg = common_chat_parse(common_chat_input(text), partial, req.chat->parser);
    } catch (const std::exception &) {
        if (partial) throw;
        msg = common_chat_msg();
        msg.content = text;
    }
    if (msg.role.empty()) msg.role = "assistant";
    for (size_t k = 0; k < msg.tool_calls.size(); ++k) {
        if (msg.tool_calls[k].id.empty()) msg.tool_calls[k].id = "call_" + std::to_string(req.id) + "_" + std::to_string(k);
    }
    return msg;
}

std::string Engine::parse_chat(const Request & req) const {
    return cjson::dump(chat_message(req, false).to_json_oaicompat());
}

std::string Engine::chat_diffs(Request & req, bool final) const {
    std::string out = "[";
    for (const auto & d : chat_diff_list(req, final)) {
        if (out.size() > 1) out += ',';
        out += d;
    }
    return out + "]";
}

std::vector<std::string> Engine::chat_diff_list(Request & req, bool final) const {
    common_chat_msg now;
    std::vector<common_chat_msg_diff> diffs;
    try {
        now = chat_message(req, !final);
        diffs = common_chat_msg_diff::compute_diffs(req.chat_sent, now);
    } catch (const std::exception &) {
        // Not parseable yet (or the parse went back on itself): report nothing until it is.
        return {};
    }
    req.chat_sent = std::move(now);
    std::vector<std::string> out;
    for (const auto & d : diffs) {
        auto delta = cjson::object();
        if (!d.reasoning_content_delta.empty()) delta["reasoning_content"] = cjson::string(d.reasoning_content_delta);
        if (!d.content_delta.empty()) delta["content"] = cjson::string(d.content_delta);
        if (d.tool_call_index != std::string::npos) {
            auto call = cjson::object();
            call["index"] = cjson::integer((int64_t) d.tool_call_index);
            if (!d.tool_call_delta.id.empty()) {
                call["id"] = cjson::string(d.tool_call_delta.id);
                call["type"] = cjson::string("function");
            }
            auto fn = cjson::object();
            if (!d.tool_call_delta.name.empty()) fn["name"] = cjson::string(d.tool_call_delta.name);
            fn["arguments"] = cjson::string(d.tool_call_delta.arguments);
            call["function"] = fn;
            auto calls = cjson::array();
            calls.push_back(call);
            delta["tool_calls"] = calls;
        }
        out.push_back(cjson::dump(delta));
    }
    return out;
}

}  // namespace harness
