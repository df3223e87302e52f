// The llama.cpp engine as the harness serves it: one model, one shared context,
// one decode loop (continuous batching) fed by requests from any thread.
#pragma once

#include "llama.h"
#include "sampling.h"
#include "chat.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace harness {

// Typed failures; the module maps each to its own Python exception.
struct ModelLoadError : std::runtime_error { using std::runtime_error::runtime_error; };
struct ContextOverflowError : std::runtime_error { using std::runtime_error::runtime_error; };
struct KVCacheFullError : std::runtime_error { using std::runtime_error::runtime_error; };
struct EngineClosedError : std::runtime_error { using std::runtime_error::runtime_error; };
struct InsufficientMemoryError : std::runtime_error { using std::runtime_error::runtime_error; };

struct EngineParams {
    std::string backend_dir;        // where the ggml backend plugins live
    int32_t n_ctx = 0;              // 0 = from the model (capped by max_ctx)
    int32_t n_batch = 512;
    int32_t n_ubatch = 512;
    int32_t n_threads = 0;          // 0 = hardware concurrency
    int32_t n_threads_batch = 0;
    int32_t max_num_seqs = 4;
    int32_t n_gpu_layers = 0;
    std::string kv_cache_type = "f16";
    int32_t token_delay_us = 0;     // benchmark calibration: sleep after each generating step (0: off)
    int32_t prefix_caching = 0;     // tri-state: 0 unset (on), 1 on, 2 forced off
    uint32_t seed = LLAMA_DEFAULT_SEED;
    bool embeddings = false;
    int32_t flash_attn = -1;        // -1 auto, 0 off, 1 on
    bool verbose = false;
    // Speculative decoding: "none", "ngram-simple" (prompt lookup in the sequence's own tokens)
    // or "draft-simple" (a draft model of the same vocabulary, greedy, in a second context).
    std::string spec_type = "none";
    std::string draft_model;        // draft-simple: the draft GGUF
    int32_t n_draft = 8;            // most tokens drafted per sequence and step
    int32_t ngram_n = 3;            // ngram-simple: tokens matched to find a continuation
    float spec_min_acceptance = 0.1f;  // a sequence whose acceptance falls below this pauses drafting
    // Context shift (llama.cpp's --context-shift, LocalAI's context_shift option; off in both): a prompt
    // that does not fit loses whole blocks of its oldest tokens after the kept start, and a sequence
    // that reaches n_ctx while generating drops that share of its tokens after the kept start and
    // goes on. The kept start is a chat's system prompt (BOS for a plain prompt), at most n_ctx / 2.
    bool context_shift = false;
    float context_erase = 0.5f;     // the share erased (llama.cpp's n_discard default, GPT4All's contextErase)
    // Placement (engine_memory.cpp): the device layers go to ("" every GPU device, "none", a name or an
    // index among the GPU devices), layers fitted to its memory (llama.cpp's -ngl auto) or n_gpu_layers
    // checked against it, the margin a fit leaves (llama.cpp's --fit-target), a budget below a device's
    // free memory (0: none), and the host memory available (0: not judged; ggml reports all as free).
    std::string device;
    bool gpu_layers_auto = false;
    int64_t fit_margin_mib = 1024;
    int64_t device_budget_mib = 0;
    int64_t host_available_bytes = 0;
    bool memory_check = true;       // refuse a load the estimate says does not fit
};

// One device's memory as llama.cpp's own estimate gives it (common_get_device_memory_data).
struct DeviceInfo {
    std::string name, description, platform, type;   // platform: the ggml registry (CPU, Vulkan, CUDA)
    size_t free = 0, total = 0;
    int gpu_index = -1;             // its index among the GPU devices (EngineParams::device), -1: not one
};

struct MemoryRow {
    std::string device, platform;
    bool host = false;
    int64_t total = 0, free = 0;
    int64_t budget = -1;            // -1: none
    int64_t margin = 0;
    int64_t available = -1;         // what the need is judged against; -1: not judged
    size_t model = 0, context = 0, compute = 0;   // weights, KV cache (and recurrent state), compute buffers
    size_t repacked = 0;            // host: the weights' copy repacked for the CPU's kernels
    size_t output = 0;              // host: the context's output buffer (logits, embeddings)
    size_t vocab = 0;               // host: the vocabulary's heap
    bool fits = true;
};

struct MemoryPlan {
    std::vector<MemoryRow> rows;    // each device the model uses, then the host
    uint32_t n_ctx = 0;
    uint32_t n_layer = 0;
    int32_t n_gpu_layers = 0;       // layers offloaded (n_layer + 1: every layer and the output)
    bool embedding_only = false;
    size_t output_bytes = 0;
    size_t vocab_bytes = 0;
    uint32_t n_outputs = 1;         // the most outputs one batch of this engine asks (evaluate() aside)
    std::string fit_status;         // "" (no fit asked), "fitted", "failed" (upstream could not fit), "no device"
    bool fits = true;
    std::string verdict;            // why it does not fit, with the numbers
    // what the load uses: kept alive for llama_model_load_from_file
    llama_model_params mp{};
    llama_context_params cp{};
    std::vector<ggml_backend_dev_t> devices;
    std::vector<float> tensor_split;
    std::vector<llama_model_tensor_buft_override> overrides;
};

void install_log();
// While one lives, the engine's log lines are kept (last_errors) but not echoed, verbose or not: the
// memory estimate's dry runs (metadata-only loads) must not read, in a verbose log, as the load itself.
struct QuietLog {
    QuietLog();
    ~QuietLog();
    QuietLog(const QuietLog &) = delete;
    QuietLog & operator=(const QuietLog &) = delete;
};
void load_backends(const std::string & backend_dir);
std::vector<DeviceInfo> list_devices(const std::string & backend_dir);
MemoryPlan plan_memory(const std::string & model_path, const EngineParams & params);
void judge(MemoryPlan & plan, const EngineParams & params);
bool is_embedding_model(const llama_model * model, const EngineParams & params);
uint32_t context_size(const EngineParams & params, int32_t n_ctx_train);
llama_context_params context_params(const EngineParams & params, uint32_t n_ctx, bool embedding_only);

struct SamplingParams {
    float temperature = 0.8f;
    float top_p = 0.95f;
    int32_t top_k = 40;
    float min_p = 0.05f;
    int32_t max_tokens = 256;       // 0 = until the context is full
    uint32_t seed = LLAMA_DEFAULT_SEED;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    float repetition_penalty = 1.0f;
    int32_t penalty_last_n = 64;
    bool ignore_eos = false;
    std::vector<std::string> stop;
    std::string grammar;            // GBNF
    std::string json_schema;        // converted to a grammar
    void validate() const;          // throws std::invalid_argument
};

struct Event {
    enum Kind { Delta, Done, Error } kind;
    std::string text;
    std::string error_type;
};

struct Timings {
    int32_t n_prompt = 0;
    int32_t n_cached = 0;           // prompt tokens reused from the prefix cache
    int32_t n_generated = 0;
    int32_t n_steps = 0;            // forward passes that produced tokens for this request
    int32_t n_drafted = 0;          // draft tokens verified
    int32_t n_accepted = 0;         // draft tokens accepted
    int32_t n_erased = 0;           // tokens context shift erased (from the prompt and while generating)
    double t_submit = 0;            // seconds, steady clock
    double t_first_token = 0;
    double t_done = 0;
};

struct ChatSetup;

// One request: written by the decode loop, read by the caller's thread.
class Request {
public:
    // caller side
    std::optional<Event> next();             // blocks; nullopt after Done/Error was consumed
    std::optional<Event> try_next();         // next() if an event is there, else nullopt at once
    Event wait();                            // blocks until the end; for non-streaming requests
    void cancel() { cancelled.store(true); }
    bool done() const;
    std::string finish_reason() const;
    Timings timings() const;
    std::string text() const;

    // Direct writing (sse.cpp): while a writer is set, a delta the loop pushes is handed to it on the
    // loop's thread instead of being queued (no thread wake per token). It returns false when it could
    // not write the delta whole: it keeps what is left, the writer is unset, and the caller is woken
    // (next() returns an empty delta) to take over. set_writer fails while events are queued (the
    // caller writes those first); unset_writer returns once no call of the writer is in progress.
    using Writer = std::function<bool(const std::string & delta)>;
    bool set_writer(Writer w);
    void unset_writer();

    // loop side
    void push(Event e);
    void finish(const std::string & reason);
    void fail(const std::string & type, const std::string & message);
    void append_text(const std::string & delta) {
        std::lock_guard<std::mutex> lk(mu_);
        final_text += delta;
    }

    std::vector<llama_token> prompt;
    SamplingParams sampling;
    std::shared_ptr<ChatSetup> chat;
    std::atomic<bool> cancelled{false};
    bool streaming = true;                   // false: no per-delta events, the caller waits for the end
    bool plain_greedy = false;               // argmax of the logits is the whole sampling step
    std::unique_ptr<common_sampler, common_sampler_deleter> sampler;
    Timings t;
    std::string generated;                   // full text generated so far (before stop trimming)
    size_t sent = 0;                         // bytes of `generated` already emitted
    std::string final_text;                  // emitted text
    int id = 0;
    common_chat_msg chat_sent;               // the parsed message as far as chat_diffs() has reported it
    int32_t n_keep = 0;                      // context shift: the start kept (system prompt, BOS)

private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Event> events_;
    Writer writer_;                          // set: deltas go to it (under write_mu_), not to events_
    std::mutex write_mu_;                    // held while the writer runs; taken after mu_, never before
    bool finished_ = false;
    bool consumed_end_ = false;
    std::string finish_reason_;
};

struct ChatSetup {
    common_chat_params params;
    common_chat_parser_params parser;
    // The template has no tool-call syntax: calls travel in a grammar-enforced JSON envelope.
    bool generic_tools = false;
    int32_t n_keep = -1;            // context shift: the system prompt's tokens (-1: not computed)
};

// A sequence's state as llama.cpp saves it (llama_state_seq_get_data) and the tokens its KV holds.
struct SavedSequence {
    std::vector<llama_token> tokens;  // positions 0..n-1 of the sequence
    std::string data;                 // the KV cells, in llama.cpp's state format (LLAMA_STATE_SEQ_VERSION)
    int32_t n_matched = 0;            // tokens it shares with the history it was asked for
};

class Engine {
public:
    Engine(const std::string & model_path, const EngineParams & params);
    ~Engine();
    Engine(const Engine &) = delete;
    Engine & operator=(const Engine &) = delete;

    std::vector<llama_token> tokenize(const std::string & text, bool add_special, bool parse_special) const;
    std::string detokenize(const std::vector<llama_token> & tokens, bool special) const;

    std::shared_ptr<Request> submit(std::vector<llama_token> prompt, const SamplingParams & sp,
                                    std::shared_ptr<ChatSetup> chat = nullptr, bool streaming = true);
    std::shared_ptr<Request> submit_text(const std::string & prompt, const SamplingParams & sp, bool streaming = true);

    // Chat: render the model's template (with tools / schema), submit, parse at the end.
    std::shared_ptr<Request> submit_chat(const std::string & messages_json, const std::string & tools_json,
                                         const std::string & tool_choice, const std::string & json_schema,
                                         SamplingParams sp, bool streaming = true);
    std::string parse_chat(const Request & req) const;  // OpenAI-style message JSON
    // What the message gained since the last call, as OpenAI chat.completion.chunk deltas (a JSON
    // array): the text so far parsed with is_partial (llama.cpp's partial chat parsing), diffed
    // against what was reported before. final: parse the whole text as complete.
    std::string chat_diffs(Request & req, bool final) const;
    // The same deltas, each one JSON object of its own (what chat_diffs puts in its array).
    std::vector<std::string> chat_diff_list(Request & req, bool final) const;

    std::vector<std::vector<float>> embed(const std::vector<std::string> & texts, bool normalize);

    // Agreement statistics: evaluate token sequences together, each its own sequence in the KV
    // cache from position 0, and return per sequence the next-token distribution after every
    // token (row i: after seqs[k][0..i], n_vocab floats; rows x n_vocab): its log-softmax, or the
    // raw logits with log_softmax false (a caller that normalises them itself, faster than here).
    // Each llama_decode holds up to `chunk` tokens of every unfinished sequence, so the batch
    // shape is the caller's: one sequence alone, or N sequences side by side; chunk 1 is the
    // shape of generation (one row per sequence and step). Runs on the engine thread; needs an
    // idle engine (no request running) and drops the prefix cache.
    std::vector<std::vector<float>> evaluate(const std::vector<std::vector<llama_token>> & seqs, int32_t chunk,
                                             bool log_softmax = true);

    // Sessions (engine-thread jobs, between decode steps). save_state: the idle sequence whose cached
    // tokens share the longest start with `history` (empty: the one used last), saved whole.
    // restore_state: the state put into an idle sequence (the least recently used one, evicting idle
    // caches for room) as a cached prefix the next request with that start reuses; returns the tokens
    // held, and false when an idle sequence held them already (nothing loaded). Both need prefix caching.
    SavedSequence save_state(const std::vector<llama_token> & history);
    std::pair<int32_t, bool> restore_state(const std::vector<llama_token> & tokens, const uint8_t * data, size_t size);
    // The chat as its template renders it without a generation prompt: the history a turn left.
    std::vector<llama_token> chat_tokens(const std::string & messages_json) const;

    std::map<std::string, std::string> info() const;
    const MemoryPlan & memory_plan() const { return plan_; }
    std::map<std::string, int64_t> stats() const;
    std::vector<std::string> recent_log() const;
    void close();

    int32_t n_ctx() const { return n_ctx_; }
    bool is_embedding_model() const { return embedding_only_; }

private:
    struct Slot {
        int id = 0;
        std::shared_ptr<Request> req;        // null when idle
        std::vector<llama_token> cache;      // tokens in the KV cache for seq `id`
        size_t n_prompt_done = 0;            // prompt tokens in `cache` for the active request
        int32_t i_batch = -1;                // logits index in the current batch
        int32_t n_added = 0;                 // tokens this slot put in the current batch
        llama_token last = -1;               // sampled, not yet decoded
        bool decoding = false;               // prefill done
        uint64_t last_used = 0;
        // speculation
        std::vector<llama_token> draft;      // drafted after `last` in the current batch
        std::vector<llama_token> dcache;     // tokens in the draft context's KV for seq `id`
        int32_t n_draft_cur = 0;             // adaptive draft length
        float acceptance = 1.0f;             // running (exponentially weighted) acceptance rate
        int32_t pause = 0;                   // steps left without drafting
        int32_t pause_next = 0;              // the next pause, doubled while acceptance stays low
    };

    common_chat_msg chat_message(const Request & req, bool partial) const;
    // Everything that computes runs on one engine thread (worker_): the model load, the decode loop,
    // embeddings. ggml's CPU backend runs graphs in OpenMP teams, one per calling thread, and some
    // load-time work is parallel too (the AMX weight repack); a second team in the process makes
    // libgomp count more threads than CPUs and throttle its barrier spinning to ~100 spins, after
    // which every barrier sleeps on a futex: decode at a quarter of llama-bench's speed on an AMX
    // host. llama-bench and llama-server load and compute on one thread; so does this.
    void init(const std::string & model_path);
    void free_all();
    void loop();
    void task_loop();
    std::vector<std::vector<float>> embed_here(const std::vector<std::string> & texts, bool normalize);
    std::vector<std::vector<float>> evaluate_here(const std::vector<std::vector<llama_token>> & seqs, int32_t chunk,
                                                  bool log_softmax);
    void run_tasks();  // the queued engine-thread jobs (embeddings, evaluations), in order
    bool admit_locked();
    void release(Slot & s, const std::string & reason);
    void on_token(Slot & s, llama_token tok);
    void emit(Slot & s, bool final);
    // sessions and context shift (engine_state.cpp)
    int32_t keep_for(const std::vector<llama_token> & prompt, const ChatSetup * chat) const;
    int32_t truncate_prompt(std::vector<llama_token> & prompt, int32_t n_keep) const;  // returns the tokens erased
    int32_t system_tokens(const common_chat_templates_inputs & in, const std::vector<llama_token> & prompt) const;
    void shift_context(Slot & s);
    SavedSequence save_here(const std::vector<llama_token> & history);
    std::pair<int32_t, bool> restore_here(const std::vector<llama_token> & tokens, const uint8_t * data, size_t size);
    llama_token argmax(int32_t i_batch, bool skip_eog = false) const;
    llama_token argmax_ctx(llama_context * ctx, int32_t i_batch, bool skip_eog = false) const;
    // speculation
    bool speculating() const { return spec_kind_ != SpecKind::None; }
    void init_speculation(const llama_context_params & cp);
    void reset_spec(Slot & s);
    void plan_drafts(int32_t batch_room, int32_t kv_room);
    void draft_ngram(Slot & s, int32_t limit);
    void draft_with_model(std::vector<std::pair<Slot *, int32_t>> & want);
    void trim_draft_kv(Slot & s, size_t n);
    void verify(Slot & s);
    std::vector<llama_token> suppressed_;
    size_t kv_used() const;
    bool prefix_caching() const { return params_.prefix_caching != 2; }

    EngineParams params_;
    MemoryPlan plan_;               // the estimate the load was judged by, and what it loads with
    llama_model * model_ = nullptr;
    llama_context * ctx_ = nullptr;
    llama_context * embd_ctx_ = nullptr;
    enum class SpecKind { None, Ngram, DraftModel } spec_kind_ = SpecKind::None;
    llama_model * draft_model_ = nullptr;
    llama_context * draft_ctx_ = nullptr;
    llama_batch draft_batch_{};
    const llama_vocab * vocab_ = nullptr;
    common_chat_templates_ptr templates_;
    int32_t n_ctx_ = 0;
    bool embedding_only_ = false;
    std::string arch_;

    std::vector<Slot> slots_;
    llama_batch batch_{};
    std::thread worker_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Request>> pending_;
    std::deque<std::function<void()>> tasks_;  // work for the engine thread (embeddings, evaluate)

    // Run fn on the engine thread (every decode there: one OpenMP team) and wait for its result.
    template <class F> auto on_engine_thread(F && fn) -> decltype(fn()) {
        std::packaged_task<decltype(fn())()> task(std::forward<F>(fn));
        auto result = task.get_future();
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (stopping_) throw EngineClosedError("engine is closed");
            tasks_.emplace_back([&task] { task(); });
        }
        cv_.notify_all();
        return result.get();
    }
    bool stopping_ = false;
    int next_id_ = 1;
    uint64_t tick_ = 0;
    std::mutex embed_mu_;
    std::atomic<int64_t> n_decode_calls_{0}, n_tokens_decoded_{0}, n_prefix_hits_{0}, n_completed_{0};
    std::atomic<int64_t> n_gen_steps_{0}, n_gen_tokens_{0}, n_spec_steps_{0}, n_drafted_{0}, n_accepted_{0},
        n_draft_decode_calls_{0};
    std::atomic<int64_t> eval_decode_us_{0}, eval_us_{0};  // evaluate(): in llama_decode, in all of it
};

double now_seconds();

// `s` as a JSON string (quotes and escapes; bytes that are not UTF-8 become U+FFFD).
std::string json_quote(const std::string & s);

}  // namespace harness
