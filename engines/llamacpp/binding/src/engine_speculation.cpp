// Speculative decoding: set up (ngram-simple or a draft model), draft per sequence, verify in the
// decode loop's shared batch, commit one token at a time through on_token.
#include "engine.h"
#include "engine_internal.h"

#include "common.h"
#include "ngram-map.h"

#include <algorithm>
#include <cstdio>

namespace harness {

// ---------------------------------------------------------------------------
// speculation: draft per sequence, verify in the shared batch, commit one by one
// ---------------------------------------------------------------------------

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

}  // namespace harness
