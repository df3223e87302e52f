// Video generation over stable-diffusion.cpp's C API (see video.h).
#include "video.h"

#include "ggml-backend.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <sstream>

namespace harness {

namespace {

std::mutex g_log_mutex;
std::deque<std::string> g_log;  // warnings and errors of the current render
bool g_verbose = false;
constexpr size_t kLogLines = 40;

void on_log(enum sd_log_level_t level, const char * text, void *) {
    if (text == nullptr) {
        return;
    }
    if (g_verbose) {
        std::fputs(text, stderr);
    }
    if (level < SD_LOG_WARN) {
        return;
    }
    std::lock_guard<std::mutex> lock(g_log_mutex);
    std::string line(text);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
        line.pop_back();
    }
    g_log.push_back(line);
    if (g_log.size() > kLogLines) {
        g_log.pop_front();
    }
}

// Without a callback the engine prints progress bars to stdout (tensor loading),
// which would corrupt `--json` output.
void quiet_progress(int, int, float, void *) {}

void clear_log() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log.clear();
}

// sd_set_progress_callback is process-wide: one render at a time owns it.
std::mutex g_render_mutex;

struct StepState {
    const StepCallback * on_step = nullptr;
};

void on_progress(int step, int steps, float, void * data) {
    auto * state = static_cast<StepState *>(data);
    // step 0 announces the start; loading and tiling report through here too,
    // but the callback is only installed while sampling runs (see generate).
    if (state == nullptr || state->on_step == nullptr || !*state->on_step || step <= 0 || step > steps) {
        return;
    }
    (*state->on_step)(step, steps);  // may throw: unwinds out of generate_video
}

struct Keyframe {
    std::vector<uint8_t> rgb;
    sd_image_t image{0, 0, 3, nullptr};
};

void load_keyframe(const std::string & path, int width, int height, const char * what, Keyframe & out) {
    if (path.empty()) {
        return;
    }
    int w = 0, h = 0;
    out.rgb = read_ppm(path, w, h);
    if (w != width || h != height) {
        std::ostringstream msg;
        msg << what << " " << path << " is " << w << "x" << h << ", expected the canvas " << width << "x" << height;
        throw std::invalid_argument(msg.str());
    }
    out.image = sd_image_t{static_cast<uint32_t>(w), static_cast<uint32_t>(h), 3, out.rgb.data()};
}

struct Frames {
    sd_image_t * images = nullptr;
    int count = 0;
    ~Frames() {
        if (images == nullptr) {
            return;
        }
        for (int i = 0; i < count; i++) {
            std::free(images[i].data);
        }
        std::free(images);
    }
};

}  // namespace

int wan_render_frames(int frames) {
    if (frames < 1) {
        throw std::invalid_argument("frames must be >= 1");
    }
    return (frames - 1 + 3) / 4 * 4 + 1;
}

std::vector<uint8_t> read_ppm(const std::string & path, int & width, int & height) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        throw std::invalid_argument("cannot open keyframe " + path);
    }
    std::string magic;
    f >> magic;
    auto next_int = [&](const char * field) {
        // header fields are separated by whitespace; '#' starts a comment line
        f >> std::ws;
        while (f.peek() == '#') {
            std::string skip;
            std::getline(f, skip);
            f >> std::ws;
        }
        int v = -1;
        if (!(f >> v) || v <= 0) {
            throw std::invalid_argument(path + ": bad PPM " + field);
        }
        return v;
    };
    if (magic != "P6") {
        throw std::invalid_argument(path + ": not a binary PPM (P6), found magic '" + magic + "'");
    }
    width = next_int("width");
    height = next_int("height");
    int maxval = next_int("maxval");
    if (maxval != 255) {
        throw std::invalid_argument(path + ": PPM maxval " + std::to_string(maxval) + ", expected 255");
    }
    f.get();  // the single whitespace byte before the raster
    std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
    if (!f.read(reinterpret_cast<char *>(rgb.data()), static_cast<std::streamsize>(rgb.size()))) {
        throw std::invalid_argument(path + ": PPM raster is shorter than " + std::to_string(width) + "x" +
                                    std::to_string(height) + "x3 bytes");
    }
    return rgb;
}

void write_ppm(const std::string & path, const uint8_t * rgb, int width, int height) {
    std::ofstream f(path, std::ios::binary);
    f << "P6\n" << width << " " << height << "\n255\n";
    f.write(reinterpret_cast<const char *>(rgb), static_cast<std::streamsize>(width) * height * 3);
    if (!f) {
        throw std::runtime_error("cannot write frame " + path);
    }
}

std::string recent_log() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    std::string out;
    for (const auto & line : g_log) {
        out += line + "\n";
    }
    return out;
}

void set_verbose(bool verbose) {
    g_verbose = verbose;
}

size_t load_backends(const std::string & dir) {
    // With GGML_BACKEND_DL the CPU backends are plugins beside libggml; ggml's own
    // search looks beside the executable (python) and in the cwd only.
    if (!dir.empty()) {
        ggml_backend_load_all_from_path(dir.c_str());
    }
    return ggml_backend_dev_count();
}

VideoContext::VideoContext(const ContextParams & params) : params_(params) {
    sd_set_log_callback(on_log, nullptr);
    if (params.diffusion_model.empty()) {
        throw std::invalid_argument("diffusion_model (the DiT checkpoint) is required");
    }
    sd_ctx_params_t p;
    sd_ctx_params_init(&p);
    p.diffusion_model_path = params_.diffusion_model.c_str();
    p.vae_path = params_.vae.c_str();
    p.t5xxl_path = params_.text_encoder.c_str();
    p.clip_vision_path = params_.clip_vision.c_str();
    p.vae_decode_only = params_.vae_decode_only;
    p.free_params_immediately = false;
    p.n_threads = params_.n_threads > 0 ? params_.n_threads : sd_get_num_physical_cores();
    p.diffusion_flash_attn = params_.flash_attn;
    p.offload_params_to_cpu = params_.offload_to_cpu;
    p.enable_mmap = params_.mmap;
    if (!params_.weight_type.empty()) {
        p.wtype = str_to_sd_type(params_.weight_type.c_str());
        if (p.wtype == SD_TYPE_COUNT) {
            throw std::invalid_argument("unknown weight_type '" + params_.weight_type + "' (e.g. f16, q8_0)");
        }
    }
    std::lock_guard<std::mutex> lock(g_render_mutex);
    clear_log();
    sd_set_progress_callback(quiet_progress, nullptr);
    ctx_ = new_sd_ctx(&p);
    if (ctx_ == nullptr) {
        throw std::runtime_error("stable-diffusion.cpp could not load the checkpoint set (DiT " +
                                 params_.diffusion_model + ", VAE " + params_.vae + "):\n" + recent_log());
    }
    if (!sd_ctx_supports_video_generation(ctx_)) {
        free_sd_ctx(ctx_);
        ctx_ = nullptr;
        throw std::invalid_argument(params_.diffusion_model + " is not a video model for stable-diffusion.cpp");
    }
}

VideoContext::~VideoContext() {
    if (ctx_ != nullptr) {
        free_sd_ctx(ctx_);
    }
}

VideoResult VideoContext::generate(const VideoParams & vp, const StepCallback & on_step) {
    if (ctx_ == nullptr) {
        throw std::runtime_error("this context was dropped after a cancelled render; create a new one");
    }
    if (vp.width <= 0 || vp.height <= 0 || vp.width % 16 != 0 || vp.height % 16 != 0) {
        throw std::invalid_argument("width and height must be positive multiples of 16, got " +
                                    std::to_string(vp.width) + "x" + std::to_string(vp.height));
    }
    if (vp.steps < 1) {
        throw std::invalid_argument("steps must be >= 1");
    }
    if (vp.out_dir.empty()) {
        throw std::invalid_argument("out_dir is required");
    }
    Keyframe first, last;
    load_keyframe(vp.init_image, vp.width, vp.height, "init_image", first);
    load_keyframe(vp.end_image, vp.width, vp.height, "end_image", last);

    sd_vid_gen_params_t g;
    sd_vid_gen_params_init(&g);
    g.prompt = vp.prompt.c_str();
    g.negative_prompt = vp.negative_prompt.c_str();
    g.width = vp.width;
    g.height = vp.height;
    g.video_frames = wan_render_frames(vp.frames);
    g.seed = vp.seed;
    g.init_image = first.image;
    g.end_image = last.image;
    g.sample_params.sample_steps = vp.steps;
    if (vp.cfg_scale >= 0.f) {
        g.sample_params.guidance.txt_cfg = vp.cfg_scale;
    }
    if (vp.flow_shift >= 0.f) {
        g.sample_params.flow_shift = vp.flow_shift;
    }
    if (!vp.sample_method.empty()) {
        g.sample_params.sample_method = str_to_sample_method(vp.sample_method.c_str());
        if (g.sample_params.sample_method == SAMPLE_METHOD_COUNT) {
            throw std::invalid_argument("unknown sample_method '" + vp.sample_method + "'");
        }
    }
    if (!vp.scheduler.empty()) {
        g.sample_params.scheduler = str_to_scheduler(vp.scheduler.c_str());
        if (g.sample_params.scheduler == SCHEDULER_COUNT) {
            throw std::invalid_argument("unknown scheduler '" + vp.scheduler + "'");
        }
    }

    std::lock_guard<std::mutex> lock(g_render_mutex);
    clear_log();
    StepState state{&on_step};
    auto t0 = std::chrono::steady_clock::now();
    Frames out;
    sd_set_progress_callback(on_progress, &state);
    try {
        out.images = ::generate_video(ctx_, &g, &out.count);
    } catch (...) {
        sd_set_progress_callback(quiet_progress, nullptr);
        // Unwound mid-sample: the context's compute state is not trusted again.
        free_sd_ctx(ctx_);
        ctx_ = nullptr;
        throw;
    }
    sd_set_progress_callback(quiet_progress, nullptr);
    if (out.images == nullptr || out.count <= 0) {
        throw std::runtime_error("stable-diffusion.cpp rendered no frames:\n" + recent_log());
    }
    if (out.count < vp.frames) {
        throw std::runtime_error("stable-diffusion.cpp rendered " + std::to_string(out.count) + " frames, " +
                                 std::to_string(vp.frames) + " requested");
    }
    VideoResult r;
    r.frames_rendered = out.count;
    r.width = vp.width;
    r.height = vp.height;
    // The VAE packs 4n+1 frames; we rendered the next such count and keep the first ones.
    for (int i = 0; i < vp.frames; i++) {
        const sd_image_t & img = out.images[i];
        if (img.channel != 3 || static_cast<int>(img.width) != vp.width || static_cast<int>(img.height) != vp.height) {
            throw std::runtime_error("frame " + std::to_string(i) + " is " + std::to_string(img.width) + "x" +
                                     std::to_string(img.height) + "x" + std::to_string(img.channel) +
                                     ", expected RGB at the canvas");
        }
        char name[32];
        std::snprintf(name, sizeof(name), "frame_%05d.ppm", i);
        std::string path = vp.out_dir + "/" + name;
        write_ppm(path, img.data, vp.width, vp.height);
        r.paths.push_back(path);
    }
    r.frames_written = vp.frames;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace harness
