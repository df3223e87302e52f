// Private to the binding's engine*.cpp files: the helpers more than one of them uses. Not part of
// the module's interface (engine.h is).
#pragma once

#include "engine.h"

#include <string>

namespace harness {

// The last error-looking lines llama.cpp and ggml logged (engine.cpp keeps the log), to say why a
// load, a context or a sampler failed.
std::string last_errors();

// Hot: the decode loop, the draft model, embeddings and evaluation fill their batches with these.
inline void batch_clear(llama_batch & b) { b.n_tokens = 0; }

inline void batch_add(llama_batch & b, llama_token id, llama_pos pos, llama_seq_id seq, bool logits) {
    b.token[b.n_tokens] = id;
    b.pos[b.n_tokens] = pos;
    b.n_seq_id[b.n_tokens] = 1;
    b.seq_id[b.n_tokens][0] = seq;
    b.logits[b.n_tokens] = logits;
    b.n_tokens++;
}

}  // namespace harness
