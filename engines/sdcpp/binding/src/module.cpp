// pybind11 bindings: stable-diffusion.cpp video generation as Python sees it.
// Renders run with the GIL released; it is taken back only to call the step callback.
#include "video.h"

#include <pybind11/pybind11.h>

#include "harness_pydict.h"
#include <pybind11/stl.h>

#include <algorithm>

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

namespace {

using harness_py::check_keys;
using harness_py::get;

ContextParams context_params(const py::dict & d) {
    check_keys(d, {"diffusion_model", "vae", "text_encoder", "clip_vision", "n_threads", "vae_decode_only",
                   "flash_attn", "offload_to_cpu", "mmap", "weight_type"},
               "context parameter");
    ContextParams p;
    p.diffusion_model = get<std::string>(d, "diffusion_model", "");
    p.vae = get<std::string>(d, "vae", "");
    p.text_encoder = get<std::string>(d, "text_encoder", "");
    p.clip_vision = get<std::string>(d, "clip_vision", "");
    p.n_threads = get<int>(d, "n_threads", 0);
    p.vae_decode_only = get<bool>(d, "vae_decode_only", false);
    p.flash_attn = get<bool>(d, "flash_attn", false);
    p.offload_to_cpu = get<bool>(d, "offload_to_cpu", false);
    p.mmap = get<bool>(d, "mmap", true);
    p.weight_type = get<std::string>(d, "weight_type", "");
    return p;
}

// The Python exception raised by the step callback, carried across the engine.
struct PyStepError : Cancelled {
    py::error_already_set error;
    explicit PyStepError(py::error_already_set && e) : Cancelled("step callback raised"), error(std::move(e)) {}
};

py::dict generate(VideoContext & ctx, const std::string & out_dir, const std::string & prompt, int width, int height,
                  int frames, int steps, int64_t seed, const std::string & negative_prompt, float cfg_scale,
                  float flow_shift, const std::string & sample_method, const std::string & scheduler,
                  const std::optional<std::string> & init_image, const std::optional<std::string> & end_image,
                  const py::object & progress) {
    VideoParams vp;
    vp.prompt = prompt;
    vp.negative_prompt = negative_prompt;
    vp.width = width;
    vp.height = height;
    vp.frames = frames;
    vp.steps = steps;
    vp.seed = seed;
    vp.cfg_scale = cfg_scale;
    vp.flow_shift = flow_shift;
    vp.sample_method = sample_method;
    vp.scheduler = scheduler;
    vp.init_image = init_image.value_or("");
    vp.end_image = end_image.value_or("");
    vp.out_dir = out_dir;
    StepCallback on_step;
    if (!progress.is_none()) {
        on_step = [&progress](int step, int total) {
            py::gil_scoped_acquire gil;
            try {
                progress(step, total);
            } catch (py::error_already_set & e) {
                throw PyStepError(std::move(e));
            }
        };
    }
    VideoResult r;
    try {
        py::gil_scoped_release nogil;
        r = ctx.generate(vp, on_step);
    } catch (PyStepError & e) {
        e.error.restore();  // the callback's own exception (e.g. the caller's cancel error)
        throw py::error_already_set();
    }
    py::dict out;
    out["frames"] = r.frames_written;
    out["frames_rendered"] = r.frames_rendered;
    out["width"] = r.width;
    out["height"] = r.height;
    out["seconds"] = r.seconds;
    out["paths"] = r.paths;
    out["out_dir"] = out_dir;
    return out;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "stable-diffusion.cpp video binding (harness)";
    m.attr("PIN") = HARNESS_PIN;
    m.attr("VARIANT") = HARNESS_VARIANT;
    m.attr("ABI_FINGERPRINT") = HARNESS_ABI_FINGERPRINT;
    m.def("library_version", [] { return std::string(sd_version()); });
    m.def("library_commit", [] { return std::string(sd_commit()); });
    m.def("system_info", [] { return std::string(sd_get_system_info()); });
    m.def("load_backends", &load_backends, py::arg("directory"),
          "Load ggml backend plugins (libggml-cpu-<level>.so, ...) from a directory; returns the device count.");
    m.def("set_verbose", &set_verbose, py::arg("verbose"), "Echo the engine's log to stderr.");
    m.def("wan_render_frames", &wan_render_frames, py::arg("frames"),
          "Frames the engine renders for a request (the next 4n+1); the first `frames` are written.");

    py::register_exception<Cancelled>(m, "Cancelled");

    py::class_<VideoContext>(m, "VideoContext")
        .def(py::init([](const py::dict & params) {
                 auto p = context_params(params);
                 py::gil_scoped_release nogil;
                 return std::make_unique<VideoContext>(p);
             }),
             py::arg("params"),
             "Load a checkpoint set: diffusion_model (required), vae, text_encoder (umt5), clip_vision, n_threads, "
             "vae_decode_only, flash_attn, offload_to_cpu, mmap, weight_type.")
        .def_property_readonly("usable", &VideoContext::usable)
        .def("generate_video", &generate, py::arg("out_dir"), py::arg("prompt"), py::arg("width"), py::arg("height"),
             py::arg("frames"), py::arg("steps") = 20, py::arg("seed") = 42, py::arg("negative_prompt") = "",
             py::arg("cfg_scale") = -1.f, py::arg("flow_shift") = -1.f, py::arg("sample_method") = "",
             py::arg("scheduler") = "", py::arg("init_image") = py::none(), py::arg("end_image") = py::none(),
             py::arg("progress") = py::none(),
             "Render frames into out_dir as frame_00000.ppm ... (binary PPM, width x height). init_image and "
             "end_image are P6 PPMs at the canvas (first/last-frame conditioning); without them the render is "
             "text-only. progress(step, total) is called after every step with the GIL held; an exception it "
             "raises stops the render and is re-raised here.");

    m.def(
        "generate_video",
        [](const py::dict & params, const std::string & out_dir, const std::string & prompt, int width, int height,
           int frames, int steps, int64_t seed, const std::optional<std::string> & init_image,
           const std::optional<std::string> & end_image, const py::object & progress) {
            auto p = context_params(params);
            std::unique_ptr<VideoContext> ctx;
            {
                py::gil_scoped_release nogil;
                ctx = std::make_unique<VideoContext>(p);
            }
            return generate(*ctx, out_dir, prompt, width, height, frames, steps, seed, "", -1.f, -1.f, "", "",
                            init_image, end_image, progress);
        },
        py::arg("params"), py::arg("out_dir"), py::arg("prompt"), py::arg("width"), py::arg("height"),
        py::arg("frames"), py::arg("steps") = 20, py::arg("seed") = 42, py::arg("init_image") = py::none(),
        py::arg("end_image") = py::none(), py::arg("progress") = py::none(),
        "One-shot: load the checkpoint set, render, free it (VideoContext keeps it loaded).");
}
