// Shared by the image tests: the gemma3 projector for tiny (ordinary
// positions) and the qwen2vl one for tiny made a qwen2vl model (M-RoPE),
// images as RGB and PNG, mtmd's own tokenization of an image, and the
// reference decode on raw llama.cpp + mtmd (mtmd_helper_eval_chunk_single)
// of one conversation. Every helper takes the fixture it works with; the
// default is gemma3's.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "reference.hpp"
#include "weft/weft.hpp"

#ifdef WEFT_HAVE_MTMD
#include <mtmd.h>

namespace img_test {

using Clock = std::chrono::steady_clock;

struct Rgb {
  std::uint32_t w = 0, h = 0;
  std::vector<std::uint8_t> px;
};

Rgb random_image(std::mt19937 &rng, std::uint32_t w, std::uint32_t h);

// A projector and its text model, loaded once for weft and once for the
// reference's own mtmd context.
enum class Kind { gemma3, qwen2vl, qwen2a };  // qwen2a: audio only, on tiny
struct Fixture {
  std::string path;
  weft::Model model;  // tiny, or tiny as a qwen2vl model
  weft::Projector projector;
  mtmd_context *mctx = nullptr;  // never freed: shared by the binary's tests
  // Room for a conversation and its neighbours (audio: a clip is hundreds
  // of tokens), in weft's executors and the reference's context.
  std::uint32_t n_ctx = 1024;
};
const Fixture &fixture(Kind kind = Kind::gemma3);

struct Chunks {
  mtmd_input_chunks *chunks = mtmd_input_chunks_init();
  ~Chunks() { mtmd_input_chunks_free(chunks); }
  Chunks() = default;
  Chunks(const Chunks &) = delete;
  Chunks &operator=(const Chunks &) = delete;
};

// The image as mtmd tokenizes it alone (as weft does): the text around it
// and the image chunk.
struct ImageParts {
  std::vector<weft::Token> before, after;
  std::shared_ptr<Chunks> chunks;
  const mtmd_input_chunk *image = nullptr;
};
ImageParts tokenize(const Rgb &img, const Fixture &f = fixture());
// A clip of mono samples as mtmd tokenizes it alone (`image` is then the
// audio chunk).
ImageParts tokenize_audio(const std::vector<float> &samples, const Fixture &f);
// `seconds` of a seeded random signal at f's sample rate (a few tones and
// noise, within [-1, 1]).
std::vector<float> random_clip(std::mt19937 &rng, const Fixture &f, double seconds);

// A conversation's input, part by part: text or an image chunk.
using Part = std::variant<std::vector<weft::Token>, const mtmd_input_chunk *>;

// Raw llama.cpp + mtmd, one sequence alone: text in chunks of n_batch and
// each image through mtmd_helper_eval_chunk_single, positions continuing as
// the helper's. With `neighbours`, they are decoded first into sequences 1..
// of the same unified cache, and `rng` splits the text into random chunk
// widths: the batch-shape noise raw llama.cpp itself shows for it.
std::vector<float> reference(const std::vector<Part> &parts, int n_batch = 64,
                             const std::vector<std::vector<weft::Token>> &neighbours = {},
                             std::mt19937 *rng = nullptr, const Fixture &f = fixture());

// A PNG of `img`: stored (uncompressed) deflate blocks, so no zlib needed.
std::vector<std::uint8_t> png_of(const Rgb &img);

std::vector<weft::Token> cat(std::initializer_list<std::vector<weft::Token>> parts);

weft::ExecutorParams params(std::uint32_t n_batch = 64, const Fixture &f = fixture());

// Queues text `a`, the image, then text `b` on c.
void prompt_scene(weft::Conversation &c, const std::vector<weft::Token> &a, const Rgb &img,
                  const std::vector<weft::Token> &b);

// Steps with random budgets until every one has its logits (an image waits
// for the encoder thread meanwhile: idle steps then); bounded.
void run_until_logits(weft::Executor &ex, const std::vector<weft::Conversation> &convs, std::mt19937 &rng,
                      std::uint32_t max_budget);

// Each place a parked conversation can go: RAM, disk (under `disk_dir`),
// tokens only (recompute).
struct SpillTier {
  const char *name;
  weft::SpillParams spill;
  weft::Residency where;
};
std::vector<SpillTier> spill_tiers(const std::string &disk_dir);

// Holds the executor's encoder thread before each encode (sets `entered`)
// until `release` is set, for at most 30 s.
void hold_encoder(weft::Executor &ex, std::atomic<bool> &release, std::atomic<bool> &entered);

// Within 8x the batch-shape floor of f's model.
void expect_logits(const weft::Conversation &c, const std::vector<float> &ref, const std::string &what,
                   double *worst = nullptr, const Fixture &f = fixture());

}  // namespace img_test
#endif  // WEFT_HAVE_MTMD
