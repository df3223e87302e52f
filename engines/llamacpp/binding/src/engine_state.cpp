// A sequence's state and the context's edge: sessions (a sequence's KV saved with its tokens, and put
// back into an idle sequence as a cached prefix) and context shift (a prompt longer than the context
// loses its oldest blocks, a sequence that reaches the context drops its oldest tokens and goes on),
// each keeping the start of the sequence (a chat's system prompt).
#include "engine.h"
#include "engine_internal.h"

#include "common.h"
#include "json_compat.h"

#include <algorithm>

namespace harness {

namespace {

size_t common_prefix(const std::vector<llama_token> & a, const std::vector<llama_token> & b) {
    size_t n = 0;
    const size_t end = std::min(a.size(), b.size());
    while (n < end && a[n] == b[n]) ++n;
    return n;
}

}  // namespace

// ---------------------------------------------------------------------------
// context shift
// ---------------------------------------------------------------------------

int32_t Engine::system_tokens(const common_chat_templates_inputs & in, const std::vector<llama_token> & prompt) const {
    size_t n_sys = 0;
    while (n_sys < in.messages.size() && in.messages[n_sys].role == "system") ++n_sys;
    if (n_sys == 0) return -1;
    common_chat_templates_inputs sys = in;
    sys.messages.resize(n_sys);
    sys.add_generation_prompt = false;
    try {
        // what the template renders for the system messages alone, as far as the whole prompt starts with it
        auto rendered = tokenize(common_chat_templates_apply(templates_.get(), sys).prompt, false, true);
        return (int32_t) common_prefix(rendered, prompt);
    } catch (const std::exception &) {
        return -1;  // a template that refuses a conversation of system messages only: keep BOS alone
    }
}

int32_t Engine::keep_for(const std::vector<llama_token> & prompt, const ChatSetup * chat) const {
    int32_t n = chat && chat->n_keep >= 0 ? chat->n_keep : (int32_t) common_prefix(tokenize("", true, true), prompt);
    return std::max(0, std::min(n, n_ctx_ / 2));
}

int32_t Engine::truncate_prompt(std::vector<llama_token> & prompt, int32_t n_keep) const {
    // Whole blocks of (n_ctx - n_keep) * context_erase tokens go, oldest first after the kept start,
    // until a block is left free for the answer (GPT4All's contextErase over a prompt).
    const int32_t n_prompt = (int32_t) prompt.size();
    const int32_t block = std::max(1, (int32_t) ((float) (n_ctx_ - n_keep) * params_.context_erase));
    const int32_t over = n_prompt - (n_ctx_ - block);
    if (over <= 0) return 0;
    const int32_t drop = std::min((over + block - 1) / block * block, n_prompt - n_keep - 1);
    prompt.erase(prompt.begin() + n_keep, prompt.begin() + n_keep + drop);
    return drop;
}

void Engine::shift_context(Slot & s) {
    // llama.cpp's context shift: the KV of n_discard tokens after the kept start goes, the rest moves
    // back by n_discard positions (its RoPE rotated by the memory's shift), and generation goes on.
    auto & r = *s.req;
    const int32_t n_past = (int32_t) s.cache.size();
    const int32_t n_keep = std::min(r.n_keep, n_past - 2);
    const int32_t n_left = n_past - n_keep;
    const int32_t n_discard = std::clamp((int32_t) ((float) n_left * params_.context_erase), 1, n_left - 1);
    llama_memory_t mem = llama_get_memory(ctx_);
    if (!llama_memory_seq_rm(mem, s.id, n_keep, n_keep + n_discard)) {
        s.req->fail("ContextOverflowError", "context shift failed: this model's memory cannot drop a part of a sequence");
        release(s, "error");
        return;
    }
    llama_memory_seq_add(mem, s.id, n_keep + n_discard, n_past, -n_discard);
    s.cache.erase(s.cache.begin() + n_keep, s.cache.begin() + n_keep + n_discard);
    trim_draft_kv(s, (size_t) n_keep);  // the draft context catches up from the kept start
    r.t.n_erased += n_discard;
}

// ---------------------------------------------------------------------------
// sessions
// ---------------------------------------------------------------------------

std::vector<llama_token> Engine::chat_tokens(const std::string & messages_json) const {
    if (!templates_) throw std::invalid_argument("model has no usable chat template (tokenizer.chat_template)");
    common_chat_templates_inputs in;
    try {
        in.messages = common_chat_msgs_parse_oaicompat(cjson::parse(messages_json));
    } catch (const std::exception & e) {
        throw std::invalid_argument(std::string("invalid messages: ") + e.what());
    }
    if (in.messages.empty()) throw std::invalid_argument("messages must not be empty");
    in.use_jinja = true;
    in.add_generation_prompt = false;
    try {
        return tokenize(common_chat_templates_apply(templates_.get(), in).prompt, false, true);
    } catch (const std::exception & e) {
        throw std::invalid_argument(std::string("chat template failed: ") + e.what());
    }
}

SavedSequence Engine::save_state(const std::vector<llama_token> & history) {
    if (!ctx_) throw std::invalid_argument("model architecture '" + arch_ + "' is an embedding model: it has no sequences to save");
    return on_engine_thread([&] { return save_here(history); });
}

std::pair<int32_t, bool> Engine::restore_state(const std::vector<llama_token> & tokens, const uint8_t * data, size_t size) {
    if (!ctx_) throw std::invalid_argument("model architecture '" + arch_ + "' is an embedding model: it has no sequences to restore");
    return on_engine_thread([&] { return restore_here(tokens, data, size); });
}

SavedSequence Engine::save_here(const std::vector<llama_token> & history) {
    if (!prefix_caching()) {
        throw std::invalid_argument("saving a session needs prefix caching (enable_prefix_caching is forced off: "
                                    "a finished request's sequence is not kept)");
    }
    Slot * best = nullptr;
    size_t best_n = 0;
    for (auto & s : slots_) {
        if (s.req || s.cache.empty()) continue;  // a running request's sequence changes under a save
        size_t n = history.empty() ? 0 : common_prefix(s.cache, history);
        bool better = history.empty() ? (!best || s.last_used > best->last_used) : n > best_n;
        if (better) {
            best = &s;
            best_n = n;
        }
    }
    if (!best) {
        throw std::invalid_argument(history.empty()
            ? "no idle sequence holds a conversation to save (run a request first; one still running is saved when it ends)"
            : "no idle sequence holds the start of this history: its request may still be running, or its cache "
              "was evicted by others (save right after the turn)");
    }
    llama_memory_t mem = llama_get_memory(ctx_);
    if (llama_memory_seq_pos_min(mem, best->id) != 0 || llama_memory_seq_pos_max(mem, best->id) + 1 != (llama_pos) best->cache.size()) {
        throw std::runtime_error("sequence " + std::to_string(best->id) + " holds positions " +
                                 std::to_string(llama_memory_seq_pos_min(mem, best->id)) + ".." +
                                 std::to_string(llama_memory_seq_pos_max(mem, best->id)) + " for " +
                                 std::to_string(best->cache.size()) + " cached tokens: not saved");
    }
    SavedSequence out;
    out.tokens = best->cache;
    out.n_matched = (int32_t) best_n;
    const size_t size = llama_state_seq_get_size(ctx_, best->id);
    out.data.resize(size);
    const size_t n = llama_state_seq_get_data(ctx_, reinterpret_cast<uint8_t *>(out.data.data()), size, best->id);
    if (n == 0 || n > size) throw std::runtime_error("llama.cpp could not save sequence " + std::to_string(best->id) + ": " + last_errors());
    out.data.resize(n);
    best->last_used = ++tick_;
    return out;
}

std::pair<int32_t, bool> Engine::restore_here(const std::vector<llama_token> & tokens, const uint8_t * data, size_t size) {
    if (!prefix_caching()) {
        throw std::invalid_argument("restoring a session needs prefix caching (enable_prefix_caching is forced off: "
                                    "no request would reuse the restored sequence)");
    }
    const int32_t n = (int32_t) tokens.size();
    if (n == 0) throw std::invalid_argument("the state holds no tokens");
    if (n >= n_ctx_) {
        throw ContextOverflowError("a state of " + std::to_string(n) + " tokens does not fit the context of " +
                                   std::to_string(n_ctx_) + " tokens (load with a context_size above " + std::to_string(n) + ")");
    }
    for (auto & s : slots_) {
        if (!s.req && common_prefix(s.cache, tokens) == tokens.size()) {
            s.last_used = ++tick_;  // an idle sequence holds it already: nothing to load
            return {n, false};
        }
    }
    Slot * dst = nullptr;
    for (auto & s : slots_) {
        if (s.req) continue;
        if (!dst || (s.cache.empty() && !dst->cache.empty()) ||
            (s.cache.empty() == dst->cache.empty() && s.last_used < dst->last_used)) {
            dst = &s;
        }
    }
    if (!dst) {
        throw KVCacheFullError("every sequence is running a request (max_num_seqs " + std::to_string(slots_.size()) +
                               "): restore the session when one has finished");
    }
    llama_memory_t mem = llama_get_memory(ctx_);
    llama_memory_seq_rm(mem, dst->id, -1, -1);
    dst->cache.clear();
    trim_draft_kv(*dst, 0);
    while (n_ctx_ - (int32_t) kv_used() < n) {  // room: idle caches go, least recently used first
        Slot * victim = nullptr;
        for (auto & s : slots_) {
            if (!s.req && &s != dst && !s.cache.empty() && (!victim || s.last_used < victim->last_used)) victim = &s;
        }
        if (!victim) break;
        llama_memory_seq_rm(mem, victim->id, -1, -1);
        victim->cache.clear();
        trim_draft_kv(*victim, 0);
    }
    if (n_ctx_ - (int32_t) kv_used() < n) {
        throw KVCacheFullError("the running requests hold " + std::to_string(kv_used()) + " of " + std::to_string(n_ctx_) +
                               " KV cells: no room for a state of " + std::to_string(n) + " tokens now");
    }
    const size_t read = llama_state_seq_set_data(ctx_, data, size, dst->id);
    const llama_pos lo = llama_memory_seq_pos_min(mem, dst->id), hi = llama_memory_seq_pos_max(mem, dst->id);
    if (read != size || lo != 0 || hi + 1 != (llama_pos) n) {
        llama_memory_seq_rm(mem, dst->id, -1, -1);
        std::string why = read == 0 ? "llama.cpp refused it: " + last_errors()
                        : read != size ? "it read " + std::to_string(read) + " of its " + std::to_string(size) + " bytes"
                                       : "its cells hold positions " + std::to_string(lo) + ".." + std::to_string(hi) +
                                             " for " + std::to_string(n) + " tokens";
        throw std::invalid_argument("the state was not loaded: " + why);
    }
    dst->cache = tokens;
    dst->last_used = ++tick_;
    return {n, true};
}

}  // namespace harness
