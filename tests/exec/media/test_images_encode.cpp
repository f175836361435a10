// Images encoded where the caller places them (ImageEncoding::caller and
// Executor::encode_images): nothing encodes an image until the call, the
// conversation waits behind it while everyone else steps, no step waits for
// an encode in progress, and the logits then equal mtmd's helper on raw
// llama.cpp; failures are the conversation's error; under the encoder
// thread the call takes the images the thread has not started; a state saved
// with an image not yet encoded is encoded by the loading executor's caller.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>
#include <stdexcept>
#include <thread>

#include "exec/media/image_fixture.hpp"
#include "exec/test_access.hpp"
#include "reference.hpp"

#ifdef WEFT_HAVE_MTMD
using weft_test::random_tokens;
using weft_test::throws_weft;

using namespace img_test;

namespace {

weft::ExecutorParams caller_params(const Fixture &f = fixture()) {
  auto p = params(64, f);
  p.image_encoding = weft::ImageEncoding::caller;
  return p;
}

// Steps (bounded) until `gen` is done; returns the steps taken.
int step_until_done(weft::Executor &ex, const weft::Generation &gen) {
  int steps = 0;
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (!gen.done() && Clock::now() < until) {
    (void)ex.step({.max_tokens = 8});
    ++steps;
  }
  return steps;
}

}  // namespace

// Both projector kinds: steps leave the image queued (the text before it
// decoded, nothing after it), neighbours generate; an encode_images() held
// on another thread does not hold up the steps; once it returns the image
// decodes and the logits are mtmd's helper's.
TEST(ImagesEncode, NothingEncodesUntilTheCallerDoes) {
  for (const Kind kind : {Kind::gemma3, Kind::qwen2vl}) {
    const auto &f = fixture(kind);
    const auto &m = f.model;
    const std::string what = kind == Kind::gemma3 ? "gemma3" : "qwen2vl";
    std::mt19937 rng(kind == Kind::gemma3 ? 31 : 32);
    weft::Executor ex(m, caller_params(f));
    auto other = ex.create();
    other.prompt(random_tokens(rng, m, 12, true));
    auto c = ex.create();
    const auto a = random_tokens(rng, m, 9, true), b = random_tokens(rng, m, 5);
    const Rgb img = random_image(rng, 24 + static_cast<std::uint32_t>(rng() % 80), 24 + static_cast<std::uint32_t>(rng() % 80));
    prompt_scene(c, a, img, b);
    const std::uint32_t begin = c.images().at(0).begin;
    // 90 ms of steps: an encoder thread would have encoded it by then.
    for (int i = 0; i < 30; ++i) {
      (void)ex.step({.max_tokens = 8});
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    EXPECT_EQ(c.n_decoded(), begin) << what << ": the text before the image, and no further";
    EXPECT_FALSE(c.images()[0].encoded) << what;
    auto st = ex.stats();
    EXPECT_EQ(st.images_pending, 1u) << what;
    EXPECT_EQ(st.images_encoded, 0u) << what;

    // The caller's encode, held inside the encoder on another thread: steps
    // go on and a neighbour's whole generation finishes meanwhile.
    std::atomic<bool> release{false}, entered{false};
    hold_encoder(ex, release, entered);
    weft::EncodeResult done;
    std::thread game([&] { done = ex.encode_images(4); });
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (!entered && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!entered) {
      release = true;
      game.join();
      FAIL() << what << ": encode_images() never reached the encoder";
    }
    auto gen = other.generate({.max_tokens = 12});
    const int steps = step_until_done(ex, gen);
    EXPECT_TRUE(gen.done()) << what << ": " << steps << " steps while the encode was held";
    EXPECT_FALSE(gen.result().error) << what;
    EXPECT_FALSE(c.images()[0].encoded) << what;
    EXPECT_EQ(ex.stats().images_pending, 1u) << what << ": being encoded";
    release = true;
    game.join();
    weft::detail::set_encode_hook(ex, nullptr);
    EXPECT_EQ(done.images, 1u) << what;
    EXPECT_EQ(done.failed, 0u) << what;
    EXPECT_EQ(done.pending, 0u) << what;
    EXPECT_GT(done.seconds, 0.0) << what;
    EXPECT_TRUE(c.images()[0].encoded) << what;
    st = ex.stats();
    EXPECT_EQ(st.images_pending, 0u) << what;
    EXPECT_EQ(st.images_encoded, 1u) << what;

    run_until_logits(ex, {c}, rng, 64);
    const auto parts = tokenize(img, f);
    expect_logits(c, reference({a, parts.before, parts.image, parts.after, b}, 64, {}, nullptr, f),
                  what + ": encoded by the caller", nullptr, f);
    EXPECT_EQ(ex.encode_images(8).images, 0u) << what << ": nothing left";
  }
}

// Several images, several callers at once: each image is encoded once, by
// one of them, oldest first; a failing one is its conversation's error and
// the caller's `failed`, the rest decode.
TEST(ImagesEncode, CallersShareTheQueueAndFailuresStayWithTheirConversation) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(33);
  weft::Executor ex(m, caller_params());
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<Part>> inputs;
  std::vector<Rgb> imgs;
  for (int i = 0; i < 5; ++i) {
    convs.push_back(ex.create());
    const auto a = random_tokens(rng, m, 4 + i, true);
    imgs.push_back(random_image(rng, 30 + 7 * static_cast<std::uint32_t>(i), 40));
    convs.back().prompt(a);
    convs.back().prompt_image(imgs.back().w, imgs.back().h, imgs.back().px);
    inputs.push_back({a});
  }
  std::atomic<int> calls{0};
  // The third encode fails, whichever caller runs it.
  weft::detail::set_encode_hook(ex, [&] {
    const int n = ++calls;
    if (n == 3) throw std::runtime_error("a test's failing encoder");
  });
  weft::EncodeResult r1, r2;
  std::thread t1([&] { r1 = ex.encode_images(3); });
  std::thread t2([&] { r2 = ex.encode_images(3); });
  t1.join();
  t2.join();
  weft::detail::set_encode_hook(ex, nullptr);
  EXPECT_EQ(r1.images + r2.images, 5u);
  EXPECT_EQ(r1.failed + r2.failed, 1u);
  EXPECT_EQ(calls.load(), 5);
  EXPECT_EQ(ex.stats().images_encoded, 5u);
  EXPECT_EQ(ex.stats().images_pending, 0u);
  // Which conversation failed depends on which caller took which image;
  // exactly one did, with the encoder's message, and the others decode.
  int errors = 0;
  for (int i = 0; i < 5; ++i) (void)ex.step();
  for (std::size_t i = 0; i < convs.size(); ++i) {
    if (convs[i].error()) {
      ++errors;
      EXPECT_EQ(convs[i].error()->code(), weft::Errc::backend);
      EXPECT_NE(std::string(convs[i].error()->what()).find("a test's failing encoder"), std::string::npos);
    }
  }
  EXPECT_EQ(errors, 1);
  std::vector<weft::Conversation> fine;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < convs.size(); ++i) {
    if (!convs[i].error()) {
      fine.push_back(convs[i]);
      which.push_back(i);
    }
  }
  run_until_logits(ex, fine, rng, 64);
  for (const std::size_t i : which) {
    const auto parts = tokenize(imgs[i]);
    expect_logits(convs[i], reference({std::get<0>(inputs[i][0]), parts.before, parts.image, parts.after}),
                  fmt::format("image {}", i));
  }
}

// Under the encoder thread, encode_images() takes what the thread has not
// started: with the thread held on one image, the caller encodes the next.
TEST(ImagesEncode, TheCallTakesWhatTheEncoderThreadHasNotStarted) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(34);
  weft::Executor ex(m, params());
  const auto me = std::this_thread::get_id();
  std::atomic<bool> release{false}, entered{false};
  weft::detail::set_encode_hook(ex, [&] {
    if (std::this_thread::get_id() == me) return;  // the caller's own encode runs at once
    entered = true;
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (!release && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  auto first = ex.create(), second = ex.create();
  const Rgb img1 = random_image(rng, 32, 32), img2 = random_image(rng, 48, 20);
  first.prompt(random_tokens(rng, m, 3, true));
  first.prompt_image(img1.w, img1.h, img1.px);
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!entered && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(entered);
  const auto b = random_tokens(rng, m, 5, true);
  second.prompt(b);
  second.prompt_image(img2.w, img2.h, img2.px);
  const auto r = ex.encode_images(2);
  EXPECT_EQ(r.images, 1u);
  EXPECT_EQ(r.pending, 1u) << "the thread's image, still held";
  EXPECT_TRUE(second.images()[0].encoded);
  EXPECT_FALSE(first.images()[0].encoded);
  release = true;
  run_until_logits(ex, {first, second}, rng, 64);
  weft::detail::set_encode_hook(ex, nullptr);
  const auto parts = tokenize(img2);
  expect_logits(second, reference({b, parts.before, parts.image, parts.after}), "encoded by the caller");
  EXPECT_EQ(ex.stats().images_encoded, 2u);
}

// A conversation saved before its image was encoded is encoded by the
// loading executor's caller, with the same logits.
TEST(ImagesEncode, ALoadedImageWaitsForTheLoadingExecutorsCaller) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(35);
  weft::Executor ex(m, caller_params()), other(m, caller_params());
  auto c = ex.create();
  const auto a = random_tokens(rng, m, 6, true), b = random_tokens(rng, m, 4);
  const Rgb img = random_image(rng, 40, 28);
  prompt_scene(c, a, img, b);
  for (int i = 0; i < 5; ++i) (void)ex.step();
  const auto saved = c.save();
  auto back = other.load(saved);
  EXPECT_FALSE(back.images().at(0).encoded);
  EXPECT_EQ(other.stats().images_pending, 1u);
  for (int i = 0; i < 30; ++i) {  // 90 ms: an encoder thread would have encoded it
    (void)other.step();
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  EXPECT_EQ(back.n_decoded(), back.images()[0].begin) << "waits before the image";
  EXPECT_FALSE(back.images()[0].encoded);
  EXPECT_EQ(other.encode_images().images, 1u);
  run_until_logits(other, {back}, rng, 64);
  const auto parts = tokenize(img);
  expect_logits(back, reference({a, parts.before, parts.image, parts.after, b}), "loaded, then encoded by the caller");
}

// Without a projector the call has nothing to do; a bad ImageEncoding is
// refused by name; a moved-from executor refuses the call.
TEST(ImagesEncode, EdgesAndRefusals) {
  const auto &m = weft_test::tiny();
  weft::Executor plain(m, {.n_ctx = 256, .n_batch = 32, .n_seq_max = 2});
  const auto r = plain.encode_images(5);
  EXPECT_EQ(r.images, 0u);
  EXPECT_EQ(r.pending, 0u);
  EXPECT_EQ(plain.stats().images_pending, 0u);
  auto bad = params();
  bad.image_encoding = static_cast<weft::ImageEncoding>(7);
  EXPECT_TRUE(throws_weft([&] { weft::Executor e(m, bad); }, weft::Errc::invalid_argument, "image_encoding = 7"));
  weft::Executor moved(std::move(plain));
  EXPECT_TRUE(throws_weft([&] { (void)plain.encode_images(); }, weft::Errc::disposed, "moved from"));
  EXPECT_EQ(moved.encode_images(0).images, 0u);
}
#endif  // WEFT_HAVE_MTMD
