// Images in the executor: a conversation with text, an image and text,
// decoded by weft beside text-only conversations, has the logits that
// mtmd_helper_eval_chunks gives on raw llama.cpp + mtmd for it alone; the
// same after a fork and after rewinds; the encoder never runs inside a
// step; bad images are typed errors while others generate; text with media
// markers is what mtmd_tokenize makes of it.
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

// Text, image, text beside seven text-only conversations under random
// budgets (odd chunk widths) equals mtmd_helper_eval_chunks' decode of it
// alone; so does every text one equal its own decode alone.
TEST(Images, TextImageTextMatchesMtmdHelper) {
  const auto &m = weft_test::tiny();
  double worst_image = 0, worst_text = 0, worst_floor = 0;
  for (unsigned seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor ex(m, params());
    std::vector<weft::Conversation> convs;
    std::vector<std::vector<weft::Token>> text;
    for (int i = 0; i < 7; ++i) {
      convs.push_back(ex.create());
      text.push_back(random_tokens(rng, m, 1 + static_cast<int>(rng() % 80), rng() % 2 == 0));
      convs.back().prompt(text.back());
    }
    auto c = ex.create();
    const auto a = random_tokens(rng, m, 3 + static_cast<int>(rng() % 30), true);
    const auto b = random_tokens(rng, m, 1 + static_cast<int>(rng() % 30));
    const Rgb img = random_image(rng, 20 + static_cast<std::uint32_t>(rng() % 200), 20 + static_cast<std::uint32_t>(rng() % 200));
    prompt_scene(c, a, img, b);
    const auto parts = tokenize(img);
    const auto spans = c.images();
    ASSERT_EQ(spans.size(), 1u);
    const std::uint32_t n_img = spans[0].n_tokens;
    EXPECT_EQ(n_img, 16u);
    EXPECT_EQ(spans[0].begin, a.size() + parts.before.size());
    EXPECT_EQ(c.tokens(), cat({a, parts.before, std::vector<weft::Token>(n_img, weft::image_token(spans[0].id)),
                               parts.after, b}));
    convs.push_back(c);
    run_until_logits(ex, convs, rng, 64);
    EXPECT_TRUE(c.images()[0].encoded);
    const std::vector<Part> input = {a, parts.before, parts.image, parts.after, b};
    const auto alone = reference(input);
    // The floor for this conversation: raw llama.cpp beside the same
    // neighbours, in random chunk widths, against it alone (a few tries).
    std::mt19937 noise_rng(1000 + seed);
    double floor = weft_test::batch_noise_floor(m);
    for (int t = 0; t < 4; ++t) floor = std::max(floor, nmse(reference(input, 64, text, &noise_rng), alone));
    worst_floor = std::max(worst_floor, floor);
    const double err = nmse(c.logits(), alone);
    worst_image = std::max(worst_image, err);
    EXPECT_LT(err, 8 * floor) << "seed " << seed << ": nmse " << err << " vs this conversation's floor " << floor;
    for (int i = 0; i < 7; ++i) {
      expect_logits(convs[i], weft_test::reference_logits(m, text[i]), fmt::format("seed {} text {}", seed, i),
                    &worst_text);
    }
  }
  RecordProperty("nmse_image_conversation", fmt::format("{:.3g}", worst_image));
  RecordProperty("nmse_text_conversations", fmt::format("{:.3g}", worst_text));
  RecordProperty("image_noise_floor", fmt::format("{:.3g}", worst_floor));
  std::printf("worst nmse: image conversation %.3g (its raw floor %.3g), text %.3g (tolerance %.3g)\n",
              worst_image, worst_floor, worst_text, logits_tolerance(m));
}

// A fork continues from the image without decoding it again; rewinds keep
// images whole and land where a fresh decode would.
TEST(Images, ForkAndRewind) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(42);
  weft::Executor ex(m, params());
  std::vector<weft::Conversation> others;
  for (int i = 0; i < 3; ++i) {
    others.push_back(ex.create());
    others.back().prompt(random_tokens(rng, m, 10 + static_cast<int>(rng() % 40), true));
  }
  auto c = ex.create();
  const auto a = random_tokens(rng, m, 12, true), b = random_tokens(rng, m, 9);
  const Rgb img = random_image(rng, 64, 48);
  const auto parts = tokenize(img);
  prompt_scene(c, a, img, b);
  run_until_logits(ex, {c}, rng, 64);
  const std::uint32_t begin = c.images()[0].begin, end = begin + c.images()[0].n_tokens;

  // Fork: both continue differently.
  auto child = c.fork();
  EXPECT_EQ(child.images().size(), 1u);
  const auto x = random_tokens(rng, m, 7), y = random_tokens(rng, m, 5);
  child.prompt(x);
  c.prompt(y);
  others[0].prompt(random_tokens(rng, m, 11));
  run_until_logits(ex, {c, child, others[0]}, rng, 64);
  expect_logits(child, reference({a, parts.before, parts.image, parts.after, cat({b, x})}), "fork");
  expect_logits(c, reference({a, parts.before, parts.image, parts.after, cat({b, y})}), "fork's source");

  // Cuts inside the image are refused, and change nothing.
  const std::uint32_t total = c.n_tokens();
  EXPECT_TRUE(throws_weft([&] { c.rewind(total - (begin + 1)); }, weft::Errc::invalid_argument, "image"));
  EXPECT_TRUE(throws_weft([&] { c.remove(begin + 3, end + 1); }, weft::Errc::invalid_argument, "image"));
  EXPECT_TRUE(throws_weft([&] { c.remove(begin - 1, end - 1); }, weft::Errc::invalid_argument, "image"));
  EXPECT_EQ(c.n_tokens(), total);
  EXPECT_TRUE(c.has_logits());

  // Rewind to just after the image: its last position's logits come from
  // decoding the image again, whole; then text continues after it.
  c.rewind(total - end);
  const auto z = random_tokens(rng, m, 6);
  c.prompt(z);
  run_until_logits(ex, {c}, rng, 64);
  expect_logits(c, reference({a, parts.before, parts.image, z}), "rewind to the image's end");

  // Rewind to before the image: it goes whole.
  c.rewind(c.n_tokens() - static_cast<std::uint32_t>(a.size()));
  EXPECT_TRUE(c.images().empty());
  const auto w = random_tokens(rng, m, 8);
  c.prompt(w);
  run_until_logits(ex, {c}, rng, 64);
  expect_logits(c, weft_test::reference_logits(m, cat({a, w})), "rewind before the image");
  // The fork still has its image.
  child.prompt(w);
  run_until_logits(ex, {child}, rng, 64);
  expect_logits(child, reference({a, parts.before, parts.image, parts.after, cat({b, x, w})}), "fork after rewind");
}

// The vision encoder runs on the executor's encoder thread: while it is
// held, steps return and others generate; the image's conversation waits.
TEST(Images, StepNeverRunsTheEncoder) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(7);
  weft::Executor ex(m, params());
  std::atomic<bool> release{false}, entered{false};
  hold_encoder(ex, release, entered);
  auto other = ex.create();
  other.prompt(random_tokens(rng, m, 10, true));
  auto gen = other.generate({.max_tokens = 20});
  auto c = ex.create();
  const auto a = random_tokens(rng, m, 5, true), b = random_tokens(rng, m, 4);
  const Rgb img = random_image(rng, 30, 30);
  prompt_scene(c, a, img, b);
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!entered && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(entered);
  const std::uint32_t begin = c.images()[0].begin;
  for (int i = 0; i < 40 && !gen.done(); ++i) ex.step();  // each returns while the encode is held
  EXPECT_TRUE(gen.done());  // (it may end early, on an end-of-generation token)
  EXPECT_FALSE(gen.result().error);
  EXPECT_GE(gen.result().tokens.size(), 1u);
  EXPECT_EQ(c.n_decoded(), begin);  // the text before the image, and no further
  EXPECT_FALSE(c.images()[0].encoded);
  release = true;
  run_until_logits(ex, {c}, rng, 64);
  const auto parts = tokenize(img);
  expect_logits(c, reference({a, parts.before, parts.image, parts.after, b}), "after the held encode");
}

// Bad images are typed errors on the call; other conversations generate
// on; the conversation stays usable.
TEST(Images, BadInputRefusedWhileOthersGenerate) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(9);
  weft::Executor ex(m, params());
  ex.start({});
  auto other = ex.create();
  other.prompt(random_tokens(rng, m, 10, true));
  auto gen = other.generate({.max_tokens = 30});
  auto c = ex.create();
  c.prompt(random_tokens(rng, m, 4, true));
  using E = weft::Errc;
  const std::vector<std::uint8_t> none;
  EXPECT_TRUE(throws_weft([&] { c.prompt_image(none); }, E::invalid_argument, "no image bytes"));
  EXPECT_TRUE(throws_weft([&] { c.prompt_image(std::vector<std::uint8_t>(100, 7)); }, E::invalid_argument,
                          "neither a PNG nor a JPEG"));
  // A PNG signature and header, then garbage: the header's size passes, the pixels do not decode.
  std::vector<std::uint8_t> png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                                   0,    0,   0,   16,  0,    0,    0,    16,   8, 2, 0, 0,  0};
  png.resize(200, 0x5A);
  EXPECT_TRUE(throws_weft([&] { c.prompt_image(png); }, E::corrupt, "do not decode"));
  // A header claiming 100000 x 100000 pixels is refused before decoding.
  png[16] = 0;
  png[17] = 0x01;
  png[18] = 0x86;
  png[19] = 0xA0;
  png[20] = 0;
  png[21] = 0x01;
  png[22] = 0x86;
  png[23] = 0xA0;
  EXPECT_TRUE(throws_weft([&] { c.prompt_image(png); }, E::out_of_range, "100000 x 100000"));
  const std::vector<std::uint8_t> jpeg_no_frame = {0xFF, 0xD8, 0xFF, 0xDA, 0, 4, 0, 0};
  EXPECT_TRUE(throws_weft([&] { c.prompt_image(jpeg_no_frame); }, E::corrupt, "JPEG"));
  std::vector<std::uint8_t> rgb(30);
  EXPECT_TRUE(throws_weft([&] { c.prompt_image(0, 10, rgb); }, E::invalid_argument, "empty"));
  EXPECT_TRUE(throws_weft([&] { c.prompt_image(9000, 1, rgb); }, E::out_of_range, "9000 x 1"));
  EXPECT_TRUE(throws_weft([&] { c.prompt_image(5, 5, rgb); }, E::invalid_argument, "needs 75 bytes, got 30"));
  // No projector.
  weft::Executor plain(m, {.n_ctx = 256, .n_batch = 32, .n_seq_max = 2, .n_threads = 1});
  auto p = plain.create();
  EXPECT_TRUE(throws_weft([&] { p.prompt_image(2, 2, std::vector<std::uint8_t>(12)); }, E::invalid_argument,
                          "needs a projector"));
  EXPECT_TRUE(c.images().empty());
  EXPECT_EQ(c.n_queued() + c.n_decoded(), 4u);
  EXPECT_TRUE(gen.wait_for(std::chrono::seconds(30)));
  EXPECT_FALSE(gen.result().error);
  EXPECT_GE(gen.result().tokens.size(), 1u);
  EXPECT_FALSE(other.error());
  // Still usable: a good image goes through, as a PNG file, and gives the
  // logits of its raw pixels.
  const Rgb img = random_image(rng, 40, 24);
  const auto before = c.tokens();
  c.prompt_image(png_of(img));
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (!c.has_logits() && !c.error() && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_FALSE(c.error()) << c.error()->what();
  ex.stop();
  const auto parts = tokenize(img);
  const auto prefix = std::vector<weft::Token>(before.begin(), before.end());
  expect_logits(c, reference({prefix, parts.before, parts.image, parts.after}), "a PNG image last");
}

#endif  // WEFT_HAVE_MTMD

#ifdef WEFT_HAVE_MTMD
namespace {

// Three conversations of text (a0 + a_step * i tokens), a 32x32 image and
// text (b0 + i tokens), queued; `inputs` holds what the reference decodes of each.
struct ImageTrio {
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<Part>> inputs;
  std::vector<ImageParts> keep;  // the chunks the inputs point into
};

ImageTrio image_trio(weft::Executor &ex, std::mt19937 &rng, const weft::Model &m, int a0, int a_step, int b0) {
  ImageTrio t;
  for (int i = 0; i < 3; ++i) {
    const auto a = random_tokens(rng, m, a0 + a_step * i, true), b = random_tokens(rng, m, b0 + i);
    const Rgb img = random_image(rng, 32, 32);
    t.keep.push_back(tokenize(img));
    t.convs.push_back(ex.create());
    t.convs.back().prompt(a);
    t.convs.back().prompt_image(img.w, img.h, img.px);
    t.convs.back().prompt(b);
    t.inputs.push_back({a, t.keep.back().before, t.keep.back().image, t.keep.back().after, b});
  }
  return t;
}

}  // namespace

// Three conversations' images ready in one step share one embeddings batch
// (3 x 16 <= n_ubatch) and each still has the logits of its decode alone.
TEST(Images, ImagesShareOneEmbeddingsBatch) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(5);
  weft::Executor ex(m, params());
  std::vector<int> embd_rows;
  weft::detail::set_decode_hook(ex, [&](const llama_batch &b) {
    if (b.embd != nullptr) embd_rows.push_back(b.n_tokens);
    return 0;
  });
  auto [convs, inputs, keep] = image_trio(ex, rng, m, 4, 1, 3);
  // Every image encoded before the step that decodes them.
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < until && !std::all_of(convs.begin(), convs.end(), [](auto &c) {
           return c.images()[0].encoded;
         })) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  run_until_logits(ex, convs, rng, 64);
  EXPECT_EQ(embd_rows, std::vector<int>{48});
  // Decoded in the second context, kept non-causal (media_side.cpp): the
  // main one never flips its attention.
  EXPECT_NE(weft::detail::TestAccess::core(ex).media.side_ctx, nullptr);
  for (int i = 0; i < 3; ++i) expect_logits(convs[i], reference(inputs[i]), fmt::format("image {}", i));
}

// An image queued while a step runs is encoded after that step, not beside
// it (the encode would take the step's cores: docs/IMAGES.md); while steps
// run back to back, it still starts at the next step boundary.
TEST(Images, AnImageQueuedDuringAStepIsEncodedAfterIt) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(8);
  weft::Executor ex(m, params());
  auto &core = weft::detail::TestAccess::core(ex);
  auto talker = ex.create();
  talker.prompt(random_tokens(rng, m, 6, true));
  run_until_logits(ex, {talker}, rng, 64);
  auto gen = talker.generate({.max_tokens = 100000});
  // Every token decode takes 10 ms: steps long enough to queue an image into.
  weft::detail::set_decode_hook(ex, [](const llama_batch &b) {
    if (b.embd == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return 0;
  });
  std::atomic<int> encodes{0}, beside_a_step{0};
  weft::detail::set_encode_hook(ex, [&] {
    ++encodes;
    if (core.gate.stepping.load() != std::thread::id{}) ++beside_a_step;
  });
  const Rgb img = random_image(rng, 32, 32);
  // A step longer than the gate's bound (kEncodeGate) lets its encode start
  // beside it, as documented: on a loaded machine a 10 ms step can take
  // that long, so such rounds prove nothing and are taken again (bounded).
  const double gate_s = std::chrono::duration<double>(weft::detail::StepGate::kEncodeGate).count();
  int conclusive = 0, rounds = 0;
  std::string step_ms;
  for (; conclusive < 3 && rounds < 30; ++rounds) {
    auto c = ex.create();
    c.prompt(random_tokens(rng, m, 3, true));
    std::thread game([&] {
      const auto until = Clock::now() + std::chrono::seconds(10);
      while (core.gate.stepping.load() == std::thread::id{} && Clock::now() < until) std::this_thread::yield();
      c.prompt_image(img.w, img.h, img.px);  // mid-step, from another thread
    });
    const int beside_before = beside_a_step.load();
    const auto t0 = Clock::now();
    (void)ex.step();
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    game.join();
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (!c.images().at(0).encoded && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(c.images().at(0).encoded) << "round " << rounds;
    step_ms += fmt::format(" {:.1f}", took * 1e3);
    if (took < gate_s) {  // the image was queued after the step began: the gate outlasts it
      ++conclusive;
    } else {
      beside_a_step = beside_before;  // the gate's bound ran out: allowed
    }
    c.dispose();
  }
  EXPECT_EQ(conclusive, 3) << "steps of (ms):" << step_ms << " against the gate's " << gate_s * 1e3 << " ms";
  EXPECT_EQ(encodes.load(), rounds);
  EXPECT_EQ(beside_a_step.load(), 0) << "steps of (ms):" << step_ms;

  // Steps back to back: the image is not held back for a gap that never
  // comes (it starts at a boundary, beside the next step).
  auto c = ex.create();
  c.prompt(random_tokens(rng, m, 3, true));
  c.prompt_image(img.w, img.h, img.px);
  const auto until = Clock::now() + std::chrono::seconds(10);
  int steps = 0;
  while (!c.images().at(0).encoded && Clock::now() < until) {
    (void)ex.step();
    ++steps;
  }
  EXPECT_TRUE(c.images().at(0).encoded);
  EXPECT_LE(steps, 20) << "the encoder waited out " << steps << " steps of 10 ms";
  weft::detail::set_decode_hook(ex, nullptr);
  weft::detail::set_encode_hook(ex, nullptr);
}

// Without the second context (it could not be made, or the images need
// adapters), non-causal images go through the main context with its
// attention flipped around the batch, as mtmd's helper does: the same logits.
TEST(Images, WithoutTheSecondContextTheMainOneFlips) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(6);
  weft::Executor ex(m, params());
  auto &core = weft::detail::TestAccess::core(ex);
  ASSERT_NE(core.media.side_ctx, nullptr);  // made with the executor: a non-causal projector
  llama_free(core.media.side_ctx);           // as if llama.cpp had refused to make it
  core.media.side_ctx = nullptr;
  auto [convs, inputs, keep] = image_trio(ex, rng, m, 3, 2, 2);
  run_until_logits(ex, convs, rng, 64);
  EXPECT_EQ(core.media.side_ctx, nullptr);
  for (int i = 0; i < 3; ++i) expect_logits(convs[i], reference(inputs[i]), fmt::format("image {}, main context", i));
}

// Forks of one long prompt, each shown an image: in the main context they
// share the prompt's cells, but the second context would need a copy each
// (3 x 640 cells > its 1,024), so the group goes through the main context
// instead, flipping its attention; the logits are still mtmd's.
TEST(Images, ForksTooLongForTheSecondContextTogetherGoThroughTheMainOne) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(12);
  weft::Executor ex(m, params());
  const auto &core = weft::detail::TestAccess::core(ex);
  ASSERT_NE(core.media.side_ctx, nullptr);
  ASSERT_LT(llama_n_ctx(core.media.side_ctx), 3u * 640u);
  const auto lore = random_tokens(rng, m, 620, true);
  auto root = ex.create();
  root.prompt(lore);
  run_until_logits(ex, {root}, rng, 64);
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<Part>> inputs;
  std::vector<ImageParts> keep;
  keep.reserve(3);
  for (int i = 0; i < 3; ++i) {
    const Rgb img = random_image(rng, 32, 32);
    const auto after = random_tokens(rng, m, 2 + i);
    keep.push_back(tokenize(img));
    convs.push_back(root.fork());
    convs.back().prompt_image(img.w, img.h, img.px);
    convs.back().prompt(after);
    inputs.push_back({lore, keep.back().before, keep.back().image, keep.back().after, after});
  }
  // Wait for the three encodes, so one step decodes the three images as a group.
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < until &&
         !std::all_of(convs.begin(), convs.end(), [](auto &c) { return c.images()[0].encoded; })) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  run_until_logits(ex, convs, rng, 64);
  for (int i = 0; i < 3; ++i) {
    expect_logits(convs[i], reference(inputs[i]), fmt::format("fork {}, image through the main context", i));
  }
}
#endif  // WEFT_HAVE_MTMD
