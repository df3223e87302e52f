// Memory before a model loads, the devices there are, and layers fitted to them (seed 003's
// llmodel_required_mem / llmodel_available_gpu_devices / gpu_init_gpu_device_by_*, seed 001's
// placement). Every figure is upstream's: common_get_device_memory_data loads the model's metadata
// with no_alloc and reserves a context (weights, KV cache and compute buffers per device and the
// host), and common_fit_params (llama.cpp's -ngl auto / --fit) chooses the layers. What is the
// harness's own is only the verdict: a device's need against its free memory (or a budget below
// it) less a margin, and the host's against the memory the caller says is available.
#include "engine.h"
#include "engine_internal.h"

#include "fit.h"
#include "ggml-backend.h"

#include <algorithm>
#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <mutex>
#include <sstream>

namespace harness {

namespace {

// common_fit_params and common_get_device_memory_data swap the global llama logger: one at a time.
std::mutex g_plan_mu;

constexpr int64_t MIB = 1024 * 1024;

// Bytes of the C heap in use (glibc); 0 where it cannot be read.
size_t heap_in_use() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    return mallinfo2().uordblks;
#else
    return 0;
#endif
}

std::string dev_type_name(ggml_backend_dev_t d) {
    switch (ggml_backend_dev_type(d)) {
        case GGML_BACKEND_DEVICE_TYPE_CPU: return "cpu";
        case GGML_BACKEND_DEVICE_TYPE_GPU: return "gpu";
        case GGML_BACKEND_DEVICE_TYPE_IGPU: return "igpu";
        case GGML_BACKEND_DEVICE_TYPE_ACCEL: return "accel";
        default: return "other";
    }
}

bool offloadable(ggml_backend_dev_t d) {
    auto t = ggml_backend_dev_type(d);
    return t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU;
}

std::string mib(int64_t bytes) {
    std::ostringstream o;
    o.setf(std::ios::fixed);
    o.precision(1);
    o << (double) bytes / (double) MIB << " MiB";
    return o.str();
}

// The devices the layers go to: params.device is "" (every GPU device: the engine's default), "none"
// (no offload), a device name (Vulkan0, CUDA0) or an index among the GPU devices.
std::vector<ggml_backend_dev_t> chosen_devices(const std::string & device) {
    std::vector<ggml_backend_dev_t> gpus;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        auto d = ggml_backend_dev_get(i);
        if (offloadable(d)) gpus.push_back(d);
    }
    auto names = [&] {
        std::string s;
        for (size_t i = 0; i < gpus.size(); ++i) {
            s += (s.empty() ? "" : ", ") + std::to_string(i) + ": " + ggml_backend_dev_name(gpus[i]);
        }
        return s.empty() ? std::string("none: this variant has no GPU device") : s;
    };
    if (device.empty()) return {};
    if (device == "none") return {nullptr};
    bool digits = std::all_of(device.begin(), device.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) {
        size_t i = (size_t) std::strtoul(device.c_str(), nullptr, 10);
        if (i >= gpus.size()) {
            throw std::invalid_argument("device " + device + ": there are " + std::to_string(gpus.size()) +
                                        " GPU devices (" + names() + ")");
        }
        return {gpus[i], nullptr};
    }
    for (auto d : gpus) {
        if (device == ggml_backend_dev_name(d)) return {d, nullptr};
    }
    if (auto d = ggml_backend_dev_by_name(device.c_str())) {
        if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_CPU) {
            throw std::invalid_argument("device " + device + " is the CPU: layers stay there without one (device: none)");
        }
    }
    throw std::invalid_argument("device " + device + " is not one of this variant's GPU devices (" + names() + ")");
}

}  // namespace

std::vector<DeviceInfo> list_devices(const std::string & backend_dir) {
    load_backends(backend_dir);
    std::vector<DeviceInfo> out;
    size_t gpu_index = 0;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        auto d = ggml_backend_dev_get(i);
        DeviceInfo info;
        info.name = ggml_backend_dev_name(d);
        info.description = ggml_backend_dev_description(d);
        info.platform = ggml_backend_reg_name(ggml_backend_dev_backend_reg(d));
        info.type = dev_type_name(d);
        size_t free = 0, total = 0;
        ggml_backend_dev_memory(d, &free, &total);
        info.free = free;
        info.total = total;
        info.gpu_index = offloadable(d) ? (int) gpu_index++ : -1;
        out.push_back(info);
    }
    return out;
}

MemoryPlan plan_memory(const std::string & model_path, const EngineParams & params) {
    load_backends(params.backend_dir);
    std::lock_guard<std::mutex> lk(g_plan_mu);
    QuietLog quiet;  // the dry runs below are not the load: a verbose log shows the load alone
    MemoryPlan plan;
    plan.devices = chosen_devices(params.device);
    int64_t n_vocab = 0, n_embd_out = 0;

    // The model's own context length and kind, as Engine::init reads them (the vocabulary only).
    {
        auto vp = llama_model_default_params();
        vp.vocab_only = true;
        vp.n_gpu_layers = 0;
        // The vocabulary (token texts, merges, maps) lives on the C heap, outside every buffer upstream's
        // breakdown counts: measured here, while the vocabulary-only load holds the structures the real
        // load builds.
        const size_t heap0 = heap_in_use();
        llama_model * m = llama_model_load_from_file(model_path.c_str(), vp);
        const size_t heap1 = heap_in_use();
        plan.vocab_bytes = heap1 > heap0 ? heap1 - heap0 : 0;
        if (!m) {
            std::string why = last_errors();
            throw ModelLoadError("failed to read model " + model_path + (why.empty() ? "" : ": " + why));
        }
        plan.embedding_only = is_embedding_model(m, params);
        plan.n_ctx = context_size(params, llama_model_n_ctx_train(m));
        n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
        n_embd_out = llama_model_n_embd_out(m);
        llama_model_free(m);
    }
    plan.cp = context_params(params, plan.n_ctx, plan.embedding_only);
    // The context's output buffer (host memory), which upstream's breakdown leaves out: sized as
    // llama_context::output_reserve sizes it (src/llama-context.cpp), logits of n_vocab floats (always)
    // and embeddings of n_embd_out floats (an embedding context) per output, for the most outputs a
    // batch of this engine asks: every token of a batch for embeddings, one per sequence (and its
    // drafts when speculating) for completions. (evaluate(), the agreement tooling's path, asks every
    // token of a batch too: it is not counted.)
    {
        const bool spec = params.spec_type != "none";
        // (a sequence holds at most n_ctx tokens, so a batch of embeddings outputs no more)
        int64_t outputs = plan.embedding_only ? (int64_t) std::min(plan.cp.n_batch, plan.n_ctx)
                                              : (int64_t) params.max_num_seqs * (spec ? params.n_draft + 1 : 1);
        outputs = std::max<int64_t>(outputs, (int64_t) plan.cp.n_seq_max);
        plan.n_outputs = (uint32_t) outputs;
        plan.output_bytes = (size_t) (n_vocab + (plan.cp.embeddings ? n_embd_out : 0)) * sizeof(float) * (size_t) outputs;
    }

    plan.mp = llama_model_default_params();
    plan.mp.n_gpu_layers = params.gpu_layers_auto ? llama_model_default_params().n_gpu_layers : params.n_gpu_layers;
    if (!plan.devices.empty()) plan.mp.devices = plan.devices.data();
    plan.tensor_split.assign(llama_max_devices(), 0.0f);
    plan.overrides.assign(llama_max_tensor_buft_overrides(), llama_model_tensor_buft_override{nullptr, nullptr});

    // common's breakdown leaves out the CPU's extra buffer types (weights repacked for the CPU's
    // kernels, AMX): estimate with the plain ones, which hold the same weights.
    llama_model_params est = plan.mp;
    est.use_extra_bufts = false;

    std::vector<ggml_backend_dev_t> devs;
    uint32_t n_layer = 0, n_ctx_train = 0, n_expert = 0;
    auto measure = [&](const llama_model_params & mp, const llama_context_params & cp) {
        try {
            auto rows = common_get_device_memory_data(model_path.c_str(), &mp, &cp, devs, n_layer, n_ctx_train,
                                                      n_expert, GGML_LOG_LEVEL_ERROR);
            return rows;
        } catch (const std::exception & e) {
            std::string why = last_errors();
            throw ModelLoadError("could not estimate the memory of " + model_path + ": " + e.what() +
                                 (why.empty() ? "" : " (" + why + ")"));
        }
    };
    auto rows = measure(est, plan.cp);

    // The margin left on each device, widened so that a budget below a device's free memory is
    // what the fit aims at: free - margins = min(free, budget) - margin.
    const int64_t margin = std::max<int64_t>(0, params.fit_margin_mib) * MIB;
    const int64_t budget = params.device_budget_mib > 0 ? params.device_budget_mib * MIB : -1;
    std::vector<size_t> margins(std::max<size_t>(llama_max_devices(), devs.size()), (size_t) margin);
    for (size_t i = 0; i < devs.size(); ++i) {
        int64_t free = rows[i].free;
        if (budget >= 0 && free > budget) margins[i] = (size_t) (margin + (free - budget));
    }

    if (params.gpu_layers_auto && !devs.empty()) {
        llama_model_params fit = plan.mp;
        auto status = common_fit_params(model_path.c_str(), &fit, &plan.cp, plan.tensor_split.data(),
                                        plan.overrides.data(), margins.data(), plan.cp.n_ctx, nullptr,
                                        GGML_LOG_LEVEL_ERROR);
        install_log();  // the harness's logger again, whatever the fit left behind
        if (status == COMMON_PARAMS_FIT_STATUS_ERROR) {
            std::string why = last_errors();
            throw ModelLoadError("could not fit " + model_path + " to its devices" + (why.empty() ? "" : ": " + why));
        }
        plan.fit_status = status == COMMON_PARAMS_FIT_STATUS_SUCCESS ? "fitted" : "failed";
        plan.mp = fit;
        est = fit;
        est.use_extra_bufts = false;
        rows = measure(est, plan.cp);
    } else if (params.gpu_layers_auto) {
        plan.fit_status = "no device";
        plan.mp.n_gpu_layers = 0;
    }
    // Weights repacked for the CPU's kernels live twice on the host: the repacked copy, and the
    // model file's pages the load read them from (mapped for the process's life). Upstream's
    // breakdown counts neither copy under an extra buffer type: the bytes that leave the host's
    // weights when the extra buffer types are on are that copy.
    size_t repacked = 0;
    if (plan.mp.use_extra_bufts) {
        llama_model_params with_extra = est;
        with_extra.use_extra_bufts = true;
        auto xrows = measure(with_extra, plan.cp);
        if (!xrows.empty() && xrows.back().model < rows.back().model) repacked = rows.back().model - xrows.back().model;
    }
    // Host memory is committed when it is first written, a device's when it is allocated: the host's
    // compute buffers count what the engine's own batches write, the graph upstream reserves for its
    // most outputs (llama_context_params.n_outputs_max), not a logit at every token of a batch, which
    // only evaluate() (the agreement tooling's path) asks. A device keeps the whole reserve.
    size_t host_compute = rows.back().compute;
    if (!plan.embedding_only && plan.n_outputs < plan.cp.n_batch) {
        llama_context_params few = plan.cp;
        few.n_outputs_max = plan.n_outputs;
        auto orows = measure(est, few);
        if (!orows.empty()) host_compute = std::min(host_compute, orows.back().compute);
    }
    plan.n_layer = n_layer;
    plan.n_gpu_layers = plan.mp.n_gpu_layers < 0 ? (int32_t) n_layer + 1
                        : std::min<int32_t>(plan.mp.n_gpu_layers, (int32_t) n_layer + 1);
    if (devs.empty()) plan.n_gpu_layers = 0;

    for (size_t i = 0; i < rows.size(); ++i) {
        MemoryRow r;
        r.host = i + 1 == rows.size();
        if (!r.host) {
            r.device = ggml_backend_dev_name(devs[i]);
            r.platform = ggml_backend_reg_name(ggml_backend_dev_backend_reg(devs[i]));
            // llama.cpp's margin is what a fit leaves free; layers the config names are checked
            // against the free memory itself (or the budget)
            r.margin = params.gpu_layers_auto ? margin : 0;
            r.budget = budget;
        } else {
            r.device = "host";
            r.platform = "CPU";
        }
        r.total = rows[i].total;
        r.free = rows[i].free;
        r.model = rows[i].model;
        if (r.host) {
            r.repacked = repacked;
            r.output = plan.output_bytes;
            r.vocab = plan.vocab_bytes;
        }
        r.context = rows[i].context;
        r.compute = r.host ? host_compute : rows[i].compute;
        plan.rows.push_back(r);
    }
    judge(plan, params);
    return plan;
}

void judge(MemoryPlan & plan, const EngineParams & params) {
    plan.fits = true;
    plan.verdict.clear();
    for (auto & r : plan.rows) {
        int64_t need = (int64_t) (r.model + r.repacked + r.context + r.compute + r.output + r.vocab);
        if (r.host) {
            // ggml's CPU device reports all of memory as free: the caller says what is available.
            r.available = params.host_available_bytes > 0 ? params.host_available_bytes : -1;
        } else if (r.free == 0 && r.total == 0) {
            r.available = -1;  // a device that reports no memory: not judged (upstream's fit skips it too)
        } else {
            int64_t cap = r.budget >= 0 ? std::min<int64_t>(r.free, r.budget) : r.free;
            r.available = std::max<int64_t>(0, cap - r.margin);
        }
        r.fits = r.available < 0 || need <= r.available;
        if (!r.fits) {
            plan.fits = false;
            std::string cap = r.host ? mib(r.available) + " available"
                                     : mib(r.free) + " free" + (r.budget >= 0 ? ", budget " + mib(r.budget) : "") +
                                           ", margin " + mib(r.margin) + ": " + mib(r.available) + " usable";
            plan.verdict += (plan.verdict.empty() ? "" : "; ") + r.device + " needs " + mib(need) + " (weights " +
                            mib((int64_t) r.model) +
                            (r.repacked ? ", repacked weights " + mib((int64_t) r.repacked) : std::string()) + ", KV cache " + mib((int64_t) r.context) + ", compute " +
                            mib((int64_t) r.compute) +
                            (r.output ? ", outputs " + mib((int64_t) r.output) : std::string()) +
                            (r.vocab ? ", vocabulary " + mib((int64_t) r.vocab) : std::string()) + ") but has " + cap;
        }
    }
    if (params.gpu_layers_auto && !plan.devices.empty() && plan.devices[0] != nullptr && plan.n_gpu_layers == 0) {
        plan.fits = false;
        plan.verdict += std::string(plan.verdict.empty() ? "" : "; ") + "not one layer fits on " +
                        ggml_backend_dev_name(plan.devices[0]) + " (n_ctx " + std::to_string(plan.n_ctx) + ")";
    }
    if (!plan.fits) {
        plan.verdict += std::string("; ") + std::to_string(plan.n_gpu_layers) + " of " + std::to_string(plan.n_layer + 1) +
                        " layers offloaded at n_ctx " + std::to_string(plan.n_ctx);
    }
}

}  // namespace harness
