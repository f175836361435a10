// Images as input: projector loads that are refused, prepared images queued
// anywhere, and text with media markers tokenized as mtmd_tokenize does.
#include <gtest/gtest.h>
#include <llama.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "exec/media/image_fixture.hpp"
#include "exec/test_access.hpp"
#include "reference.hpp"
#include "weft/make_mmproj.hpp"

#ifdef WEFT_HAVE_MTMD
using weft_test::logits_tolerance;
using weft_test::nmse;
using weft_test::random_tokens;
using weft_test::throws_weft;

using namespace img_test;

// A projector of another model, a missing file and a text model as
// projector are typed errors. (M-RoPE images: test_images_mrope.cpp.)
TEST(Images, ProjectorLoadRefusals) {
  const auto &q = fixture(Kind::qwen2vl);
  EXPECT_TRUE(q.projector.mrope());
  const auto dir = weft_test::temp_dir("images-refusals");
  // A projector for another model is refused by the executor.
  EXPECT_TRUE(throws_weft(
      [&] { weft::Executor bad(weft_test::tiny(), {.n_ctx = 256, .n_batch = 32, .projector = q.projector}); },
      weft::Errc::invalid_argument, "another Model"));
  EXPECT_TRUE(throws_weft([&] { (void)weft::Projector::load(q.model, {.path = (dir / "none.gguf").string()}); },
                          weft::Errc::not_found));
  EXPECT_TRUE(throws_weft([&] { (void)weft::Projector::load(q.model, {.path = weft_test::tiny_path()}); },
                          weft::Errc::incompatible));
}
#endif  // WEFT_HAVE_MTMD

#ifdef WEFT_HAVE_MTMD
// An image prepared on another thread is queued in two conversations of two
// executors that share the projector (and twice in one): each image its own,
// each with the logits of its decode alone. One prepared with another
// projector, or an empty handle, is refused.
TEST(Images, PreparedImageQueuedAnywhere) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(12);
  const Rgb img = random_image(rng, 50, 70);
  weft::PreparedImage prepared;
  std::thread([&] { prepared = fixture().projector.prepare(png_of(img)); }).join();
  ASSERT_TRUE(prepared);
  EXPECT_EQ(prepared.n_tokens(), 16u);
  const auto parts = tokenize(img);
  const auto a = random_tokens(rng, m, 6, true), b = random_tokens(rng, m, 5);
  weft::Executor one(m, params()), two(m, params(32));
  auto c1 = one.create(), c2 = two.create();
  for (auto *c : {&c1, &c2}) {
    c->prompt(a);
    c->prompt_image(prepared);
    c->prompt(b);
  }
  c2.prompt_image(prepared);  // the same picture again, after b
  EXPECT_EQ(c2.images().size(), 2u);
  EXPECT_NE(c2.images()[0].id, c2.images()[1].id);
  run_until_logits(one, {c1}, rng, 64);
  run_until_logits(two, {c2}, rng, 32);
  expect_logits(c1, reference({a, parts.before, parts.image, parts.after, b}), "prepared, first executor");
  expect_logits(c2, reference({a, parts.before, parts.image, parts.after, b, parts.before, parts.image, parts.after}),
                "prepared, twice in the second executor");
  // Saved and loaded: the shared source and chunk are not the state's business.
  auto back = one.load(c2.save());
  expect_logits(back, reference({a, parts.before, parts.image, parts.after, b, parts.before, parts.image, parts.after}),
                "prepared, saved and loaded");

  const auto dir = weft_test::temp_dir("images-prepared");
  const auto other_path = (dir / "other.gguf").string();
  weft::make_mmproj({.base = weft_test::tiny_path(), .out = other_path, .seed = 3});
  const auto other = weft::Projector::load(m, {.path = other_path});
  const auto foreign = other.prepare(img.w, img.h, img.px);
  const auto n = c1.n_tokens();
  EXPECT_TRUE(throws_weft([&] { c1.prompt_image(foreign); }, weft::Errc::invalid_argument, "another projector"));
  EXPECT_TRUE(throws_weft([&] { c1.prompt_image(weft::PreparedImage()); }, weft::Errc::invalid_argument, "empty"));
  EXPECT_TRUE(throws_weft([&] { (void)other.prepare(std::vector<std::uint8_t>(10, 1)); }, weft::Errc::invalid_argument,
                          "neither a PNG nor a JPEG"));
  EXPECT_EQ(c1.n_tokens(), n);
}
#endif  // WEFT_HAVE_MTMD

#ifdef WEFT_HAVE_MTMD
// Text with media markers queues what mtmd_tokenize makes of the same text
// and images: the same tokens around the same spans, and mtmd's decode of
// them alone. Markers and images that differ in number are refused with
// nothing queued.
TEST(Images, TextWithMediaMarkersAsMtmdTokenizes) {
  const auto &f = fixture();
  std::mt19937 rng(9);
  weft::Executor ex(f.model, params());
  const Rgb i1 = random_image(rng, 40, 30), i2 = random_image(rng, 50, 60);
  const std::vector<weft::PreparedImage> imgs = {f.projector.prepare(i1.w, i1.h, i1.px),
                                                 f.projector.prepare(i2.w, i2.h, i2.px)};
  const std::string m(weft::media_marker());
  EXPECT_EQ(m, mtmd_default_marker());
  const std::string text = "The smith shows you " + m + " and then " + m + ", asking what you think.";
  auto c = ex.create();
  c.prompt(text, imgs, {.add_bos = true});
  const auto spans = c.images();
  ASSERT_EQ(spans.size(), 2u);

  // mtmd's own: the whole text and both bitmaps at once.
  Chunks chunks;
  mtmd_bitmap *b1 = mtmd_bitmap_init(i1.w, i1.h, i1.px.data()), *b2 = mtmd_bitmap_init(i2.w, i2.h, i2.px.data());
  const mtmd_bitmap *bitmaps[] = {b1, b2};
  const mtmd_input_text in{text.c_str(), text.size(), /*add_special=*/true, /*parse_special=*/false};
  ASSERT_EQ(mtmd_tokenize(f.mctx, chunks.chunks, &in, bitmaps, 2), 0);
  mtmd_bitmap_free(b1);
  mtmd_bitmap_free(b2);
  std::vector<Part> parts;
  std::vector<weft::Token> expected;
  std::size_t image = 0;
  for (std::size_t i = 0; i < mtmd_input_chunks_size(chunks.chunks); ++i) {
    const auto *ch = mtmd_input_chunks_get(chunks.chunks, i);
    if (mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      std::size_t n = 0;
      const llama_token *t = mtmd_input_chunk_get_tokens_text(ch, &n);
      parts.emplace_back(std::vector<weft::Token>(t, t + n));
      expected.insert(expected.end(), t, t + n);
    } else {
      ASSERT_LT(image, spans.size());
      EXPECT_EQ(spans[image].begin, expected.size());
      EXPECT_EQ(spans[image].n_tokens, mtmd_input_chunk_get_n_tokens(ch));
      expected.insert(expected.end(), spans[image].n_tokens, weft::image_token(spans[image].id));
      parts.emplace_back(ch);
      ++image;
    }
  }
  EXPECT_EQ(image, 2u);
  EXPECT_EQ(c.tokens(), expected);
  run_until_logits(ex, {c}, rng, 64);
  expect_logits(c, reference(parts), "text with two media markers");

  // Markers and images in other numbers: refused, nothing queued.
  auto d = ex.create();
  EXPECT_TRUE(throws_weft([&] { d.prompt("a " + m + " b " + m, std::span(imgs).first(1)); },
                          weft::Errc::invalid_argument, "2 media markers"));
  EXPECT_TRUE(throws_weft([&] { d.prompt("no marker", imgs); }, weft::Errc::invalid_argument, "0 media markers"));
  EXPECT_TRUE(throws_weft([&] { d.prompt(m, std::vector<weft::PreparedImage>(1)); }, weft::Errc::invalid_argument,
                          "empty PreparedImage"));
  EXPECT_EQ(d.n_tokens(), 0u);
  EXPECT_TRUE(d.images().empty());
  // An image alone, with no text around the marker, is fine.
  d.prompt(m, std::span(imgs).first(1));
  EXPECT_EQ(d.images().size(), 1u);
}
#endif  // WEFT_HAVE_MTMD
