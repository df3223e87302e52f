// The engine's life: the ggml log, construction and the engine thread, the model load, close and
// free, info. The rest of Engine lives beside it: engine_submit.cpp (requests, sampling params,
// tokens, submit, chat), engine_loop.cpp (the decode loop), engine_speculation.cpp (speculative
// decoding), engine_eval.cpp (the engine-thread jobs: embeddings, evaluation).
#include "engine.h"
#include "engine_internal.h"

#include <future>

#include "common.h"
#include "json_compat.h"

#include "ggml-backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

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
thread_local int t_quiet = 0;  // QuietLog scopes on this thread

void log_cb(ggml_log_level level, const char * text, void *) {
    std::lock_guard<std::mutex> lk(g_log_mu);
    if ((g_verbose.load() && t_quiet == 0) || level == GGML_LOG_LEVEL_ERROR) {
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
}  // namespace

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

namespace {

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
}  // namespace

std::string json_quote(const std::string & s) { return cjson::dump_safe(cjson::string(s)); }

std::vector<std::string> Engine::recent_log() const {
    std::lock_guard<std::mutex> lk(g_log_mu);
    return {g_log.begin(), g_log.end()};
}

// ---------------------------------------------------------------------------
// Engine: load
// ---------------------------------------------------------------------------

QuietLog::QuietLog() { ++t_quiet; }
QuietLog::~QuietLog() { --t_quiet; }

void install_log() {
    llama_log_set(log_cb, nullptr);
    ggml_log_set(log_cb, nullptr);
}

void load_backends(const std::string & backend_dir) {
    std::call_once(g_ggml_backend_once, [&] {
        install_log();
        if (!backend_dir.empty()) {
            ggml_backend_load_all_from_path(backend_dir.c_str());
        } else {
            ggml_backend_load_all();
        }
        llama_backend_init();
    });
    if (ggml_backend_dev_count() == 0) {
        throw ModelLoadError("no ggml backend could be loaded from '" + backend_dir +
                             "' (missing libggml-cpu-*.so?)");
    }
}

bool is_embedding_model(const llama_model * model, const EngineParams & params) {
    std::string arch = meta(model, "general.architecture");
    std::string pooling = meta(model, (arch + ".pooling_type").c_str());
    return params.embeddings || !pooling.empty() || !llama_model_has_decoder(model) || arch == "bert" ||
           arch == "nomic-bert" || arch == "jina-bert-v2";
}

uint32_t context_size(const EngineParams & params, int32_t n_train) {
    return (uint32_t) (params.n_ctx > 0 ? params.n_ctx : std::min<int32_t>(n_train > 0 ? n_train : 4096, 4096));
}

llama_context_params context_params(const EngineParams & params, uint32_t n_ctx, bool embedding_only) {
    if (params.max_num_seqs < 1) throw std::invalid_argument("max_num_seqs must be >= 1");
    auto cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
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
    // One unified KV pool shared by every sequence: a single long request may use all of it, many
    // short ones share it.
    cp.n_seq_max = (uint32_t) std::max(1, params.max_num_seqs);
    cp.kv_unified = true;
    if (embedding_only) {
        // Non-causal encoders need a whole sequence in one ubatch.
        cp.n_ubatch = cp.n_batch;
        cp.embeddings = true;
    }
    return cp;
}

Engine::Engine(const std::string & model_path, const EngineParams & params) : params_(params) {
    g_verbose.store(params.verbose);
    load_backends(params.backend_dir);
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
    if (params.max_num_seqs < 1) throw std::invalid_argument("max_num_seqs must be >= 1");
    // The estimate first (engine_memory.cpp): a load that does not fit is refused with its numbers
    // instead of failing inside the engine or swapping; layers asked for as auto are fitted.
    plan_ = plan_memory(model_path, params);
    if (params.memory_check && !plan_.fits) {
        throw InsufficientMemoryError("model " + model_path + " does not fit: " + plan_.verdict);
    }
    model_ = llama_model_load_from_file(model_path.c_str(), plan_.mp);
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
    embedding_only_ = plan_.embedding_only;
    const int32_t n_ctx = (int32_t) plan_.n_ctx;
    auto cp = plan_.cp;

    if (embedding_only_) {
        embd_ctx_ = llama_init_from_model(model_, cp);
        if (!embd_ctx_) throw ModelLoadError("failed to create an embedding context: " + last_errors());
        n_ctx_ = (int32_t) llama_n_ctx(embd_ctx_);
        return;
    }
    ctx_ = llama_init_from_model(model_, cp);
    if (!ctx_) {
        llama_model_free(model_);
        model_ = nullptr;
        throw ModelLoadError("failed to create a context (n_ctx=" + std::to_string(n_ctx) + "): " + last_errors());
    }
    n_ctx_ = (int32_t) llama_n_ctx(ctx_);
    if (params.context_shift && !llama_memory_can_shift(llama_get_memory(ctx_))) {
        throw std::invalid_argument("context_shift: this model's memory cannot shift positions (" + arch_ +
                                    "); load it with context_shift off");
    }
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
    m["context_shift"] = params_.context_shift ? "1" : "0";
    m["context_erase"] = std::to_string(params_.context_erase);
    m["kv_cache_type"] = params_.kv_cache_type;
    m["flash_attn"] = std::to_string(params_.flash_attn);
    m["state_seq_version"] = std::to_string(LLAMA_STATE_SEQ_VERSION);
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
    // placement: the layers offloaded (of n_layer + 1, the output layer counted) and where
    m["n_gpu_layers"] = std::to_string(plan_.n_gpu_layers);
    m["n_layer"] = std::to_string(plan_.n_layer);
    m["gpu_layers_fit"] = plan_.fit_status;
    std::string offload;
    for (const auto & r : plan_.rows) {
        if (!r.host) offload += (offload.empty() ? "" : ",") + r.device;
    }
    m["offload_devices"] = offload;
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
