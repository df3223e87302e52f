// pybind11 bindings over vllm.cpp's C ABI (include/vllm.h): the engine as Python sees it.
//
// - The ABI handshake: COMPILED_ABI_VERSION is VLLM_ABI_VERSION of the header this module was
//   compiled against; library_abi_version() asks the loaded libvllm (vllm_abi_version()). The
//   Engine constructor refuses a mismatch (AbiMismatchError naming both) before any other call
//   crosses the boundary, whatever the Python side did first.
// - Requests run on vllm.cpp's own scheduler: vllm_request_submit enqueues into the shared
//   AsyncLLM (continuous batching across requests) and a library-owned delivery thread calls
//   back per step; the callback only appends the delta to this request's queue. Python reads
//   with next()/wait(), the GIL released while it blocks, and never loops per token.
// - No Python object crosses the C boundary: user_data is the request's own C++ state.
#include <vllm.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness_pydict.h"

namespace py = pybind11;

#ifndef HARNESS_PIN
#define HARNESS_PIN "unknown"
#endif
#ifndef HARNESS_VARIANT
#define HARNESS_VARIANT "unknown"
#endif
#ifndef HARNESS_ABI_FINGERPRINT
#define HARNESS_ABI_FINGERPRINT "unknown"
#endif

namespace {

using harness_py::check_keys;
using harness_py::get;

struct AbiMismatchError : std::runtime_error { using std::runtime_error::runtime_error; };
struct ModelLoadError : std::runtime_error { using std::runtime_error::runtime_error; };
struct EngineClosedError : std::runtime_error { using std::runtime_error::runtime_error; };

double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string abi_mismatch_message(int32_t library) {
    return "libvllm reports ABI version " + std::to_string(library) + " (vllm_abi_version()), but this binding was "
           "compiled against vllm.h with VLLM_ABI_VERSION " + std::to_string(VLLM_ABI_VERSION) + " (pin " HARNESS_PIN
           ", variant " HARNESS_VARIANT "): rebuild the binding against this artifact "
           "(harness build-binding vllmcpp --variant " HARNESS_VARIANT ")";
}

void check_abi() {
    const int32_t library = vllm_abi_version();
    if (library != VLLM_ABI_VERSION) throw AbiMismatchError(abi_mismatch_message(library));
}

std::string last_error(const char * what) {
    std::string e = vllm_last_error();
    return std::string(what) + (e.empty() ? "" : ": " + e);
}

// The sampling POD and the strings it borrows, kept alive together for as long as the request.
struct Sampling {
    vllm_sampling_params p = vllm_sampling_params_default();
    std::vector<std::string> stop, choice;
    std::vector<const char *> stop_ptrs, choice_ptrs;
    std::string json_schema, regex, grammar;
};

std::unique_ptr<Sampling> sampling_params(const py::dict & d) {
    check_keys(d, {"temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "presence_penalty",
                   "frequency_penalty", "repetition_penalty", "min_tokens", "ignore_eos", "stop", "json_schema",
                   "regex", "choice", "grammar", "json_object"},
               "sampling parameter");
    auto s = std::make_unique<Sampling>();
    auto & p = s->p;
    p.temperature = get<float>(d, "temperature", p.temperature);
    p.top_p = get<float>(d, "top_p", p.top_p);
    p.top_k = get<int32_t>(d, "top_k", p.top_k);
    p.min_p = get<float>(d, "min_p", p.min_p);
    p.max_tokens = get<int32_t>(d, "max_tokens", p.max_tokens);
    if (d.contains("seed") && !d["seed"].is_none()) {
        p.seed = d["seed"].cast<uint64_t>();
        p.has_seed = 1;
    }
    p.presence_penalty = get<float>(d, "presence_penalty", p.presence_penalty);
    p.frequency_penalty = get<float>(d, "frequency_penalty", p.frequency_penalty);
    p.repetition_penalty = get<float>(d, "repetition_penalty", p.repetition_penalty);
    p.min_tokens = get<int32_t>(d, "min_tokens", p.min_tokens);
    p.ignore_eos = get<bool>(d, "ignore_eos", false) ? 1 : 0;
    s->stop = get<std::vector<std::string>>(d, "stop", {});
    for (auto & x : s->stop) s->stop_ptrs.push_back(x.c_str());
    p.stop = s->stop_ptrs.empty() ? nullptr : s->stop_ptrs.data();
    p.n_stop = static_cast<int32_t>(s->stop_ptrs.size());
    s->json_schema = get<std::string>(d, "json_schema", "");
    s->regex = get<std::string>(d, "regex", "");
    s->grammar = get<std::string>(d, "grammar", "");
    s->choice = get<std::vector<std::string>>(d, "choice", {});
    for (auto & x : s->choice) s->choice_ptrs.push_back(x.c_str());
    p.structured_json = s->json_schema.empty() ? nullptr : s->json_schema.c_str();
    p.structured_regex = s->regex.empty() ? nullptr : s->regex.c_str();
    p.structured_grammar = s->grammar.empty() ? nullptr : s->grammar.c_str();
    p.structured_choice = s->choice_ptrs.empty() ? nullptr : s->choice_ptrs.data();
    p.n_structured_choice = static_cast<int32_t>(s->choice_ptrs.size());
    p.structured_json_object = get<bool>(d, "json_object", false) ? 1 : 0;
    return s;
}

// The loaded engine; requests hold a reference, so it is freed after the last of them.
struct Handle {
    vllm_engine * engine = nullptr;
    ~Handle() { vllm_engine_free(engine); }
};

struct Event {
    enum Kind { Delta, Done, Error } kind;
    std::string text;
    std::string error_type;
};

// One request: the C callback appends to `queue`; Python reads with next()/wait().
class Request {
  public:
    Request(std::shared_ptr<Handle> handle, std::unique_ptr<Sampling> sampling, bool stream)
        : handle_(std::move(handle)), sampling_(std::move(sampling)), stream_(stream), t_submit_(now_s()) {}

    ~Request() {
        if (req_ != nullptr) vllm_request_free(req_);  // cancels if needed, joins the delivery thread
    }

    void start(const std::string & prompt) {
        vllm_request * out = nullptr;
        const vllm_status st = vllm_request_submit(handle_->engine, prompt.c_str(), &sampling_->p, &Request::on_delta,
                                                   this, &out);
        if (st != VLLM_OK) {
            const std::string msg = last_error("vllm_request_submit");
            if (st == VLLM_ERR_INVALID_ARGUMENT) throw std::invalid_argument(msg);
            throw std::runtime_error(msg);
        }
        req_ = out;
    }

    // ('delta'|'done'|'error', text, error_type), or nullopt after the end.
    std::optional<Event> next() {
        std::unique_lock<std::mutex> lk(mu_);
        for (;;) {
            if (!events_.empty()) {
                Event e = std::move(events_.front());
                events_.pop_front();
                if (e.kind != Event::Delta) ended_ = true;
                return e;
            }
            if (ended_) return std::nullopt;
            if (cv_.wait_for(lk, std::chrono::milliseconds(20), [this] { return !events_.empty(); })) continue;
            // No callback comes after an error or a cancel: the library only marks the request done.
            if (vllm_request_done(req_)) {
                lk.unlock();
                finish_from_library();
                lk.lock();
            }
        }
    }

    Event wait() {
        vllm_request_wait(req_);  // joins the delivery thread: every callback has run
        finish_from_library();
        std::lock_guard<std::mutex> lk(mu_);
        ended_ = true;
        if (finish_reason_ == "error") return {Event::Error, error_, "EngineError"};
        return {Event::Done, "", ""};
    }

    void cancel() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (finished_) return;
            cancel_requested_ = true;
        }
        vllm_request_cancel(req_);
        finish("cancelled", "");
    }

    bool done() {
        std::lock_guard<std::mutex> lk(mu_);
        return finished_;
    }

    std::string finish_reason() {
        std::lock_guard<std::mutex> lk(mu_);
        return finish_reason_;
    }

    std::string text() {
        std::lock_guard<std::mutex> lk(mu_);
        return text_;
    }

    py::dict timings() {
        std::lock_guard<std::mutex> lk(mu_);
        py::dict d;
        d["n_prompt"] = 0;  // the C ABI's streaming callback carries no token counts
        d["n_cached"] = 0;
        d["n_generated"] = n_steps_;
        d["n_steps"] = n_steps_;
        d["t_submit"] = t_submit_;
        d["t_first_token"] = t_first_;
        d["t_done"] = t_done_ > 0 ? t_done_ : now_s();
        return d;
    }

  private:
    static bool on_delta(const char * delta, bool finished, void * user_data) noexcept {
        auto * self = static_cast<Request *>(user_data);
        try {
            return self->deliver(delta ? delta : "", finished);
        } catch (...) {
            return false;
        }
    }

    bool deliver(const char * delta, bool finished) {
        std::lock_guard<std::mutex> lk(mu_);
        if (cancel_requested_) return false;
        const double t = now_s();
        if (t_first_ == 0) t_first_ = t;
        ++n_steps_;  // one per delivery: the library coalesces the steps a slow reader missed
        if (*delta) {
            text_ += delta;
            if (stream_) events_.push_back({Event::Delta, delta, ""});
        }
        if (finished) {
            const int32_t max_tokens = sampling_->p.max_tokens;
            finish_locked(max_tokens > 0 && n_steps_ >= max_tokens ? "length" : "stop", "");
        }
        cv_.notify_all();
        return true;
    }

    void finish_from_library() {
        std::string err = vllm_request_error(req_);
        if (!err.empty()) finish("error", err);
        else finish(cancel_requested_ ? "cancelled" : "stop", "");
    }

    void finish(const std::string & reason, const std::string & error) {
        std::lock_guard<std::mutex> lk(mu_);
        finish_locked(reason, error);
        cv_.notify_all();
    }

    void finish_locked(const std::string & reason, const std::string & error) {
        if (finished_) return;
        finished_ = true;
        finish_reason_ = reason;
        error_ = error;
        t_done_ = now_s();
        if (reason == "error") events_.push_back({Event::Error, error, "EngineError"});
        else events_.push_back({Event::Done, "", ""});
    }

    std::shared_ptr<Handle> handle_;
    std::unique_ptr<Sampling> sampling_;
    bool stream_;
    vllm_request * req_ = nullptr;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Event> events_;
    std::string text_, finish_reason_, error_;
    bool finished_ = false, ended_ = false, cancel_requested_ = false;
    int64_t n_steps_ = 0;
    double t_submit_, t_first_ = 0, t_done_ = 0;
};

vllm_model_params model_params(const std::string & path, const py::dict & d, std::vector<std::string> & keep) {
    check_keys(d, {"block_size", "num_blocks", "max_model_len", "max_num_seqs", "tokenizer_config_path", "tool_parser",
                   "reasoning_parser"},
               "engine parameter");
    vllm_model_params p = vllm_model_params_default();
    keep.reserve(4);
    keep.push_back(path);
    p.model_path = keep.back().c_str();
    p.block_size = get<int32_t>(d, "block_size", p.block_size);
    p.num_blocks = get<int32_t>(d, "num_blocks", p.num_blocks);
    p.max_model_len = get<int32_t>(d, "max_model_len", p.max_model_len);
    p.max_num_seqs = get<int32_t>(d, "max_num_seqs", p.max_num_seqs);
    for (auto key : {"tokenizer_config_path", "tool_parser", "reasoning_parser"}) {
        std::string v = get<std::string>(d, key, "");
        if (v.empty()) continue;
        keep.push_back(v);
        const char * s = keep.back().c_str();
        if (std::string(key) == "tokenizer_config_path") p.tokenizer_config_path = s;
        else if (std::string(key) == "tool_parser") p.tool_parser = s;
        else p.reasoning_parser = s;
    }
    return p;
}

class Engine {
  public:
    Engine(const std::string & path, const py::dict & params) {
        check_abi();
        std::vector<std::string> keep;
        vllm_model_params p = model_params(path, params, keep);
        py::gil_scoped_release nogil;
        vllm_engine * e = nullptr;
        const vllm_status st = vllm_engine_load(&p, &e);
        if (st != VLLM_OK || e == nullptr) throw ModelLoadError(last_error(("cannot load " + path).c_str()));
        handle_ = std::make_shared<Handle>();
        handle_->engine = e;
    }

    std::shared_ptr<Request> submit(const std::string & prompt, const py::dict & sampling, bool stream) {
        auto h = live();
        auto req = std::make_shared<Request>(h, sampling_params(sampling), stream);
        py::gil_scoped_release nogil;
        req->start(prompt);
        return req;
    }

    py::dict complete(const std::string & prompt, const py::dict & sampling) {
        auto h = live();
        auto s = sampling_params(sampling);
        vllm_completion out{};
        vllm_status st;
        double t0 = now_s(), t1;
        {
            py::gil_scoped_release nogil;
            st = vllm_complete(h->engine, prompt.c_str(), &s->p, &out);
            t1 = now_s();
        }
        if (st != VLLM_OK) {
            const std::string msg = last_error("vllm_complete");
            if (st == VLLM_ERR_INVALID_ARGUMENT) throw std::invalid_argument(msg);
            throw std::runtime_error(msg);
        }
        py::dict d;
        d["text"] = py::bytes(out.text ? out.text : "").attr("decode")("utf-8", "replace");
        d["finish_reason"] = out.finish_reason ? out.finish_reason : "";
        d["prompt_tokens"] = out.prompt_tokens;
        d["completion_tokens"] = out.completion_tokens;
        d["seconds"] = t1 - t0;
        vllm_completion_free(&out);
        return d;
    }

    std::string chat(const std::string & request_json) {
        auto h = live();
        char * out = nullptr;
        vllm_status st;
        {
            py::gil_scoped_release nogil;
            st = vllm_chat(h->engine, request_json.c_str(), &out);
        }
        if (st != VLLM_OK) {
            const std::string msg = last_error("vllm_chat");
            if (st == VLLM_ERR_INVALID_ARGUMENT) throw std::invalid_argument(msg);
            throw std::runtime_error(msg);
        }
        std::string text = out ? out : "";
        vllm_string_free(out);
        return text;
    }

    void close() { handle_.reset(); }  // freed once the last request holding it is gone

  private:
    std::shared_ptr<Handle> live() {
        if (!handle_) throw EngineClosedError("the engine is closed");
        return handle_;
    }

    std::shared_ptr<Handle> handle_;
};

py::tuple event_tuple(const Event & e) {
    const char * kind = e.kind == Event::Delta ? "delta" : e.kind == Event::Done ? "done" : "error";
    return py::make_tuple(kind, py::bytes(e.text).attr("decode")("utf-8", "replace"), e.error_type);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "harness vllm.cpp binding (the C ABI of libvllm; requests batched by its own scheduler)";
    m.attr("PIN") = HARNESS_PIN;
    m.attr("VARIANT") = HARNESS_VARIANT;
    m.attr("ABI_FINGERPRINT") = HARNESS_ABI_FINGERPRINT;
    m.attr("COMPILED_ABI_VERSION") = static_cast<int>(VLLM_ABI_VERSION);
    m.def("library_abi_version", [] { return vllm_abi_version(); },
          "vllm_abi_version() of the libvllm actually loaded (the run-time half of the handshake).");
    m.def("library_version", [] { return std::string(vllm_version()); });
    m.def("check_abi", &check_abi, "Raise AbiMismatchError when the loaded libvllm's ABI is not the compiled one.");

    auto base = py::register_exception<std::runtime_error>(m, "CoreError", PyExc_RuntimeError);
    py::register_exception<AbiMismatchError>(m, "AbiMismatchError", base.ptr());
    py::register_exception<ModelLoadError>(m, "ModelLoadError", base.ptr());
    py::register_exception<EngineClosedError>(m, "EngineClosedError", base.ptr());

    py::class_<Request, std::shared_ptr<Request>>(m, "Request")
        .def("next", [](Request & r) -> py::object {
            std::optional<Event> e;
            {
                py::gil_scoped_release nogil;
                e = r.next();
            }
            if (!e) return py::none();
            return event_tuple(*e);
        }, "Block (GIL released) for the next event: ('delta'|'done'|'error', text, error_type), or None after the end.")
        .def("wait", [](Request & r) {
            Event e;
            {
                py::gil_scoped_release nogil;
                e = r.wait();
            }
            return event_tuple(e);
        }, "Block (GIL released) until the request ends: ('done'|'error', text, error_type).")
        .def("cancel", [](Request & r) {
            py::gil_scoped_release nogil;
            r.cancel();
        })
        .def_property_readonly("done", &Request::done)
        .def_property_readonly("finish_reason", &Request::finish_reason)
        .def("timings", &Request::timings)
        .def("text", [](Request & r) { return py::bytes(r.text()).attr("decode")("utf-8", "replace"); });

    py::class_<Engine>(m, "Engine")
        .def(py::init<const std::string &, const py::dict &>(), py::arg("model_path"), py::arg("params") = py::dict())
        .def("submit", &Engine::submit, py::arg("prompt"), py::arg("sampling") = py::dict(), py::arg("stream") = true,
             "Submit to the engine's scheduler (continuous batching across requests); returns a Request.")
        .def("complete", &Engine::complete, py::arg("prompt"), py::arg("sampling") = py::dict(),
             "One blocking completion (vllm_complete, GIL released): text, finish_reason and exact token counts.")
        .def("chat", &Engine::chat, py::arg("request_json"),
             "One OpenAI chat request (JSON) through the engine's template and parsers; the response JSON.")
        .def("close", &Engine::close);
}
