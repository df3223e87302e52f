#include "engine.h"

#include <future>

#include "common.h"
#include "json-schema-to-grammar.h"
#include "ngram-map.h"
#include "json_compat.h"

#include "ggml-backend.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <dlfcn.h>

namespace harness {

double now_seconds() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// ---------------------------------------------------------------------------
// logging: keep the last lines so load failures can say why
// ---------------------------------------------------------------------------

namespace {
std::mutex g_log_mu;
std::deque<std::string> g_log;
std::string g_log_partial;
std::atomic<bool> g_verbose{false};

void log_cb(ggml_log_level level, const char * text, void *) {
    std::lock_guard<std::mutex> lk(g_log_mu);
    if (g_verbose.load() || level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
    g_log_partial += text;
    size_t pos;
    while ((pos = g_log_partial.find('\n')) != std::string::npos) {
        g_log.push_back(g_log_partial.substr(0, pos));
        g_log_partial.erase(0, pos + 1);
        if (g_log.size() > 400) {
            g_log.pop_front();
        }
    }
}

std::once_flag g_ggml_backend_once;

std::string last_errors() {
    std::lock_guard<std::mutex> lk(g_log_mu);
    std::string out;
    int n = 0;
    for (auto it = g_log.rbegin(); it != g_log.rend() && n < 6; ++it) {
        if (it->find("error") != std::string::npos || it->find("failed") != std::string::npos ||
            it->find("unknown") != std::string::npos || it->find("invalid") != std::string::npos) {
            out = *it + (out.empty() ? "" : "; ") + out;
            n++;
        }
    }
    return out;
}

ggml_type kv_type(const std::string & name) {
    static const std::map<std::string, ggml_type> types = {
        {"f32", GGML_TYPE_F32}, {"f16", GGML_TYPE_F16}, {"bf16", GGML_TYPE_BF16}, {"q8_0", GGML_TYPE_Q8_0},
        {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1}, {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1},
        {"iq4_nl", GGML_TYPE_IQ4_NL},
    };
    auto it = types.find(name);
    if (it == types.end()) {
        std::string known;
        for (auto & kv : types) known += (known.empty() ? "" : ", ") + kv.first;
        throw std::invalid_argument("kv_cache_type '" + name + "' is not one of: " + known);
    }
    return it->second;
}

std::string meta(const llama_model * m, const char * key) {
    char buf[512];
    int32_t n = llama_model_meta_val_str(m, key, buf, sizeof(buf));
    return n < 0 ? std::string() : std::string(buf);
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string.
size_t partial_stop_len(const std::string & text, const std::vector<std::string> & stops) {
    size_t best = 0;
    for (const auto & s : stops) {
        for (size_t k = std::min(s.size() - 1, text.size()); k > best; --k) {
            if (text.compare(text.size() - k, k, s, 0, k) == 0) {
                best = k;
                break;
            }
        }
    }
    return best;
}

void batch_clear(llama_batch & b) { b.n_tokens = 0; }

void batch_add(llama_batch & b, llama_token id, llama_pos pos, llama_seq_id seq, bool logits) {
    b.token[b.n_tokens] = id;
    b.pos[b.n_tokens] = pos;
    b.n_seq_id[b.n_tokens] = 1;
    b.seq_id[b.n_tokens][0] = seq;
    b.logits[b.n_tokens] = logits;
    b.n_tokens++;
}

// Bytes at the end of `s` that form an incomplete UTF-8 sequence.
// The first index of the largest value (NaN never wins; 0 when nothing beats -inf), as a plain
// `if (x[t] > best)` scan returns it, but 3-4x faster: a scan that tracks the index is one long
// dependency chain the compiler cannot vectorize, while a max per chunk over independent lanes is,
// and only the chunk holding the maximum is scanned again for its index. ~9 us instead of ~34 for
// a 49,152-token vocabulary, per greedy token and stream, on the decode thread.
int32_t argmax_row(const float * x, int32_t n) {
    constexpr int32_t lanes = 16, chunk = 1024;
    float best_v = -INFINITY;
    int32_t best_c = 0;
    for (int32_t c = 0; c < n; c += chunk) {
        const int32_t e = std::min(n, c + chunk);
        float m[lanes];
        for (auto & v : m) v = -INFINITY;
        int32_t t = c;
        for (; t + lanes <= e; t += lanes) {
            for (int32_t k = 0; k < lanes; ++k) m[k] = x[t + k] > m[k] ? x[t + k] : m[k];
        }
        float cm = -INFINITY;
        for (float v : m) cm = v > cm ? v : cm;
        for (; t < e; ++t) cm = x[t] > cm ? x[t] : cm;
        if (cm > best_v) {
            best_v = cm;
            best_c = c;
        }
    }
    if (best_v == -INFINITY) return 0;
    for (int32_t t = best_c; t < n; ++t) {
        if (x[t] == best_v) return t;
    }
    return 0;
}

size_t incomplete_utf8(const std::string & s) {
    for (size_t i = 1; i <= std::min<size_t>(4, s.size()); ++i) {
        unsigned char c = (unsigned char) s[s.size() - i];
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking back
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > i ? i : 0;
    }
    return 0;
}
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

std::string json_quote(const std::string & s) { return cjson::dump_safe(cjson::string(s)); }

std::vector<std::string> Engine::recent_log() const {
    std::lock_guard<std::mutex> lk(g_log_mu);
    return {g_log.begin(), g_log.end()};
}

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
// Engine: load
// ---------------------------------------------------------------------------

Engine::Engine(const std::string & model_path, const EngineParams & params) : params_(params) {
    g_verbose.store(params.verbose);
    std::call_once(g_ggml_backend_once, [&] {
        llama_log_set(log_cb, nullptr);
        ggml_log_set(log_cb, nullptr);
        if (!params.backend_dir.empty()) {
            ggml_backend_load_all_from_path(params.backend_dir.c_str());
        } else {
            ggml_backend_load_all();
        }
        llama_backend_init();
    });
    if (ggml_backend_dev_count() == 0) {
        throw ModelLoadError("no ggml backend could be loaded from '" + params.backend_dir +
                             "' (missing libggml-cpu-*.so?)");
    }
    FILE * f = fopen(model_path.c_str(), "rb");
    if (!f) throw ModelLoadError("model file not found or unreadable: " + model_path);
    fclose(f);

    std::promise<void> ready;
    std::future<void> loaded = ready.get_future();
    worker_ = std::thread([this, model_path, &ready] {
        try {
            init(model_path);
        } catch (...) {
            ready.set_exception(std::current_exception());
            return;
        }
        ready.set_value();
        if (ctx_) {
            loop();
        } else {
            task_loop();
        }
    });
    try {
        loaded.get();
    } catch (...) {
        worker_.join();
        free_all();
        throw;
    }
}

void Engine::init(const std::string & model_path) {
    const EngineParams & params = params_;
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = params.n_gpu_layers;
    model_ = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model_) {
        std::string why = last_errors();
        throw ModelLoadError("failed to load model " + model_path + (why.empty() ? "" : ": " + why));
    }
    vocab_ = llama_model_get_vocab(model_);
    {
        int32_t n_sup = 0;
        const llama_token * sup = llama_vocab_get_suppress_tokens(vocab_, &n_sup);
        if (sup) suppressed_.assign(sup, sup + n_sup);
    }
    arch_ = meta(model_, "general.architecture");
    std::string pooling = meta(model_, (arch_ + ".pooling_type").c_str());
    embedding_only_ = params.embeddings || !pooling.empty() || !llama_model_has_decoder(model_) ||
                      arch_ == "bert" || arch_ == "nomic-bert" || arch_ == "jina-bert-v2";

    int32_t n_train = llama_model_n_ctx_train(model_);
    int32_t n_ctx = params.n_ctx > 0 ? params.n_ctx : std::min<int32_t>(n_train > 0 ? n_train : 4096, 4096);
    if (params.max_num_seqs < 1) throw std::invalid_argument("max_num_seqs must be >= 1");

    auto cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) n_ctx;
    cp.n_batch = (uint32_t) std::max(1, params.n_batch);
    cp.n_ubatch = (uint32_t) std::max(1, std::min(params.n_ubatch, params.n_batch));
    int hw = (int) std::max(1u, std::thread::hardware_concurrency());
    cp.n_threads = params.n_threads > 0 ? params.n_threads : hw;
    cp.n_threads_batch = params.n_threads_batch > 0 ? params.n_threads_batch : cp.n_threads;
    cp.type_k = kv_type(params.kv_cache_type);
    cp.type_v = kv_type(params.kv_cache_type);
    cp.flash_attn_type = params.flash_attn < 0 ? LLAMA_FLASH_ATTN_TYPE_AUTO
                         : params.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;

    if (embedding_only_) {
        // Non-causal encoders need a whole sequence in one ubatch.
        cp.n_ubatch = cp.n_batch;
        cp.n_seq_max = (uint32_t) std::max(1, params.max_num_seqs);
        cp.embeddings = true;
        cp.kv_unified = true;
        embd_ctx_ = llama_init_from_model(model_, cp);
        if (!embd_ctx_) throw ModelLoadError("failed to create an embedding context: " + last_errors());
        n_ctx_ = (int32_t) llama_n_ctx(embd_ctx_);
        return;
    }
    // One unified KV pool shared by every sequence: a single long request may use
    // all of it, many short ones share it.
    cp.n_seq_max = (uint32_t) params.max_num_seqs;
    cp.kv_unified = true;
    ctx_ = llama_init_from_model(model_, cp);
    if (!ctx_) {
        llama_model_free(model_);
        model_ = nullptr;
        throw ModelLoadError("failed to create a context (n_ctx=" + std::to_string(n_ctx) + "): " + last_errors());
    }
    n_ctx_ = (int32_t) llama_n_ctx(ctx_);
    try {
        templates_ = common_chat_templates_init(model_, "");
    } catch (const std::exception & e) {
        templates_.reset();  // chat() will say the model has no usable template
    }
    slots_.resize((size_t) params.max_num_seqs);
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].id = (int) i;
    batch_ = llama_batch_init((int32_t) std::max<uint32_t>(cp.n_batch, (uint32_t) slots_.size()), 0, 1);
    try {
        init_speculation(cp);
    } catch (...) {
        llama_batch_free(batch_);
        batch_ = {};
        llama_free(ctx_);
        ctx_ = nullptr;
        llama_model_free(model_);
        model_ = nullptr;
        throw;
    }
}

void Engine::init_speculation(const llama_context_params & cp) {
    const auto & p = params_;
    if (p.spec_type == "none" || p.spec_type.empty()) return;
    if (p.n_draft < 1 || p.n_draft > 64) throw std::invalid_argument("n_draft must be in [1, 64], got " + std::to_string(p.n_draft));
    if (p.ngram_n < 1 || p.ngram_n > 64) throw std::invalid_argument("ngram_n must be in [1, 64], got " + std::to_string(p.ngram_n));
    if (!(p.spec_min_acceptance >= 0.0f && p.spec_min_acceptance <= 1.0f)) {
        throw std::invalid_argument("spec_min_acceptance must be in [0, 1], got " + std::to_string(p.spec_min_acceptance));
    }
    if (p.spec_type == "ngram-simple") {
        if (!p.draft_model.empty()) throw std::invalid_argument("spec_type ngram-simple takes no draft_model (use draft-simple)");
        spec_kind_ = SpecKind::Ngram;
    } else if (p.spec_type == "draft-simple") {
        if (p.draft_model.empty()) throw std::invalid_argument("spec_type draft-simple needs a draft_model");
        FILE * f = fopen(p.draft_model.c_str(), "rb");
        if (!f) throw ModelLoadError("draft model file not found or unreadable: " + p.draft_model);
        fclose(f);
        auto mp = llama_model_default_params();
        mp.n_gpu_layers = p.n_gpu_layers;
        draft_model_ = llama_model_load_from_file(p.draft_model.c_str(), mp);
        if (!draft_model_) throw ModelLoadError("failed to load draft model " + p.draft_model + ": " + last_errors());
        // The draft proposes token ids the target verifies: the vocabularies must be the same.
        const llama_vocab * dv = llama_model_get_vocab(draft_model_);
        const int32_t n = llama_vocab_n_tokens(vocab_);
        std::string why;
        if (llama_vocab_n_tokens(dv) != n) {
            why = "vocabulary sizes differ (" + std::to_string(llama_vocab_n_tokens(dv)) + " vs " + std::to_string(n) + ")";
        }
        for (llama_token t = 0; t < n && why.empty(); ++t) {
            std::string a = common_token_to_piece(dv, t, true), b = common_token_to_piece(vocab_, t, true);
            if (a != b) {
                why = "token " + std::to_string(t) + " differs ('" + a + "' vs '" + b + "')";
            } else if (llama_vocab_is_eog(dv, t) != llama_vocab_is_eog(vocab_, t)) {
                why = "end-of-generation tokens differ (token " + std::to_string(t) + ")";
            }
        }
        if (!why.empty()) {
            llama_model_free(draft_model_);
            draft_model_ = nullptr;
            throw ModelLoadError("draft model " + p.draft_model + " cannot draft for this model: " + why);
        }
        auto dcp = cp;
        dcp.n_seq_max = (uint32_t) slots_.size();
        draft_ctx_ = llama_init_from_model(draft_model_, dcp);
        if (!draft_ctx_) {
            llama_model_free(draft_model_);
            draft_model_ = nullptr;
            throw ModelLoadError("failed to create the draft model's context: " + last_errors());
        }
        draft_batch_ = llama_batch_init((int32_t) std::max<uint32_t>(cp.n_batch, (uint32_t) slots_.size()), 0, 1);
        spec_kind_ = SpecKind::DraftModel;
    } else {
        throw std::invalid_argument("spec_type '" + p.spec_type + "' is not one of: none, ngram-simple, draft-simple");
    }
}

Engine::~Engine() {
    close();
    free_all();
}

void Engine::close() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) return;
        stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    std::lock_guard<std::mutex> lk(mu_);
    for (auto & r : pending_) r->fail("EngineClosedError", "engine closed before the request ran");
    pending_.clear();
}

void Engine::free_all() {
    if (draft_batch_.token) llama_batch_free(draft_batch_);
    draft_batch_ = {};
    if (draft_ctx_) llama_free(draft_ctx_);
    draft_ctx_ = nullptr;
    if (draft_model_) llama_model_free(draft_model_);
    draft_model_ = nullptr;
    if (batch_.token) llama_batch_free(batch_);
    batch_ = {};
    if (ctx_) llama_free(ctx_);
    ctx_ = nullptr;
    if (embd_ctx_) llama_free(embd_ctx_);
    embd_ctx_ = nullptr;
    templates_.reset();
    if (model_) llama_model_free(model_);
    model_ = nullptr;
}

void Engine::task_loop() {
    while (true) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stopping_ || !tasks_.empty(); });
            if (tasks_.empty()) break;  // stopping, nothing left to run
            job = std::move(tasks_.front());
            tasks_.pop_front();
        }
        job();
    }
}

void Engine::run_tasks() {
    while (true) {
        std::function<void()> job;
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (tasks_.empty()) return;
            job = std::move(tasks_.front());
            tasks_.pop_front();
        }
        job();  // a packaged task: its exception goes to the caller's future
    }
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
    if ((int32_t) prompt.size() >= n_ctx_) {
        throw ContextOverflowError("request of " + std::to_string(prompt.size()) + " prompt tokens does not fit the context of " +
                                   std::to_string(n_ctx_) + " tokens (raise context_size or shorten the prompt)");
    }
    auto req = std::make_shared<Request>();
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
    setup->parser = common_chat_parser_params(setup->params);
    if (!setup->params.parser.empty()) setup->parser.parser.load(setup->params.parser);
    setup->parser.parse_tool_calls = !in.tools.empty();
    if (!json_schema.empty() && setup->params.grammar.empty() && !setup->generic_tools) sp.json_schema = json_schema;
    // The template already holds BOS when it wants one.
    auto tokens = tokenize(setup->params.prompt, false, true);
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
        msg = common_chat_parse(text, partial, req.chat->parser);
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

// ---------------------------------------------------------------------------
// the decode loop
// ---------------------------------------------------------------------------

size_t Engine::kv_used() const {
    size_t n = 0;
    for (const auto & s : slots_) n += s.cache.size();
    return n;
}

bool Engine::admit_locked() {
    if (pending_.empty()) return false;
    auto & req = pending_.front();  // FCFS: never skip the head of the queue
    if (req->cancelled.load()) {
        req->finish("cancelled");
        pending_.pop_front();
        return true;
    }
    Slot * best = nullptr;
    size_t best_reuse = 0;
    for (auto & s : slots_) {
        if (s.req) continue;
        size_t reuse = 0;
        if (prefix_caching()) {
            size_t n = std::min(s.cache.size(), req->prompt.size());
            while (reuse < n && s.cache[reuse] == req->prompt[reuse]) ++reuse;
        }
        if (!best || reuse > best_reuse || (reuse == best_reuse && s.last_used < best->last_used)) {
            best = &s;
            best_reuse = reuse;
        }
    }
    if (!best) return false;  // every sequence is busy
    if (best_reuse >= req->prompt.size()) best_reuse = req->prompt.size() - 1;  // need logits of the last token

    llama_memory_t mem = llama_get_memory(ctx_);
    llama_memory_seq_rm(mem, best->id, (llama_pos) best_reuse, -1);
    best->cache.resize(best_reuse);
    trim_draft_kv(*best, best_reuse);

    // Admission is bounded by KV capacity: evict idle cached sequences (LRU) first.
    size_t need = req->prompt.size() - best_reuse + 1;
    while ((size_t) n_ctx_ - kv_used() < need) {
        Slot * victim = nullptr;
        for (auto & s : slots_) {
            if (!s.req && &s != best && !s.cache.empty() && (!victim || s.last_used < victim->last_used)) victim = &s;
        }
        if (!victim) break;
        llama_memory_seq_rm(mem, victim->id, -1, -1);
        victim->cache.clear();
        trim_draft_kv(*victim, 0);
    }
    if ((size_t) n_ctx_ - kv_used() < need) return false;  // wait for running requests to finish

    best->req = req;
    best->n_prompt_done = best_reuse;
    best->decoding = false;
    best->last = -1;
    best->last_used = ++tick_;
    reset_spec(*best);
    req->t.n_cached = (int32_t) best_reuse;
    if (best_reuse > 0) n_prefix_hits_++;
    // Penalty samplers look at recent history: feed the prompt without touching the grammar.
    for (auto t : req->prompt) common_sampler_accept(req->sampler.get(), t, false);
    pending_.pop_front();
    return true;
}

void Engine::release(Slot & s, const std::string & reason) {
    // Free the slot before waking the caller, so a finished request never shows as active.
    auto req = std::move(s.req);
    s.req.reset();
    s.decoding = false;
    s.last_used = ++tick_;
    if (!prefix_caching() || reason == "cancelled" || reason == "error") {
        llama_memory_seq_rm(llama_get_memory(ctx_), s.id, -1, -1);
        s.cache.clear();
        trim_draft_kv(s, 0);
    }
    if (req) {
        n_completed_++;
        if (reason != "error") req->finish(reason);
    }
}

void Engine::emit(Slot & s, bool final) {
    auto & r = *s.req;
    const auto & stops = r.sampling.stop;
    size_t from = r.sent;
    size_t end = r.generated.size();
    bool hit = false;
    if (!stops.empty()) {
        // Held-back text never contains the start of a stop string, so search from `from`.
        size_t search_from = from;
        size_t first = std::string::npos;
        for (const auto & st : stops) {
            size_t p = r.generated.find(st, search_from);
            if (p != std::string::npos && p < first) first = p;
        }
        if (first != std::string::npos) {
            end = std::max(first, from);
            hit = true;
        } else if (!final) {
            end -= partial_stop_len(r.generated, stops);
        }
    }
    if (!final && !hit) end -= std::min(end - from, incomplete_utf8(r.generated.substr(from, end - from)));
    if (end > from) {
        std::string delta = r.generated.substr(from, end - from);
        r.sent = end;
        r.append_text(delta);
        if (r.streaming) r.push({Event::Delta, std::move(delta), ""});
    }
    if (hit) release(s, "stop");
}

void Engine::on_token(Slot & s, llama_token tok) {
    auto & r = *s.req;
    r.t.n_generated++;
    if (r.t.n_generated == 1) r.t.t_first_token = now_seconds();
    if (llama_vocab_is_eog(vocab_, tok) && !r.sampling.ignore_eos) {
        emit(s, true);
        if (s.req) release(s, "stop");
        return;
    }
    r.generated += common_token_to_piece(vocab_, tok, false);
    emit(s, false);
    if (!s.req) return;  // stop string hit
    s.last = tok;
    s.decoding = true;
    bool full = (int32_t) s.cache.size() + 1 >= n_ctx_;
    if ((r.sampling.max_tokens > 0 && r.t.n_generated >= r.sampling.max_tokens) || full) {
        emit(s, true);
        if (s.req) release(s, "length");
    }
}

void Engine::loop() {
    llama_memory_t mem = llama_get_memory(ctx_);
    const int32_t n_batch = (int32_t) llama_n_batch(ctx_);
    while (true) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            auto busy = [&] { return std::any_of(slots_.begin(), slots_.end(), [](const Slot & s) { return (bool) s.req; }); };
            cv_.wait(lk, [&] { return stopping_ || !pending_.empty() || !tasks_.empty() || busy(); });
            if (stopping_) break;
        }
        // engine-thread jobs (evaluate) run between decode steps, on this thread
        run_tasks();
        {
            std::lock_guard<std::mutex> lk(mu_);
            while (admit_locked()) {}
        }
        // cancellation takes effect before the next token is computed
        for (auto & s : slots_) {
            if (s.req && s.req->cancelled.load()) release(s, "cancelled");
        }
        batch_clear(batch_);
        int32_t n_decoding = 0;
        for (auto & s : slots_) {
            s.i_batch = -1;
            s.n_added = 0;
            s.draft.clear();
            if (s.req && s.decoding) n_decoding++;
        }
        if (speculating() && n_decoding > 0) {
            plan_drafts(n_batch - n_decoding, n_ctx_ - (int32_t) kv_used() - n_decoding);
        }
        for (auto & s : slots_) {
            if (s.req && s.decoding) {
                // the sampled token, then the draft after it: logits at every position verify the draft
                s.i_batch = batch_.n_tokens;
                s.n_added = 1 + (int32_t) s.draft.size();
                batch_add(batch_, s.last, (llama_pos) s.cache.size(), s.id, true);
                s.cache.push_back(s.last);
                for (auto d : s.draft) {
                    batch_add(batch_, d, (llama_pos) s.cache.size(), s.id, true);
                    s.cache.push_back(d);
                }
            }
        }
        // prompts are processed in chunks interleaved with the decode steps above
        for (auto & s : slots_) {
            if (!s.req || s.decoding || batch_.n_tokens >= n_batch) continue;
            auto & p = s.req->prompt;
            while (s.n_prompt_done < p.size() && batch_.n_tokens < n_batch) {
                bool last = s.n_prompt_done + 1 == p.size();
                if (last) s.i_batch = batch_.n_tokens;
                batch_add(batch_, p[s.n_prompt_done], (llama_pos) s.cache.size(), s.id, last);
                s.cache.push_back(p[s.n_prompt_done]);
                s.n_prompt_done++;
                s.n_added++;
            }
        }
        if (batch_.n_tokens == 0) continue;
        int32_t ret = llama_decode(ctx_, batch_);
        if (params_.token_delay_us > 0 && n_decoding > 0) {
            // benchmark calibration only (harness bench's error-rate study): a known, real slowdown of
            // each generating step, on the thread that decodes, as a slower kernel would be
            std::this_thread::sleep_for(std::chrono::microseconds(params_.token_delay_us));
        }
        n_decode_calls_++;
        n_tokens_decoded_ += batch_.n_tokens;
        if (ret != 0) {
            // Undo what this batch added, fail the newest request, and retry without it.
            Slot * newest = nullptr;
            for (auto & s : slots_) {
                if (!s.req) continue;
                size_t keep = s.cache.size() - (size_t) s.n_added;
                llama_memory_seq_rm(mem, s.id, (llama_pos) keep, -1);
                s.cache.resize(keep);
                if (s.decoding) {
                    // s.last is still the token to decode next
                } else {
                    s.n_prompt_done -= (size_t) s.n_added;
                }
                if (!newest || s.req->id > newest->req->id) newest = &s;
            }
            if (newest) {
                bool full = ret == 1;
                std::string why = full ? "KV cache full: " + std::to_string(kv_used()) + " of " + std::to_string(n_ctx_) +
                                             " cells in use; lower max_num_seqs or raise context_size"
                                       : "llama_decode failed with code " + std::to_string(ret);
                newest->req->fail(full ? "KVCacheFullError" : "EngineError", why);
                release(*newest, "error");
            }
            continue;
        }
        for (auto & s : slots_) {
            if (!s.req || s.i_batch < 0) continue;
            if (!s.draft.empty()) {
                verify(s);
                continue;
            }
            s.req->t.n_steps++;
            n_gen_steps_++;
            n_gen_tokens_++;
            llama_token tok;
            if (s.req->plain_greedy) {
                tok = argmax(s.i_batch, s.req->sampling.ignore_eos);
            } else {
                tok = common_sampler_sample(s.req->sampler.get(), ctx_, s.i_batch);
                common_sampler_accept(s.req->sampler.get(), tok, true);
            }
            on_token(s, tok);
        }
    }
    for (auto & s : slots_) {
        if (s.req) {
            s.req->fail("EngineClosedError", "engine closed while the request was running");
            s.req.reset();
        }
    }
    run_tasks();  // jobs queued before close still answer their callers (evaluate sees stopping_)
}

// ---------------------------------------------------------------------------
// speculation: draft per sequence, verify in the shared batch, commit one by one
// ---------------------------------------------------------------------------

void Engine::reset_spec(Slot & s) {
    s.draft.clear();
    s.n_draft_cur = params_.n_draft;
    s.acceptance = 1.0f;
    s.pause = 0;
    s.pause_next = 8;
}

void Engine::trim_draft_kv(Slot & s, size_t n) {
    if (!draft_ctx_ || s.dcache.size() <= n) return;
    llama_memory_seq_rm(llama_get_memory(draft_ctx_), s.id, (llama_pos) n, -1);
    s.dcache.resize(n);
}

void Engine::plan_drafts(int32_t batch_room, int32_t kv_room) {
    std::vector<std::pair<Slot *, int32_t>> want;
    for (auto & s : slots_) {
        if (!s.req || !s.decoding) continue;
        if (s.pause > 0) {
            s.pause--;
            continue;
        }
        const auto & r = *s.req;
        // never draft past max_tokens, the context, the batch or the free KV cells
        int32_t limit = s.n_draft_cur;
        if (r.sampling.max_tokens > 0) limit = std::min(limit, r.sampling.max_tokens - r.t.n_generated - 1);
        limit = std::min({limit, n_ctx_ - (int32_t) s.cache.size() - 2, batch_room, kv_room});
        if (limit < 1) continue;
        if (spec_kind_ == SpecKind::Ngram) {
            draft_ngram(s, limit);
            batch_room -= (int32_t) s.draft.size();
            kv_room -= (int32_t) s.draft.size();
        } else {
            want.emplace_back(&s, limit);
            batch_room -= limit;
            kv_room -= limit;
        }
    }
    if (!want.empty()) draft_with_model(want);
}

void Engine::draft_ngram(Slot & s, int32_t limit) {
    // common_ngram_simple_draft wants a continuation at least as long as the n-gram: ask for the
    // longest draft (or the n-gram's length) and cut it to this step's limit.
    common_ngram_simple_config cfg;
    cfg.size_ngram = (uint16_t) params_.ngram_n;
    cfg.size_mgram = (uint16_t) std::max(params_.n_draft, params_.ngram_n);
    s.draft = common_ngram_simple_draft(cfg, s.cache, s.last);
    if ((int32_t) s.draft.size() > limit) s.draft.resize((size_t) limit);
}

void Engine::draft_with_model(std::vector<std::pair<Slot *, int32_t>> & want) {
    llama_memory_t dmem = llama_get_memory(draft_ctx_);
    const int32_t n_batch = (int32_t) llama_n_batch(draft_ctx_);
    struct Job {
        Slot * s;
        int32_t limit;
        std::vector<llama_token> seq;   // what the draft context must hold: the target's tokens + last
        int32_t i_batch = -1;
        bool done = false;
    };
    std::vector<Job> jobs;
    for (auto & [s, limit] : want) {
        Job j{s, limit, s->cache, -1, false};
        j.seq.push_back(s->last);
        size_t p = 0;
        while (p < s->dcache.size() && p < j.seq.size() && s->dcache[p] == j.seq[p]) ++p;
        trim_draft_kv(*s, std::min(p, j.seq.size() - 1));  // the last token is decoded again for its logits
        jobs.push_back(std::move(j));
    }
    auto fail = [&] {
        for (auto & j : jobs) {
            j.s->draft.clear();
            llama_memory_seq_rm(dmem, j.s->id, -1, -1);
            j.s->dcache.clear();
        }
    };
    auto take = [&] {
        for (auto & j : jobs) {
            if (j.i_batch < 0) continue;
            llama_token t = argmax_ctx(draft_ctx_, j.i_batch);
            j.i_batch = -1;
            j.s->draft.push_back(t);
            if ((int32_t) j.s->draft.size() >= j.limit || llama_vocab_is_eog(vocab_, t)) j.done = true;
        }
    };
    // catch the draft context up with each sequence (chunked like a prompt), then draft greedily,
    // one token per step for every sequence together
    while (true) {
        batch_clear(draft_batch_);
        for (auto & j : jobs) {
            auto & dc = j.s->dcache;
            while (dc.size() < j.seq.size() && draft_batch_.n_tokens < n_batch) {
                bool last = dc.size() + 1 == j.seq.size();
                if (last) j.i_batch = draft_batch_.n_tokens;
                batch_add(draft_batch_, j.seq[dc.size()], (llama_pos) dc.size(), j.s->id, last);
                dc.push_back(j.seq[dc.size()]);
            }
        }
        if (draft_batch_.n_tokens == 0) break;
        n_draft_decode_calls_++;
        if (llama_decode(draft_ctx_, draft_batch_) != 0) return fail();
        take();
    }
    while (true) {
        batch_clear(draft_batch_);
        for (auto & j : jobs) {
            if (j.done || j.s->draft.empty()) continue;
            j.i_batch = draft_batch_.n_tokens;
            batch_add(draft_batch_, j.s->draft.back(), (llama_pos) j.s->dcache.size(), j.s->id, true);
            j.s->dcache.push_back(j.s->draft.back());
        }
        if (draft_batch_.n_tokens == 0) break;
        n_draft_decode_calls_++;
        if (llama_decode(draft_ctx_, draft_batch_) != 0) return fail();
        take();
    }
}

void Engine::verify(Slot & s) {
    // Sample at each drafted position with the request's own sampler chain (grammar, penalties,
    // seed) and keep going while the sample equals the draft. Every committed token is a sample
    // of the target given the tokens before it, so greedy output is unchanged and sampled output
    // keeps the target's distribution; each goes through on_token like any other.
    auto req = s.req;  // on_token may release the slot
    auto & r = *req;
    const std::vector<llama_token> draft = std::move(s.draft);
    s.draft.clear();
    const size_t base = s.cache.size() - draft.size();  // KV up to and including `last`
    s.cache.resize(base);
    r.t.n_steps++;
    r.t.n_drafted += (int32_t) draft.size();
    n_gen_steps_++;
    n_spec_steps_++;
    n_drafted_ += (int64_t) draft.size();
    size_t n_acc = 0;
    for (size_t i = 0; i <= draft.size(); ++i) {
        llama_token tok;
        if (r.plain_greedy) {
            tok = argmax(s.i_batch + (int32_t) i, r.sampling.ignore_eos);
        } else {
            tok = common_sampler_sample(r.sampler.get(), ctx_, s.i_batch + (int32_t) i);
            common_sampler_accept(r.sampler.get(), tok, true);
        }
        if (i > 0) s.cache.push_back(draft[i - 1]);
        n_gen_tokens_++;
        on_token(s, tok);
        if (!s.req || i == draft.size() || tok != draft[i]) break;
        n_acc++;
    }
    // the KV of rejected draft positions goes
    llama_memory_seq_rm(llama_get_memory(ctx_), s.id, (llama_pos) s.cache.size(), -1);
    r.t.n_accepted += (int32_t) n_acc;
    n_accepted_ += (int64_t) n_acc;
    if (!s.req) return;
    // Adaptive length: grow after a fully accepted draft, shrink to what was accepted otherwise;
    // when acceptance stays below spec_min_acceptance, stop drafting for a while (backing off).
    const float rate = (float) n_acc / (float) draft.size();
    s.acceptance = 0.7f * s.acceptance + 0.3f * rate;
    if (n_acc == draft.size()) {
        s.n_draft_cur = std::min(params_.n_draft, s.n_draft_cur * 2);
        s.pause_next = 8;
    } else {
        s.n_draft_cur = std::max(1, (int32_t) n_acc + 1);
    }
    if (s.acceptance < params_.spec_min_acceptance) {
        s.pause = s.pause_next;
        s.pause_next = std::min(256, s.pause_next * 2);
        s.acceptance = 1.0f;
        s.n_draft_cur = 1;
    }
}

llama_token Engine::argmax(int32_t i_batch, bool skip_eog) const { return argmax_ctx(ctx_, i_batch, skip_eog); }

llama_token Engine::argmax_ctx(llama_context * ctx, int32_t i_batch, bool skip_eog) const {
    const float * logits = llama_get_logits_ith(ctx, i_batch);
    const int32_t n = llama_vocab_n_tokens(vocab_);
    llama_token best = argmax_row(logits, n);
    auto excluded = [&](llama_token t) {
        return (skip_eog && llama_vocab_is_eog(vocab_, t)) ||
               (!suppressed_.empty() && std::find(suppressed_.begin(), suppressed_.end(), t) != suppressed_.end());
    };
    if (excluded(best)) {
        // rare: a suppressed (or, with ignore_eos, an end-of-generation) token won; redo the scan
        // without them, as the sampler's -inf bias on them would
        best = 0;
        float best_v = -INFINITY;
        for (int32_t t = 0; t < n; ++t) {
            if (logits[t] > best_v && !excluded(t)) {
                best_v = logits[t];
                best = t;
            }
        }
    }
    return best;
}

// ---------------------------------------------------------------------------
// embeddings
// ---------------------------------------------------------------------------

std::vector<std::vector<float>> Engine::embed(const std::vector<std::string> & texts, bool normalize) {
    if (!embd_ctx_) throw std::invalid_argument("model architecture '" + arch_ + "' was not loaded for embeddings (load with embeddings=True)");
    return on_engine_thread([&] { return embed_here(texts, normalize); });
}

std::vector<std::vector<float>> Engine::embed_here(const std::vector<std::string> & texts, bool normalize) {
    std::lock_guard<std::mutex> lk(embed_mu_);
    const int32_t n_embd = llama_model_n_embd(model_);
    const int32_t n_batch = (int32_t) llama_n_batch(embd_ctx_);
    const int32_t n_seq = (int32_t) llama_n_seq_max(embd_ctx_);
    const auto pooling = llama_pooling_type(embd_ctx_);
    std::vector<std::vector<llama_token>> toks;
    for (const auto & t : texts) {
        auto ids = tokenize(t, true, false);
        if (ids.empty()) throw std::invalid_argument("cannot embed an empty text");
        if ((int32_t) ids.size() > n_batch) {
            throw ContextOverflowError("text of " + std::to_string(ids.size()) + " tokens exceeds the embedding batch of " +
                                       std::to_string(n_batch) + " (raise n_batch)");
        }
        toks.push_back(std::move(ids));
    }
    std::vector<std::vector<float>> out(texts.size(), std::vector<float>((size_t) n_embd));
    llama_batch batch = llama_batch_init(n_batch, 0, 1);
    llama_memory_t mem = llama_get_memory(embd_ctx_);
    size_t i = 0;
    while (i < toks.size()) {
        batch_clear(batch);
        std::vector<size_t> members;
        while (i < toks.size() && (int32_t) members.size() < n_seq && batch.n_tokens + (int32_t) toks[i].size() <= n_batch) {
            for (size_t k = 0; k < toks[i].size(); ++k) {
                batch_add(batch, toks[i][k], (llama_pos) k, (llama_seq_id) members.size(), true);
            }
            members.push_back(i++);
        }
        if (mem) llama_memory_clear(mem, true);
        int32_t ret = llama_model_has_encoder(model_) && !llama_model_has_decoder(model_) ? llama_encode(embd_ctx_, batch)
                                                                                          : llama_decode(embd_ctx_, batch);
        if (ret != 0) {
            llama_batch_free(batch);
            throw std::runtime_error("embedding decode failed with code " + std::to_string(ret));
        }
        for (size_t m = 0; m < members.size(); ++m) {
            const float * e = pooling == LLAMA_POOLING_TYPE_NONE ? nullptr : llama_get_embeddings_seq(embd_ctx_, (llama_seq_id) m);
            if (!e) {
                llama_batch_free(batch);
                throw std::runtime_error("model gave no pooled embedding (pooling type none)");
            }
            common_embd_normalize(e, out[members[m]].data(), n_embd, normalize ? 2 : -1);
        }
    }
    llama_batch_free(batch);
    return out;
}

// ---------------------------------------------------------------------------
// evaluation (agreement statistics)
// ---------------------------------------------------------------------------

std::vector<std::vector<float>> Engine::evaluate(const std::vector<std::vector<llama_token>> & seqs, int32_t chunk,
                                                 bool log_softmax) {
    if (!ctx_) throw std::invalid_argument("model architecture '" + arch_ + "' is an embedding model: evaluate needs a decoder");
    if (seqs.empty()) throw std::invalid_argument("evaluate needs at least one token sequence");
    if (chunk < 1) throw std::invalid_argument("chunk must be >= 1 token per sequence and decode");
    const int32_t n_vocab = llama_vocab_n_tokens(vocab_);
    const int32_t n_seq = (int32_t) seqs.size();
    if (n_seq > (int32_t) slots_.size()) {
        throw std::invalid_argument(std::to_string(n_seq) + " sequences exceed max_num_seqs " + std::to_string(slots_.size()) +
                                    " (load with max_num_seqs >= the sequences evaluated together)");
    }
    size_t total = 0;
    for (const auto & s : seqs) {
        if (s.empty()) throw std::invalid_argument("cannot evaluate an empty token sequence");
        for (auto t : s) {
            if (t < 0 || t >= n_vocab) throw std::invalid_argument("token id " + std::to_string(t) + " out of range [0, " + std::to_string(n_vocab) + ")");
        }
        total += s.size();
    }
    if (total > (size_t) n_ctx_) {
        throw ContextOverflowError(std::to_string(total) + " tokens in " + std::to_string(n_seq) + " sequences exceed the context of " +
                                   std::to_string(n_ctx_) + " (raise n_ctx)");
    }
    const int32_t n_batch = (int32_t) llama_n_batch(ctx_);
    if ((int64_t) chunk * n_seq > n_batch && chunk > 1) {
        // a decode holds up to chunk tokens of each sequence: it must fit one batch
        throw std::invalid_argument(std::to_string(n_seq) + " sequences x chunk " + std::to_string(chunk) + " tokens exceed n_batch " +
                                    std::to_string(n_batch) + " (raise n_batch or lower chunk)");
    }
    return on_engine_thread([&] { return evaluate_here(seqs, chunk, log_softmax); });
}

namespace {

// log-softmax of one logits row, the sum of exponentials in double
void log_softmax_row(const float * x, float * y, int32_t n) {
    float mx = x[0];
    for (int32_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
    double sum = 0.0;
    for (int32_t i = 0; i < n; ++i) sum += std::exp((double) (x[i] - mx));
    const float lse = mx + (float) std::log(sum);
    for (int32_t i = 0; i < n; ++i) y[i] = x[i] - lse;
}

}  // namespace

std::vector<std::vector<float>> Engine::evaluate_here(const std::vector<std::vector<llama_token>> & seqs, int32_t chunk,
                                                      bool log_softmax) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) throw EngineClosedError("engine is closed");
        for (const auto & s : slots_) {
            if (s.req) throw std::invalid_argument("evaluate needs an idle engine: a request is running");
        }
    }
    llama_memory_t mem = llama_get_memory(ctx_);
    for (auto & s : slots_) {  // the evaluation owns the KV cache: the prefix cache goes
        llama_memory_seq_rm(mem, s.id, -1, -1);
        s.cache.clear();
    }
    const int32_t n_vocab = llama_vocab_n_tokens(vocab_);
    const int32_t n_seq = (int32_t) seqs.size();
    const int32_t per = std::max(1, std::min<int32_t>(chunk, (int32_t) llama_n_batch(ctx_) / n_seq));
    std::vector<std::vector<float>> out((size_t) n_seq);
    for (int32_t k = 0; k < n_seq; ++k) out[(size_t) k].resize(seqs[(size_t) k].size() * (size_t) n_vocab);
    std::vector<size_t> done((size_t) n_seq, 0);
    const double t_start = now_seconds();
    llama_batch batch = llama_batch_init(per * n_seq, 0, 1);
    std::vector<std::pair<int32_t, size_t>> rows;  // (sequence, position) of each batch entry
    try {
        while (true) {
            batch_clear(batch);
            rows.clear();
            for (int32_t k = 0; k < n_seq; ++k) {
                const auto & s = seqs[(size_t) k];
                for (int32_t j = 0; j < per && done[(size_t) k] < s.size(); ++j) {
                    size_t p = done[(size_t) k]++;
                    batch_add(batch, s[p], (llama_pos) p, (llama_seq_id) k, true);
                    rows.emplace_back(k, p);
                }
            }
            if (batch.n_tokens == 0) break;
            const double t0 = now_seconds();
            int32_t ret = llama_decode(ctx_, batch);
            if (ret == 0) llama_synchronize(ctx_);  // a ggml GPU backend computes asynchronously
            eval_decode_us_ += (int64_t) ((now_seconds() - t0) * 1e6);
            n_decode_calls_++;
            n_tokens_decoded_ += batch.n_tokens;
            if (ret != 0) {
                throw std::runtime_error("llama_decode failed with code " + std::to_string(ret) + " while evaluating " +
                                         std::to_string(n_seq) + " sequences");
            }
            for (int32_t i = 0; i < (int32_t) rows.size(); ++i) {
                const float * logits = llama_get_logits_ith(ctx_, i);
                if (!logits) throw std::runtime_error("no logits for batch entry " + std::to_string(i));
                float * dst = out[(size_t) rows[(size_t) i].first].data() + rows[(size_t) i].second * (size_t) n_vocab;
                if (log_softmax) {
                    log_softmax_row(logits, dst, n_vocab);
                } else {
                    std::memcpy(dst, logits, sizeof(float) * (size_t) n_vocab);
                }
            }
        }
    } catch (...) {
        llama_batch_free(batch);
        for (int32_t k = 0; k < n_seq; ++k) llama_memory_seq_rm(mem, k, -1, -1);
        throw;
    }
    llama_batch_free(batch);
    for (int32_t k = 0; k < n_seq; ++k) llama_memory_seq_rm(mem, k, -1, -1);
    eval_us_ += (int64_t) ((now_seconds() - t_start) * 1e6);
    return out;
}

// ---------------------------------------------------------------------------
// info
// ---------------------------------------------------------------------------

std::map<std::string, std::string> Engine::info() const {
    std::map<std::string, std::string> m;
    char buf[256];
    llama_model_desc(model_, buf, sizeof(buf));
    m["desc"] = buf;
    m["arch"] = arch_;
    m["n_params"] = std::to_string(llama_model_n_params(model_));
    m["size_bytes"] = std::to_string(llama_model_size(model_));
    m["n_ctx"] = std::to_string(n_ctx_);
    m["n_ctx_train"] = std::to_string(llama_model_n_ctx_train(model_));
    m["n_embd"] = std::to_string(llama_model_n_embd(model_));
    m["n_vocab"] = std::to_string(llama_vocab_n_tokens(vocab_));
    m["max_num_seqs"] = std::to_string(params_.max_num_seqs);
    m["embedding_only"] = embedding_only_ ? "1" : "0";
    m["prefix_caching"] = prefix_caching() ? "1" : "0";
    m["spec_type"] = speculating() ? params_.spec_type : "none";
    m["draft_model"] = spec_kind_ == SpecKind::DraftModel ? params_.draft_model : "";
    m["n_draft"] = std::to_string(params_.n_draft);
    m["ngram_n"] = std::to_string(params_.ngram_n);
    m["chat_template"] = templates_ ? common_chat_templates_source(templates_.get()) : "";
    std::string devs;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        auto d = ggml_backend_dev_get(i);
        devs += (devs.empty() ? "" : "; ") + std::string(ggml_backend_dev_name(d)) + " (" + ggml_backend_dev_description(d) + ")";
    }
    m["devices"] = devs;
    // The CPU backend's registration object lives inside the plugin that was loaded
    // (libggml-cpu-<level>.so): dladdr on it names the SIMD level the host selected.
    std::string cpu_variant;
    if (ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU")) {
        Dl_info dl;
        if (dladdr((const void *) reg, &dl) != 0 && dl.dli_fname) {
            std::string path = dl.dli_fname;
            auto p = path.rfind("libggml-cpu-");
            if (p != std::string::npos) {
                auto q = path.find('.', p);
                cpu_variant = path.substr(p + 12, q == std::string::npos ? std::string::npos : q - p - 12);
            } else {
                cpu_variant = "builtin";
            }
        }
    }
    m["cpu_variant"] = cpu_variant;
    return m;
}

std::map<std::string, int64_t> Engine::stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    int64_t active = 0, cached = 0;
    for (const auto & s : slots_) {
        active += s.req ? 1 : 0;
        cached += s.cache.size();
    }
    return {{"active", active}, {"pending", (int64_t) pending_.size()}, {"kv_used", cached}, {"n_ctx", n_ctx_},
            {"decode_calls", n_decode_calls_.load()}, {"tokens_decoded", n_tokens_decoded_.load()},
            {"prefix_hits", n_prefix_hits_.load()}, {"completed", n_completed_.load()},
            {"gen_steps", n_gen_steps_.load()}, {"gen_tokens", n_gen_tokens_.load()},
            {"spec_steps", n_spec_steps_.load()}, {"drafted", n_drafted_.load()}, {"accepted", n_accepted_.load()},
            {"draft_decode_calls", n_draft_decode_calls_.load()},
            {"eval_decode_us", eval_decode_us_.load()}, {"eval_us", eval_us_.load()}};
}

}  // namespace harness
