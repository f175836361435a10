// Audio in the executor (a qwen2a projector on tiny: a Whisper-style
// encoder, ordinary positions): a conversation with text, a clip and text,
// decoded by weft beside text-only conversations, has the logits of
// mtmd_helper_eval_chunk_single's decode of it alone on raw llama.cpp + mtmd;
// the same after a fork, a rewind to before the clip, save/load (full,
// tokens-only, and saved before the encoder ran: the samples travel), and
// parking. Bad clips, audio to a vision-only projector and images to an
// audio-only one are typed errors while another conversation generates.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <random>

#include "exec/media/image_fixture.hpp"
#include "reference.hpp"

#ifdef WEFT_HAVE_MTMD
using weft_test::nmse;
using weft_test::random_tokens;
using weft_test::throws_weft;

using namespace img_test;

namespace {

const Fixture &ears() { return fixture(Kind::qwen2a); }

struct Scene {
  std::vector<weft::Token> a, b;
  std::vector<float> clip;
  ImageParts parts;
  std::vector<Part> input() const { return {a, parts.before, parts.image, parts.after, b}; }
};

Scene scene(std::mt19937 &rng) {
  const auto &m = ears().model;
  Scene s;
  s.a = random_tokens(rng, m, 3 + static_cast<int>(rng() % 30), true);
  s.b = random_tokens(rng, m, 1 + static_cast<int>(rng() % 20));
  s.clip = random_clip(rng, ears(), 0.4 + 1.6 * static_cast<double>(rng() % 1000) / 1000.0);
  s.parts = tokenize_audio(s.clip, ears());
  return s;
}

weft::Conversation prompt_scene(weft::Executor &ex, const Scene &s) {
  auto c = ex.create();
  c.prompt(s.a);
  c.prompt_audio(s.clip);
  c.prompt(s.b);
  return c;
}

std::vector<float> ref(const std::vector<Part> &input) { return reference(input, 64, {}, nullptr, ears()); }

void expect(const weft::Conversation &c, const std::vector<Part> &input, const std::string &what) {
  expect_logits(c, ref(input), what, nullptr, ears());
}

}  // namespace

// Beside seven text-only conversations under random budgets: mtmd's decode
// of it alone, within 8x the noise raw llama.cpp shows for this very
// conversation beside the same neighbours.
TEST(Audio, TextAudioTextMatchesMtmdHelper) {
  const auto &f = ears();
  ASSERT_TRUE(f.projector.audio());
  EXPECT_FALSE(f.projector.vision());
  EXPECT_EQ(f.projector.audio_sample_rate(), 16000);
  double worst = 0, worst_floor = 0;
  for (unsigned seed = 1; seed <= 3; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor ex(f.model, params(64, f));
    std::vector<weft::Conversation> convs;
    std::vector<std::vector<weft::Token>> text;
    for (int i = 0; i < 7; ++i) {
      text.push_back(random_tokens(rng, f.model, 1 + static_cast<int>(rng() % 80), rng() % 2 == 0));
      convs.push_back(ex.create());
      convs.back().prompt(text.back());
    }
    const Scene s = scene(rng);
    auto c = prompt_scene(ex, s);
    const auto spans = c.images();
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_TRUE(spans[0].audio);
    EXPECT_EQ(spans[0].n_tokens, mtmd_input_chunk_get_n_tokens(s.parts.image));
    EXPECT_EQ(spans[0].n_pos, spans[0].n_tokens);
    EXPECT_EQ(spans[0].begin, s.a.size() + s.parts.before.size());
    convs.push_back(c);
    run_until_logits(ex, convs, rng, 64);
    const auto input = s.input();
    const auto alone = ref(input);
    std::mt19937 noise_rng(1000 + seed);
    double floor = weft_test::batch_noise_floor(f.model);
    for (int t = 0; t < 4; ++t) floor = std::max(floor, nmse(reference(input, 64, text, &noise_rng, f), alone));
    worst_floor = std::max(worst_floor, floor);
    const double err = nmse(c.logits(), alone);
    worst = std::max(worst, err);
    EXPECT_LT(err, 8 * floor) << "seed " << seed << ": nmse " << err << " vs this conversation's floor " << floor;
    for (int i = 0; i < 7; ++i) {
      expect_logits(convs[i], weft_test::reference_logits(f.model, text[i]), fmt::format("seed {} text {}", seed, i),
                    nullptr, f);
    }
  }
  RecordProperty("nmse_audio_conversation", fmt::format("{:.3g}", worst));
  std::printf("worst nmse: audio conversation %.3g (its raw floor %.3g)\n", worst, worst_floor);
}

// Fork and rewind; save/load full and tokens-only into another executor; a
// save while the encoder still holds the clip (its samples travel, the
// loader encodes them); parking to RAM with one slot.
TEST(Audio, ForkRewindStateAndSpill) {
  const auto &f = ears();
  const auto &m = f.model;
  std::mt19937 rng(11);
  weft::Executor ex(m, params(64, f));
  const Scene s = scene(rng);
  auto c = prompt_scene(ex, s);
  run_until_logits(ex, {c}, rng, 64);
  expect(c, s.input(), "decoded");

  auto child = c.fork();
  const auto x = random_tokens(rng, m, 6);
  child.prompt(x);
  run_until_logits(ex, {child}, rng, 64);
  expect(child, {s.a, s.parts.before, s.parts.image, s.parts.after, cat({s.b, x})}, "fork");

  const auto full = c.save();
  const auto tokens_only = c.save({.tokens_only = true});
  weft::Executor other(m, params(32, f));
  auto back = other.load(full);
  auto again = other.load(tokens_only);
  EXPECT_TRUE(back.images()[0].audio);
  expect(back, s.input(), "loaded");
  run_until_logits(other, {again}, rng, 32);
  expect(again, s.input(), "loaded tokens-only");

  c.rewind(c.n_tokens() - static_cast<std::uint32_t>(s.a.size()));
  EXPECT_TRUE(c.images().empty());
  c.prompt(x);
  run_until_logits(ex, {c}, rng, 64);
  expect_logits(c, weft_test::reference_logits(m, cat({s.a, x})), "rewound before the clip", nullptr, f);

  // Saved before encoding: the samples travel (form pcm).
  {
    weft::Executor held(m, params(64, f));
    std::atomic<bool> release{false}, entered{false};
    hold_encoder(held, release, entered);
    auto d = prompt_scene(held, s);
    (void)held.step();
    const auto early = d.save();
    EXPECT_FALSE(d.images()[0].encoded);
    release = true;
    weft::Executor loader(m, params(64, f));
    auto e = loader.load(early);
    run_until_logits(loader, {e}, rng, 64);
    expect(e, s.input(), "saved before encoding, encoded by the loader");
  }

  // One slot for two conversations: the clip's conversation is parked to
  // RAM and restored.
  auto p = params(32, f);
  p.n_seq_max = 1;
  weft::Executor small(m, p);
  auto d = prompt_scene(small, s);
  run_until_logits(small, {d}, rng, 32);
  auto other_conv = small.create();
  other_conv.prompt(random_tokens(rng, m, 20, true));
  run_until_logits(small, {other_conv}, rng, 32);
  EXPECT_EQ(d.residency(), weft::Residency::ram);
  d.prompt(x);
  run_until_logits(small, {d}, rng, 32);
  expect(d, {s.a, s.parts.before, s.parts.image, s.parts.after, cat({s.b, x})}, "parked to RAM and back");
}

// Typed errors, nothing changed, while another conversation generates.
TEST(Audio, BadInputRefusedWhileOthersGenerate) {
  const auto &f = ears();
  std::mt19937 rng(5);
  weft::Executor ex(f.model, params(64, f));
  auto talker = ex.create();
  talker.prompt(random_tokens(rng, f.model, 12, true));
  auto reply = talker.generate({.max_tokens = 8});
  auto c = ex.create();
  c.prompt(random_tokens(rng, f.model, 5, true));
  const auto n = c.n_tokens();
  using weft::Errc;
  EXPECT_TRUE(throws_weft([&] { c.prompt_audio({}); }, Errc::invalid_argument, "no samples"));
  std::vector<float> nan_clip(1600, 0.1f);
  nan_clip[700] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_weft([&] { c.prompt_audio(nan_clip); }, Errc::invalid_argument, "sample 700"));
  std::vector<float> inf_clip(1600, 0.1f);
  inf_clip[3] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_weft([&] { c.prompt_audio(inf_clip); }, Errc::invalid_argument, "sample 3"));
  const std::vector<float> huge((std::size_t(1) << 24) + 1, 0.0f);
  EXPECT_TRUE(throws_weft([&] { c.prompt_audio(huge); }, Errc::out_of_range, "16777217 samples"));
  // Over one 30 s window: mtmd would make two chunks; the caller cuts it.
  const std::vector<float> long_clip(31 * 16000, 0.05f);
  EXPECT_TRUE(throws_weft([&] { c.prompt_audio(long_clip); }, Errc::out_of_range, "more than one"));
  const Rgb img = random_image(rng, 32, 32);
  EXPECT_TRUE(throws_weft([&] { c.prompt_image(img.w, img.h, img.px); }, Errc::incompatible, "no vision encoder"));
  EXPECT_EQ(c.n_tokens(), n);
  EXPECT_TRUE(c.images().empty());

  // Audio to a vision-only projector.
  const auto &g = fixture();
  weft::Executor seer(g.model, params(64, g));
  auto v = seer.create();
  EXPECT_TRUE(throws_weft([&] { v.prompt_audio(std::vector<float>(1600, 0.0f)); }, Errc::incompatible,
                          "no audio encoder"));
  EXPECT_FALSE(g.projector.audio());
  EXPECT_EQ(g.projector.audio_sample_rate(), 0);

  for (int i = 0; i < 2000 && !reply.done(); ++i) (void)ex.step();
  EXPECT_TRUE(reply.done());
  EXPECT_FALSE(reply.result().tokens.empty());
}
#endif  // WEFT_HAVE_MTMD
