// Video generation over stable-diffusion.cpp's C API: one loaded checkpoint set,
// renders into a directory of binary PPM frames. No Python in here.
#pragma once

#include "stable-diffusion.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace harness {

struct ContextParams {
    std::string diffusion_model;  // the DiT (parameters.model)
    std::string vae;
    std::string text_encoder;     // umt5 for Wan; empty renders unconditioned
    std::string clip_vision;
    int n_threads = 0;            // 0: physical cores
    bool vae_decode_only = false; // keyframes are VAE-encoded for I2V/FLF2V checkpoints
    bool flash_attn = false;
    bool offload_to_cpu = false;
    bool mmap = true;
    std::string weight_type;      // empty: as stored
};

struct VideoParams {
    std::string prompt;
    std::string negative_prompt;
    int width = 0;
    int height = 0;
    int frames = 0;               // exactly this many frames are written
    int steps = 20;
    int64_t seed = 42;
    float cfg_scale = -1.f;       // < 0: the engine's default
    float flow_shift = -1.f;      // < 0: the engine's default
    std::string sample_method;    // empty: the engine's default for the model
    std::string scheduler;
    std::string init_image;       // binary PPM (P6) at width x height: first frame
    std::string end_image;        // binary PPM (P6) at width x height: last frame
    std::string out_dir;          // frames are written as frame_00000.ppm ...
};

struct VideoResult {
    int frames_written = 0;
    int frames_rendered = 0;
    int width = 0;
    int height = 0;
    double seconds = 0;
    std::vector<std::string> paths;
};

// Thrown out of the engine's progress callback to stop a render between steps.
struct Cancelled : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// step, total; throw Cancelled (or anything) to stop. Called on the rendering thread.
using StepCallback = std::function<void(int, int)>;

// Frames the Wan VAE produces for a request: its temporal packing is 4n+1.
int wan_render_frames(int frames);

// Read a binary PPM (P6, maxval 255) into RGB24; throws with the reason.
std::vector<uint8_t> read_ppm(const std::string & path, int & width, int & height);
void write_ppm(const std::string & path, const uint8_t * rgb, int width, int height);

// Last engine log lines (warnings and errors), for error messages.
std::string recent_log();
void set_verbose(bool verbose);
// Load ggml backend plugins from a directory (GGML_BACKEND_DL builds); returns how many devices.
size_t load_backends(const std::string & dir);

class VideoContext {
  public:
    explicit VideoContext(const ContextParams & params);
    ~VideoContext();
    VideoContext(const VideoContext &) = delete;
    VideoContext & operator=(const VideoContext &) = delete;

    VideoResult generate(const VideoParams & params, const StepCallback & on_step);
    bool usable() const { return ctx_ != nullptr; }

  private:
    ContextParams params_;
    sd_ctx_t * ctx_ = nullptr;
};

}  // namespace harness
