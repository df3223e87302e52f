// Work run as jobs on the engine thread: the job queue, embeddings, evaluation.
#include "engine.h"
#include "engine_internal.h"

#include "common.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace harness {

// ---------------------------------------------------------------------------
// engine-thread jobs
// ---------------------------------------------------------------------------

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

}  // namespace harness
