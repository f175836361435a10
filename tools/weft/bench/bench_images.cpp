#include "bench_images.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include <unistd.h>

#include "bench_common.hpp"
#include "weft/make_mmproj.hpp"

namespace weft_cli::bench {

BenchProjector::BenchProjector(weft::Model &model, const std::string &path, int n_threads, weft::MmprojKind kind) {
  namespace fs = std::filesystem;
  dir = (fs::temp_directory_path() / fmt::format("weft-bench-mmproj-{}", ::getpid())).string();
  fs::create_directories(dir);
  const std::string out = (fs::path(dir) / "mmproj.gguf").string();
  std::string base = path;
  if (kind == weft::MmprojKind::qwen2vl) {
    base = (fs::path(dir) / "model-qwen2vl.gguf").string();
    weft::make_qwen2vl_text_model(path, base);
    model = weft::Model::load({.path = base});
  }
  weft::make_mmproj({.base = base, .out = out, .kind = kind, .seed = 1});
  projector = weft::Projector::load(model, {.path = out, .n_threads = n_threads});
}

BenchProjector::~BenchProjector() {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

void ImageArrivals::before_step(weft::Executor &ex, unsigned f, std::mt19937_64 &rng, std::int32_t n_vocab) {
  if (every_ == 0 || f % every_ != 0) return;
  std::vector<std::uint8_t> px(std::size_t(side_) * side_ * 3);
  for (auto &p : px) p = static_cast<std::uint8_t>(rng() >> 56);
  auto c = ex.create();
  c.prompt(random_tokens(rng, text_, n_vocab));
  // What a game thread pays: prepare (could run on any thread), then queue.
  const auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  const auto t0 = std::chrono::steady_clock::now();
  const auto prepared = projector_.prepare(side_, side_, px);
  prepare_ms_.push_back(ms_since(t0));
  const auto t1 = std::chrono::steady_clock::now();
  c.prompt_image(prepared);
  prompt_call_ms_.push_back(ms_since(t1));
  c.prompt(random_tokens(rng, 4, n_vocab));
  auto g = c.generate({.max_tokens = 8});
  live_.push_back({std::move(c), std::move(g), f});
  ++arrived_;
}

bool ImageArrivals::encoding() const {
  if (in_frame_) return false;
  for (const auto &a : live_) {
    for (const auto &sp : a.conv.images()) {
      if (!sp.encoded) return true;
    }
  }
  return false;
}

void ImageArrivals::after_step(unsigned f, double ms, bool encoding, double budget_ms) {
  (encoding ? steps_encoding_ms_ : steps_quiet_ms_).push_back(ms);
  if (budget_ms > 0 && ms > 1.1 * budget_ms) ++(encoding ? over_encoding_ : over_quiet_);
  std::erase_if(live_, [&](Arrival &a) {
    if (a.gen.n_tokens() == 0 && !a.gen.done()) return false;
    if (a.gen.n_tokens() > 0) {
      first_token_frames_.push_back(static_cast<double>(f + 1 - a.arrived));
    } else {
      ++without_token_;
    }
    a.conv.dispose();  // its reply's first token is what was measured
    return true;
  });
}

void ImageArrivals::encode_in_frame(weft::Executor &ex) {
  if (!in_frame_) return;
  const auto r = ex.encode_images(1);
  if (r.images > 0) frame_encode_ms_.push_back(r.seconds * 1e3);
}

nlohmann::json ImageArrivals::summary(const weft::ExecutorStats &st) const {
  const auto mean = [](double total, std::uint64_t n) { return n > 0 ? total / static_cast<double>(n) : 0.0; };
  nlohmann::json j{{"images_arrived", arrived_},
                   {"images_encoded", st.images_encoded},
                   {"image_encode_ms_mean", mean(st.image_encode_ms, st.images_encoded)},
                   {"image_batches", st.image_batches},
                   {"image_batch_decode_ms_mean", mean(st.image_decode_ms, st.image_batches)},
                   {"prepare_ms_p50", percentile(prepare_ms_, 50)},
                   {"prepare_ms_max", percentile(prepare_ms_, 100)},
                   {"prompt_image_call_ms_p50", percentile(prompt_call_ms_, 50)},
                   {"prompt_image_call_ms_max", percentile(prompt_call_ms_, 100)},
                   {"image_first_token_frames_median", percentile(first_token_frames_, 50)},
                   {"image_first_token_frames_max", percentile(first_token_frames_, 100)},
                   {"images_without_token", without_token_ + live_.size()},
                   {"steps_encoding", steps_encoding_ms_.size()},
                   {"steps_encoding_p99_ms", percentile(steps_encoding_ms_, 99)},
                   {"steps_encoding_over_budget", over_encoding_},
                   {"steps_quiet_p99_ms", percentile(steps_quiet_ms_, 99)},
                   {"steps_quiet_max_ms", percentile(steps_quiet_ms_, 100)},
                   {"steps_quiet_over_budget", over_quiet_},
                   {"encode_placement", in_frame_ ? "frame" : "thread"},
                   {"frame_encodes", frame_encode_ms_.size()},
                   {"frame_encode_ms_p50", percentile(frame_encode_ms_, 50)},
                   {"frame_encode_ms_max", percentile(frame_encode_ms_, 100)}};
  return j;
}

}  // namespace weft_cli::bench
