// The decode loop: admission (FCFS, prefix reuse, KV-bounded), one shared batch per step of every
// generating sequence and prompt chunks, sampling or argmax, and the text each token emits.
#include "engine.h"
#include "engine_internal.h"

#include "common.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace harness {

namespace {

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

// Bytes at the end of `s` that form an incomplete UTF-8 sequence.
size_t incomplete_utf8(const std::string & s) {
    for (size_t i = 1; i <= std::min<size_t>(4, s.size()); ++i) {
        unsigned char c = (unsigned char) s[s.size() - i];
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking back
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > i ? i : 0;
    }
    return 0;
}

}  // namespace

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
    // Full context: the end, unless context shift makes room (not for max_tokens 0, "until the context is full").
    bool full = (int32_t) s.cache.size() + 1 >= n_ctx_ && (!params_.context_shift || r.sampling.max_tokens == 0);
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
        if (params_.context_shift) {
            for (auto & s : slots_) {
                if (s.req && s.decoding && (int32_t) s.cache.size() + 1 >= n_ctx_) shift_context(s);
            }
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

}  // namespace harness
