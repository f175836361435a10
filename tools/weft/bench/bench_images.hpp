// Images arriving in `weft bench frame` (--image-every): a generated
// projector for the bench's model (gemma3: non-causal images; qwen2vl:
// causal M-RoPE images, on the model converted to the qwen2vl
// architecture), and conversations that show an NPC a picture every N
// frames and ask for a short reply, tracked as a player sees them (frames
// from arrival to the reply's first token).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "weft/make_mmproj.hpp"
#include "weft/weft.hpp"

namespace weft_cli::bench {

// A projector of `kind` for the model at `path` (weft::make_mmproj, seed
// 1), in a private temp directory removed with the object, and loaded.
// qwen2vl: `model` becomes the model converted to the qwen2vl architecture
// (weft::make_qwen2vl_text_model), which every row then runs on.
struct BenchProjector {
  std::string dir;
  weft::Projector projector;
  BenchProjector(weft::Model &model, const std::string &path, int n_threads, weft::MmprojKind kind);
  ~BenchProjector();
  BenchProjector(const BenchProjector &) = delete;
  BenchProjector &operator=(const BenchProjector &) = delete;
};

class ImageArrivals {
 public:
  // Every `every` frames, a conversation of `text` random tokens, a `side` x
  // `side` random picture, and a 8-token reply.
  // in_frame: the executor runs ImageEncoding::caller and the frame loop
  // calls encode_in_frame() after each step (the game places the encodes).
  ImageArrivals(weft::Projector projector, unsigned every, unsigned side, unsigned text, bool in_frame = false)
      : projector_(std::move(projector)), every_(every), side_(side), text_(text), in_frame_(in_frame) {}

  // Before frame f's step: maybe one arrives. Projector::prepare (which a
  // game may run on any thread) and prompt_image(prepared) are timed apart.
  void before_step(weft::Executor &ex, unsigned f, std::mt19937_64 &rng, std::int32_t n_vocab);
  // Whether a picture shown is still being encoded (the encoder thread
  // shares the cores with the step): asked before each step; never in
  // frame mode (nothing encodes during a step).
  bool encoding() const;
  // After frame f's step, which took `ms` (with encoding() before it).
  void after_step(unsigned f, double ms, bool encoding, double budget_ms);
  // In frame mode, after the step: encode one queued picture on this
  // thread (Executor::encode_images), timed as part of the frame.
  void encode_in_frame(weft::Executor &ex);
  // The run's numbers, with the executor's image stats.
  nlohmann::json summary(const weft::ExecutorStats &st) const;

 private:
  struct Arrival {
    weft::Conversation conv;
    weft::Generation gen;
    unsigned arrived = 0;
  };
  weft::Projector projector_;
  unsigned every_, side_, text_;
  std::vector<Arrival> live_;
  std::vector<double> first_token_frames_, prepare_ms_, prompt_call_ms_;
  // Step times apart: while the encoder ran beside the step, and not.
  std::vector<double> steps_encoding_ms_, steps_quiet_ms_;
  unsigned over_encoding_ = 0, over_quiet_ = 0;  // steps over 1.1 x the budget
  unsigned arrived_ = 0, without_token_ = 0;
  bool in_frame_ = false;
  std::vector<double> frame_encode_ms_;  // encode_in_frame() calls that encoded
};

}  // namespace weft_cli::bench
