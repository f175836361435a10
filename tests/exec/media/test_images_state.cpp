// Images in state: a conversation with text, an image and text keeps the
// logits of mtmd_helper_eval_chunk_single's decode of it alone (raw
// llama.cpp + mtmd) after save/load into another executor (full and
// tokens-only, and saved before its image was encoded), an executor
// snapshot with a fork, and parking to RAM, disk and the recompute tier.
// A state with images refuses an executor without the same projector.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "exec/media/image_fixture.hpp"
#include "exec/test_access.hpp"
#include "reference.hpp"
#include "state/state_codec.hpp"
#include "weft/make_mmproj.hpp"

#ifdef WEFT_HAVE_MTMD
using weft_test::random_tokens;
using weft_test::throws_weft;

using namespace img_test;

namespace {

// One conversation of text + image + text, and the parts its reference needs.
struct Scene {
  std::vector<weft::Token> a, b;
  Rgb img;
  ImageParts parts;
  std::vector<Part> input() const { return {a, parts.before, parts.image, parts.after, b}; }
};

Scene scene(std::mt19937 &rng, const weft::Model &m) {
  Scene s;
  s.a = random_tokens(rng, m, 3 + static_cast<int>(rng() % 30), true);
  s.b = random_tokens(rng, m, 1 + static_cast<int>(rng() % 20));
  s.img = random_image(rng, 16 + static_cast<std::uint32_t>(rng() % 120), 16 + static_cast<std::uint32_t>(rng() % 120));
  s.parts = tokenize(s.img);
  return s;
}

weft::Conversation prompt_scene(weft::Executor &ex, const Scene &s, bool as_png = false) {
  auto c = ex.create();
  c.prompt(s.a);
  if (as_png) {
    c.prompt_image(png_of(s.img));
  } else {
    c.prompt_image(s.img.w, s.img.h, s.img.px);
  }
  c.prompt(s.b);
  return c;
}

// Text neighbours, so the image conversation shares its batches.
std::vector<weft::Conversation> neighbours(weft::Executor &ex, std::mt19937 &rng, int n) {
  const auto &m = weft_test::tiny();
  std::vector<weft::Conversation> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(ex.create());
    out.back().prompt(random_tokens(rng, m, 1 + static_cast<int>(rng() % 60), true));
  }
  return out;
}

}  // namespace

// Saved after decoding (full and tokens-only) and loaded into another
// executor, in another slot beside other conversations: the same logits,
// then the same after more text.
TEST(ImagesState, SaveLoadIntoAnotherExecutor) {
  const auto &m = weft_test::tiny();
  double worst = 0;
  for (unsigned seed = 1; seed <= 3; ++seed) {
    std::mt19937 rng(seed);
    const Scene s = scene(rng, m);
    weft::Executor ex(m, params());
    auto others = neighbours(ex, rng, 3);
    auto c = prompt_scene(ex, s, seed == 2);
    others.push_back(c);
    run_until_logits(ex, others, rng, 64);
    const auto full = c.save();
    const auto tokens_only = c.save({.tokens_only = true});
    EXPECT_LT(tokens_only.size(), full.size());

    weft::Executor other(m, params(32));
    auto busy = neighbours(other, rng, 2);
    auto back = other.load(full);
    auto again = other.load(tokens_only);
    ASSERT_EQ(back.images().size(), 1u);
    EXPECT_EQ(back.images()[0].begin, c.images()[0].begin);
    EXPECT_EQ(back.images()[0].n_tokens, c.images()[0].n_tokens);
    EXPECT_TRUE(back.images()[0].encoded);
    EXPECT_NE(back.images()[0].id, again.images()[0].id);  // each load's image is its own
    EXPECT_EQ(back.n_decoded(), c.n_decoded());
    EXPECT_LT(again.n_decoded(), c.n_decoded());  // its history, image included, is decoded again
    expect_logits(back, reference(s.input()), fmt::format("seed {}: loaded", seed), &worst);
    busy.push_back(again);
    run_until_logits(other, busy, rng, 32);
    expect_logits(again, reference(s.input()), fmt::format("seed {}: loaded tokens-only", seed), &worst);

    const auto x = random_tokens(rng, m, 1 + static_cast<int>(rng() % 12));
    back.prompt(x);
    again.prompt(x);
    run_until_logits(other, {back, again}, rng, 32);
    auto more = s.input();
    more.push_back(x);
    const auto ref = reference(more);
    expect_logits(back, ref, fmt::format("seed {}: loaded, then text", seed), &worst);
    expect_logits(again, ref, fmt::format("seed {}: tokens-only, then text", seed), &worst);
    // Rewinding a loaded conversation to before its image drops it whole.
    back.rewind(back.n_tokens() - static_cast<std::uint32_t>(s.a.size()));
    EXPECT_TRUE(back.images().empty());
  }
  RecordProperty("nmse_worst", fmt::format("{:.3g}", worst));
}

// Saved while the encoder still holds its image: the state carries the
// image's source, and the loading executor encodes it on its own thread.
TEST(ImagesState, SavedBeforeEncodingCarriesTheSource) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(11);
  for (const bool png : {false, true}) {
    const Scene s = scene(rng, m);
    weft::Executor ex(m, params());
    std::atomic<bool> release{false}, entered{false};
    hold_encoder(ex, release, entered);
    auto c = prompt_scene(ex, s, png);
    for (int i = 0; i < 10; ++i) ex.step();
    ASSERT_FALSE(c.images()[0].encoded);
    const auto bytes = c.save();
    release = true;
    // Source form: the file or the pixels, no embeddings.
    EXPECT_GE(bytes.size(), png ? png_of(s.img).size() : s.img.px.size());
    weft::Executor other(m, params());
    auto back = other.load(bytes);
    EXPECT_EQ(back.n_decoded(), c.n_decoded());
    ASSERT_EQ(back.images().size(), 1u);
    run_until_logits(other, {back}, rng, 64);
    EXPECT_TRUE(back.images()[0].encoded);
    expect_logits(back, reference(s.input()), png ? "source PNG" : "source RGB");
    run_until_logits(ex, {c}, rng, 64);
    expect_logits(c, reference(s.input()), "the original, encoded after the save");
  }
}

// save_all/load_all with an image and a fork of it: both come back, still
// sharing one image, and continue as a fresh decode of their histories.
TEST(ImagesState, SnapshotWithAForkOfAnImage) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(3);
  const Scene s = scene(rng, m);
  weft::Executor ex(m, params());
  auto others = neighbours(ex, rng, 2);
  auto c = prompt_scene(ex, s);
  run_until_logits(ex, {c}, rng, 64);
  auto child = c.fork();
  const auto x = random_tokens(rng, m, 6), y = random_tokens(rng, m, 4);
  child.prompt(x);
  others.push_back(child);
  run_until_logits(ex, others, rng, 64);
  c.prompt(y);  // queued, not decoded: travels as input
  const auto snap = ex.save_all();

  weft::Executor other(m, params());
  auto loaded = other.load_all(snap);
  ASSERT_EQ(loaded.size(), 4u);
  auto lc = loaded.at(c.id()), lchild = loaded.at(child.id());
  ASSERT_EQ(lc.images().size(), 1u);
  ASSERT_EQ(lchild.images().size(), 1u);
  EXPECT_EQ(lc.images()[0].id, lchild.images()[0].id);  // one image, as before
  expect_logits(lchild, reference({s.a, s.parts.before, s.parts.image, s.parts.after, cat({s.b, x})}),
                "the fork, loaded");
  run_until_logits(other, {lc}, rng, 64);
  expect_logits(lc, reference({s.a, s.parts.before, s.parts.image, s.parts.after, cat({s.b, y})}),
                "the source, its queued text decoded after the load");
}

// Parked to RAM, to disk and as tokens only (recompute: the image is
// decoded again from its embeddings), then prompted: the same logits as a
// fresh decode. One slot for three conversations forces the parking.
TEST(ImagesState, ParkedToEveryTierAndBack) {
  const auto &m = weft_test::tiny();
  const auto dir = weft_test::temp_dir("images-spill");
  for (const SpillTier &t : spill_tiers(dir.string())) {
    std::mt19937 rng(100 + static_cast<unsigned>(t.where));
    auto p = params();
    p.n_seq_max = 1;
    p.n_batch = 32;
    p.spill = t.spill;
    weft::Executor ex(m, p);
    const Scene s = scene(rng, m);
    auto c = prompt_scene(ex, s);
    run_until_logits(ex, {c}, rng, 32);
    // Others take the only slot in turn; c is parked.
    auto others = neighbours(ex, rng, 2);
    run_until_logits(ex, others, rng, 32);
    EXPECT_EQ(c.residency(), t.where) << t.name;
    EXPECT_EQ(c.images().size(), 1u) << t.name;
    const auto x = random_tokens(rng, m, 5);
    c.prompt(x);
    run_until_logits(ex, {c}, rng, 32);
    EXPECT_EQ(c.residency(), weft::Residency::resident) << t.name;
    auto more = s.input();
    more.push_back(x);
    expect_logits(c, reference(more), fmt::format("parked to {} and back", t.name));
    if (t.where == weft::Residency::recompute) {
      EXPECT_GE(ex.stats().recomputes, 1u);
    }
  }
}

// A state with images needs the same projector: none, or another one, is
// Errc::incompatible with the executor unchanged; positions that do not
// match their image are Errc::corrupt (CRC fixed up). An image whose encode
// failed travels as its source and encodes on load elsewhere.
TEST(ImagesState, RefusedWithoutTheSameProjector) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(8);
  const Scene s = scene(rng, m);
  weft::Executor ex(m, params());
  auto c = prompt_scene(ex, s);
  run_until_logits(ex, {c}, rng, 64);
  const auto bytes = c.save();
  using E = weft::Errc;

  weft::Executor plain(m, {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 2, .n_threads = 1});
  auto keep = plain.create();
  keep.prompt(random_tokens(rng, m, 5, true));
  EXPECT_TRUE(throws_weft([&] { (void)plain.load(bytes); }, E::incompatible, "no projector"));
  const auto dir = weft_test::temp_dir("images-other-projector");
  const auto other_path = (dir / "other.gguf").string();
  weft::make_mmproj({.base = weft_test::tiny_path(), .out = other_path, .seed = 2});
  weft::Executor foreign(m, {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 2, .n_threads = 1,
                             .projector = weft::Projector::load(m, {.path = other_path})});
  EXPECT_TRUE(throws_weft([&] { (void)foreign.load(bytes); }, E::incompatible, "projector"));
  EXPECT_EQ(foreign.stats().conversations, 0u);
  EXPECT_EQ(plain.stats().conversations, 1u);

  // An image position changed to a text token, the CRC fixed: corrupt.
  auto bad = bytes;
  const std::uint32_t at = c.images()[0].begin + 2;
  const weft::Token value = weft::image_token(c.images()[0].id);
  // The history starts after magic, version, fingerprint, n_vocab, count.
  const std::size_t off = 8 + 4 + 8 + 4 + 4 + std::size_t(at) * 4;
  weft::Token got;
  std::memcpy(&got, bad.data() + off, 4);
  ASSERT_EQ(got, value);
  const weft::Token text = 5;
  std::memcpy(bad.data() + off, &text, 4);
  const auto crc = weft::detail::crc32(std::span(bad).first(bad.size() - 4));
  std::memcpy(bad.data() + bad.size() - 4, &crc, 4);
  EXPECT_TRUE(throws_weft([&] { (void)ex.load(bad); }, E::corrupt, "image"));

  // An image the encoder fails on: the conversation's error, and no save.
  weft::detail::set_encode_hook(ex, [] { throw std::runtime_error("encoder down (test)"); });
  auto f = prompt_scene(ex, s);
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (!f.error() && Clock::now() < until) {
    ex.step();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(f.error());
  EXPECT_NE(std::string(f.error()->what()).find("encoder down"), std::string::npos);
  const auto failed_state = f.save();  // the source travels; the error does not
  weft::Executor again(m, params());
  auto g = again.load(failed_state);
  EXPECT_FALSE(g.error());
  run_until_logits(again, {g}, rng, 64);
  expect_logits(g, reference(s.input()), "a failed image, saved and encoded on load");
}
#endif  // WEFT_HAVE_MTMD
