// pybind11 bindings: the engine as Python sees it. Every blocking wait releases the GIL.
#include "engine.h"
#include "sse.h"
#include "build-info.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "harness_pydict.h"
#include <pybind11/stl.h>

namespace py = pybind11;
using namespace harness;

#ifndef HARNESS_PIN
#define HARNESS_PIN "unknown"
#endif
#ifndef HARNESS_VARIANT
#define HARNESS_VARIANT "unknown"
#endif
#ifndef HARNESS_ABI_FINGERPRINT
#define HARNESS_ABI_FINGERPRINT "unknown"
#endif
#ifndef HARNESS_BUILD_NUMBER
#define HARNESS_BUILD_NUMBER 0
#endif

namespace {

using harness_py::check_keys;
using harness_py::get;

EngineParams engine_params(const py::dict & d) {
    check_keys(d, {"backend_dir", "n_ctx", "n_batch", "n_ubatch", "n_threads", "n_threads_batch", "max_num_seqs",
                   "n_gpu_layers", "kv_cache_type", "prefix_caching", "seed", "embeddings", "flash_attn", "verbose",
                   "spec_type", "draft_model", "n_draft", "ngram_n", "spec_min_acceptance", "token_delay_us",
                   "context_shift", "context_erase", "device", "gpu_layers_auto", "fit_margin_mib",
                   "device_budget_mib", "host_available_bytes", "memory_check"},
               "engine parameter");
    EngineParams p;
    p.backend_dir = get<std::string>(d, "backend_dir", "");
    p.n_ctx = get<int32_t>(d, "n_ctx", 0);
    p.n_batch = get<int32_t>(d, "n_batch", 512);
    p.n_ubatch = get<int32_t>(d, "n_ubatch", p.n_batch);
    p.n_threads = get<int32_t>(d, "n_threads", 0);
    p.n_threads_batch = get<int32_t>(d, "n_threads_batch", 0);
    p.max_num_seqs = get<int32_t>(d, "max_num_seqs", 4);
    // unset: the engine's own default (every layer on the GPU of a GPU variant; LocalAI's default too),
    // nothing to offload where there is no GPU device (a CPU variant)
    p.n_gpu_layers = get<int32_t>(d, "n_gpu_layers", llama_model_default_params().n_gpu_layers);
    p.kv_cache_type = get<std::string>(d, "kv_cache_type", "f16");
    p.prefix_caching = get<int32_t>(d, "prefix_caching", 0);
    p.token_delay_us = get<int32_t>(d, "token_delay_us", 0);
    if (p.token_delay_us < 0 || p.token_delay_us > 1000000) throw std::invalid_argument("token_delay_us must be in [0, 1000000]");
    p.seed = get<uint32_t>(d, "seed", LLAMA_DEFAULT_SEED);
    p.embeddings = get<bool>(d, "embeddings", false);
    p.flash_attn = get<int32_t>(d, "flash_attn", -1);
    p.verbose = get<bool>(d, "verbose", false);
    p.spec_type = get<std::string>(d, "spec_type", p.spec_type);
    p.draft_model = get<std::string>(d, "draft_model", "");
    p.n_draft = get<int32_t>(d, "n_draft", p.n_draft);
    p.ngram_n = get<int32_t>(d, "ngram_n", p.ngram_n);
    p.spec_min_acceptance = get<float>(d, "spec_min_acceptance", p.spec_min_acceptance);
    p.context_shift = get<bool>(d, "context_shift", false);
    p.context_erase = get<float>(d, "context_erase", p.context_erase);
    if (!(p.context_erase > 0.0f && p.context_erase < 1.0f)) throw std::invalid_argument("context_erase must be in (0, 1)");
    p.device = get<std::string>(d, "device", "");
    p.gpu_layers_auto = get<bool>(d, "gpu_layers_auto", false);
    p.fit_margin_mib = get<int64_t>(d, "fit_margin_mib", p.fit_margin_mib);
    p.device_budget_mib = get<int64_t>(d, "device_budget_mib", 0);
    p.host_available_bytes = get<int64_t>(d, "host_available_bytes", 0);
    p.memory_check = get<bool>(d, "memory_check", true);
    if (p.fit_margin_mib < 0 || p.device_budget_mib < 0) throw std::invalid_argument("fit_margin_mib and device_budget_mib must be >= 0");
    if (p.n_ctx < 0) throw std::invalid_argument("n_ctx must be >= 0");
    if (p.n_batch < 1 || p.n_ubatch < 1) throw std::invalid_argument("n_batch and n_ubatch must be >= 1");
    if (p.prefix_caching < 0 || p.prefix_caching > 2) throw std::invalid_argument("prefix_caching is tri-state: 0 unset, 1 on, 2 off");
    return p;
}

SamplingParams sampling_params(const py::dict & d) {
    check_keys(d, {"temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "presence_penalty", "frequency_penalty",
                   "repetition_penalty", "penalty_last_n", "ignore_eos", "stop", "grammar", "json_schema"},
               "sampling parameter");
    SamplingParams s;
    s.temperature = get<float>(d, "temperature", s.temperature);
    s.top_p = get<float>(d, "top_p", s.top_p);
    s.top_k = get<int32_t>(d, "top_k", s.top_k);
    s.min_p = get<float>(d, "min_p", s.min_p);
    s.max_tokens = get<int32_t>(d, "max_tokens", s.max_tokens);
    s.seed = get<uint32_t>(d, "seed", s.seed);
    s.presence_penalty = get<float>(d, "presence_penalty", s.presence_penalty);
    s.frequency_penalty = get<float>(d, "frequency_penalty", s.frequency_penalty);
    s.repetition_penalty = get<float>(d, "repetition_penalty", s.repetition_penalty);
    s.penalty_last_n = get<int32_t>(d, "penalty_last_n", s.penalty_last_n);
    s.ignore_eos = get<bool>(d, "ignore_eos", false);
    s.stop = get<std::vector<std::string>>(d, "stop", {});
    s.grammar = get<std::string>(d, "grammar", "");
    s.json_schema = get<std::string>(d, "json_schema", "");
    return s;
}

py::dict timings_dict(const Timings & t) {
    py::dict d;
    d["n_prompt"] = t.n_prompt;
    d["n_cached"] = t.n_cached;
    d["n_generated"] = t.n_generated;
    d["n_steps"] = t.n_steps;
    d["n_drafted"] = t.n_drafted;
    d["n_accepted"] = t.n_accepted;
    d["n_erased"] = t.n_erased;
    d["t_submit"] = t.t_submit;
    d["t_first_token"] = t.t_first_token;
    d["t_done"] = t.t_done;
    return d;
}

py::dict plan_dict(const MemoryPlan & plan) {
    py::list rows;
    for (const auto & r : plan.rows) {
        py::dict d;
        d["device"] = r.device;
        d["platform"] = r.platform;
        d["host"] = r.host;
        d["total"] = r.total;
        d["free"] = r.free;
        d["budget"] = r.budget < 0 ? py::object(py::none()) : py::object(py::int_(r.budget));
        d["margin"] = r.margin;
        d["available"] = r.available < 0 ? py::object(py::none()) : py::object(py::int_(r.available));
        d["weights"] = r.model;
        d["repacked"] = r.repacked;
        d["outputs"] = r.output;
        d["vocabulary"] = r.vocab;
        d["kv_cache"] = r.context;
        d["compute"] = r.compute;
        d["fits"] = r.fits;
        rows.append(d);
    }
    py::dict d;
    d["rows"] = rows;
    d["n_ctx"] = plan.n_ctx;
    d["n_layer"] = plan.n_layer;
    d["n_gpu_layers"] = plan.n_gpu_layers;
    d["embedding_only"] = plan.embedding_only;
    d["fit"] = plan.fit_status;
    d["fits"] = plan.fits;
    d["verdict"] = plan.verdict;
    return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "harness llama.cpp binding (continuous batching over one shared context)";
    m.attr("PIN") = HARNESS_PIN;
    m.attr("VARIANT") = HARNESS_VARIANT;
    m.attr("ABI_FINGERPRINT") = HARNESS_ABI_FINGERPRINT;
    m.attr("BUILD_NUMBER") = HARNESS_BUILD_NUMBER;
    // the state format of llama_state_seq_get_data in the headers this module was compiled against
    m.attr("STATE_SEQ_VERSION") = LLAMA_STATE_SEQ_VERSION;
    m.def("library_build_number", [] { return llama_build_number(); },
          "Build number of the libllama-common actually loaded (run-time half of the handshake).");
    m.def("library_commit", [] { return std::string(llama_commit()); });
    m.def("system_info", [] { return std::string(llama_print_system_info()); });
    m.def("devices", [](const std::string & backend_dir) {
        std::vector<DeviceInfo> devs;
        {
            py::gil_scoped_release nogil;
            devs = list_devices(backend_dir);
        }
        py::list out;
        for (const auto & i : devs) {
            py::dict d;
            d["name"] = i.name;
            d["description"] = i.description;
            d["platform"] = i.platform;
            d["type"] = i.type;
            d["free"] = i.free;
            d["total"] = i.total;
            d["gpu_index"] = i.gpu_index < 0 ? py::object(py::none()) : py::object(py::int_(i.gpu_index));
            out.append(d);
        }
        return out;
    }, py::arg("backend_dir"), "The ggml devices of this variant (ggml backends loaded from backend_dir): name, platform, type, free and total bytes.");
    m.def("estimate_memory", [](const std::string & path, const py::dict & params) {
        EngineParams p = engine_params(params);
        MemoryPlan plan;
        {
            py::gil_scoped_release nogil;
            plan = plan_memory(path, p);
        }
        return plan_dict(plan);
    }, py::arg("path"), py::arg("params"),
       "llama.cpp's own estimate of a load (no weights read): per device and the host, weights, KV cache and "
       "compute bytes; with gpu_layers_auto the layers upstream's fit chose; fits and the verdict with the numbers.");

    auto base = py::register_exception<std::runtime_error>(m, "CoreError", PyExc_RuntimeError);
    py::register_exception<ModelLoadError>(m, "ModelLoadError", base.ptr());
    py::register_exception<ContextOverflowError>(m, "ContextOverflowError", base.ptr());
    py::register_exception<KVCacheFullError>(m, "KVCacheFullError", base.ptr());
    py::register_exception<EngineClosedError>(m, "EngineClosedError", base.ptr());
    py::register_exception<InsufficientMemoryError>(m, "InsufficientMemoryError", base.ptr());

    py::class_<Request, std::shared_ptr<Request>>(m, "Request")
        .def("next", [](Request & r) -> py::object {
            std::optional<Event> e;
            {
                py::gil_scoped_release nogil;
                e = r.next();
            }
            if (!e) return py::none();
            const char * kind = e->kind == Event::Delta ? "delta" : e->kind == Event::Done ? "done" : "error";
            return py::make_tuple(kind, py::bytes(e->text).attr("decode")("utf-8", "replace"), e->error_type);
        }, "Block (GIL released) for the next event: ('delta'|'done'|'error', text, error_type), or None after the end.")
        .def("wait", [](Request & r) {
            Event e;
            {
                py::gil_scoped_release nogil;
                e = r.wait();
            }
            const char * kind = e.kind == Event::Done ? "done" : "error";
            return py::make_tuple(kind, py::bytes(e.text).attr("decode")("utf-8", "replace"), e.error_type);
        }, "Block (GIL released) until the request ends: ('done'|'error', text, error_type).")
        .def("cancel", &Request::cancel)
        .def_property_readonly("done", &Request::done)
        .def_property_readonly("finish_reason", &Request::finish_reason)
        .def_property_readonly("id", [](const Request & r) { return r.id; })
        .def("timings", [](const Request & r) { return timings_dict(r.timings()); })
        .def("text", [](const Request & r) { return py::bytes(r.text()).attr("decode")("utf-8", "replace"); });

    py::class_<Engine>(m, "Engine")
        .def(py::init([](const std::string & path, const py::dict & params) {
                 EngineParams p = engine_params(params);
                 py::gil_scoped_release nogil;
                 return new Engine(path, p);
             }),
             py::arg("model_path"), py::arg("params") = py::dict())
        .def("tokenize", &Engine::tokenize, py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = true)
        .def("detokenize", [](const Engine & e, const std::vector<llama_token> & t, bool special) {
            return py::bytes(e.detokenize(t, special)).attr("decode")("utf-8", "replace");
        }, py::arg("tokens"), py::arg("special") = false)
        .def("submit", [](Engine & e, const py::object & prompt, const py::dict & sampling, bool stream) {
            SamplingParams sp = sampling_params(sampling);
            if (py::isinstance<py::str>(prompt)) {
                auto text = prompt.cast<std::string>();
                py::gil_scoped_release nogil;
                return e.submit_text(text, sp, stream);
            }
            auto toks = prompt.cast<std::vector<llama_token>>();
            py::gil_scoped_release nogil;
            return e.submit(std::move(toks), sp, nullptr, stream);
        }, py::arg("prompt"), py::arg("sampling") = py::dict(), py::arg("stream") = true)
        .def("submit_chat", [](Engine & e, const std::string & messages, const std::string & tools,
                               const std::string & tool_choice, const std::string & schema, const py::dict & sampling,
                               bool stream) {
            SamplingParams sp = sampling_params(sampling);
            py::gil_scoped_release nogil;
            return e.submit_chat(messages, tools, tool_choice, schema, sp, stream);
        }, py::arg("messages_json"), py::arg("tools_json") = "", py::arg("tool_choice") = "auto",
           py::arg("json_schema") = "", py::arg("sampling") = py::dict(), py::arg("stream") = true)
        .def("parse_chat", [](const Engine & e, const Request & r) { return e.parse_chat(r); })
        .def("chat_diffs", [](const Engine & e, Request & r, bool final) { return e.chat_diffs(r, final); },
             py::arg("request"), py::arg("final") = false,
             "OpenAI chunk deltas the chat message gained since the last call (JSON array), by partial parsing.")
        .def("pump_sse", [](const Engine & e, Request & r, int fd, const py::bytes & prefix, const py::bytes & suffix,
                            bool chat, double write_timeout_s, bool chunked) -> py::tuple {
            SseTarget t;
            t.fd = fd;
            t.prefix = prefix;
            t.suffix = suffix;
            t.chunked = chunked;
            t.write_timeout_s = write_timeout_s;
            PumpResult res;
            {
                py::gil_scoped_release nogil;
                res = pump_sse(e, r, t, chat);
            }
            if (!res.end) return py::make_tuple(res.outcome, res.events, py::none());
            const char * kind = res.end->kind == Event::Done ? "done" : "error";
            return py::make_tuple(res.outcome, res.events,
                                  py::make_tuple(kind, py::bytes(res.end->text).attr("decode")("utf-8", "replace"),
                                                 res.end->error_type));
        }, py::arg("request"), py::arg("fd"), py::arg("prefix"), py::arg("suffix"), py::arg("chat") = false,
           py::arg("write_timeout_s") = 30.0, py::arg("chunked") = true,
           "Write the request's deltas to the client socket `fd` as server-sent events (prefix + JSON value + suffix "
           "each, GIL released) until it ends: (outcome 'done'|'gone'|'slow'|'cancelled', events written, the end "
           "event as next() gives it, or None).")
        .def("embed", [](Engine & e, const std::vector<std::string> & texts, bool normalize) {
            std::vector<std::vector<float>> out;
            {
                py::gil_scoped_release nogil;
                out = e.embed(texts, normalize);
            }
            size_t n = out.size(), d = n ? out[0].size() : 0;
            py::array_t<float> arr({n, d});
            auto buf = arr.mutable_unchecked<2>();
            for (size_t i = 0; i < n; ++i)
                for (size_t j = 0; j < d; ++j) buf(i, j) = out[i][j];
            return arr;
        }, py::arg("texts"), py::arg("normalize") = true)
        .def("evaluate", [](Engine & e, const std::vector<std::vector<llama_token>> & seqs, int32_t chunk, bool log_softmax) {
            std::vector<std::vector<float>> out;
            {
                py::gil_scoped_release nogil;
                out = e.evaluate(seqs, chunk, log_softmax);
            }
            const auto n_vocab = (py::ssize_t) std::stoll(e.info().at("n_vocab"));
            py::list arrays;
            for (auto & rows : out) {
                // the vector moves into the array's owner: 100 MB per window are not copied
                auto * held = new std::vector<float>(std::move(rows));
                py::capsule owner(held, [](void * p) { delete static_cast<std::vector<float> *>(p); });
                const auto n = (py::ssize_t) (held->size() / (size_t) n_vocab);
                arrays.append(py::array_t<float>({n, n_vocab}, {n_vocab * (py::ssize_t) sizeof(float), (py::ssize_t) sizeof(float)},
                                                 held->data(), owner));
            }
            return arrays;
        }, py::arg("sequences"), py::arg("chunk") = 512, py::arg("log_softmax") = true,
           "Log-softmax (or with log_softmax=False the raw logits) of the next-token distribution after every "
           "token of each sequence (one float32 array of tokens x n_vocab per sequence); every decode holds up "
           "to `chunk` tokens of each sequence.")
        .def("chat_tokens", &Engine::chat_tokens, py::arg("messages_json"),
             "The chat's tokens as its template renders it without a generation prompt.")
        .def("save_state", [](Engine & e, const std::vector<llama_token> & history) {
            SavedSequence s;
            {
                py::gil_scoped_release nogil;
                s = e.save_state(history);
            }
            return py::make_tuple(s.tokens, py::bytes(s.data), s.n_matched);
        }, py::arg("history") = std::vector<llama_token>{},
           "Save the idle sequence sharing the longest start with `history` (empty: the one used last): "
           "(its tokens, its state as llama_state_seq_get_data writes it, tokens shared with history).")
        .def("restore_state", [](Engine & e, const std::vector<llama_token> & tokens, const py::buffer & data) {
            // any contiguous bytes-like object, not copied: the buffer stays exported (and the caller
            // holds its object) while the engine thread reads it; released with the GIL held again
            py::buffer_info buf = data.request();
            if (buf.ndim != 1 || buf.itemsize != 1 || (buf.size > 1 && buf.strides[0] != 1)) {
                throw std::invalid_argument("the state must be contiguous bytes");
            }
            const auto * p = static_cast<const uint8_t *>(buf.ptr);
            const auto n = (size_t) buf.size;
            std::pair<int32_t, bool> r;
            {
                py::gil_scoped_release nogil;
                r = e.restore_state(tokens, p, n);
            }
            return py::make_tuple(r.first, r.second);
        }, py::arg("tokens"), py::arg("data"),
           "Put a saved sequence (its tokens and state) into an idle sequence as a cached prefix: "
           "(tokens held, False when an idle sequence held them already).")
        .def("info", &Engine::info)
        .def("memory", [](const Engine & e) { return plan_dict(e.memory_plan()); },
             "The estimate this engine's load was judged by (as estimate_memory returns it).")
        .def("stats", &Engine::stats)
        .def("recent_log", &Engine::recent_log)
        .def_property_readonly("n_ctx", &Engine::n_ctx)
        .def_property_readonly("is_embedding_model", &Engine::is_embedding_model)
        .def("close", [](Engine & e) {
            py::gil_scoped_release nogil;
            e.close();
        });
}
