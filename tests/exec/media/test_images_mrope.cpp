// Images with M-RoPE positions (a qwen2-vl projector on tiny made a qwen2vl
// model): an image's cells all sit at its first position t with their grid
// place in the other sections, and it advances the positions by
// max(grid width, height), fewer than its cells. A conversation with text,
// images and text, decoded by weft beside text-only conversations, has the
// logits of mtmd_helper_eval_chunk_single's decode of it alone on raw
// llama.cpp + mtmd; so it does after a fork, rewinds, a removal before the
// image (re-decoded: M-RoPE caches cannot shift), save/load (full and
// tokens-only), a snapshot with a fork, and parking to RAM, disk and the
// recompute tier. Also: a version 4 state with an image still loads, and a
// state whose image grid does not give its positions is corrupt.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "exec/media/image_fixture.hpp"
#include "exec/media/mrope_fixture.hpp"
#include "exec/test_access.hpp"
#include "reference.hpp"
#include "state/state_codec.hpp"

#ifdef WEFT_HAVE_MTMD
using weft_test::nmse;
using weft_test::random_tokens;
using weft_test::throws_weft;

using namespace img_test;
using namespace mrope_test;


// One or two images among text, beside seven text-only conversations under
// random budgets and batch sizes (an image may be wider than a batch):
// mtmd's decode alone, within 8x the batch-shape noise raw llama.cpp shows
// for this very conversation beside the same neighbours.
TEST(ImagesMrope, TextImageTextMatchesMtmdHelper) {
  const auto &f = qwen();
  ASSERT_TRUE(f.projector.mrope());
  double worst_image = 0, worst_text = 0, worst_floor = 0;
  bool wider_than_tall = false, taller_than_wide = false, fewer_positions = false, one_wide = false;
  for (unsigned seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    const std::uint32_t n_batch = seed % 2 == 0 ? 32 : 64;
    weft::Executor ex(f.model, params(n_batch, f));
    std::vector<std::vector<weft::Token>> text;
    auto convs = neighbours(ex, rng, 7, &text);
    const Scene s = scene(rng, 1 + static_cast<int>(seed % 2));
    auto c = prompt_scene(ex, s);
    const auto spans = c.images();
    ASSERT_EQ(spans.size(), s.imgs.size());
    for (const auto &sp : spans) {
      // M-RoPE: fewer positions than cells, but for a grid one cell wide
      // or tall (its cells still share one position: sanitizer builds check
      // the KV ledger's positions against llama.cpp's after every step).
      fewer_positions |= sp.n_pos < sp.n_tokens;
      one_wide |= sp.n_pos == sp.n_tokens;
      EXPECT_EQ(sp.n_pos, mtmd_input_chunk_get_n_pos(s.parts[&sp - spans.data()].image));
      const auto *t = mtmd_input_chunk_get_tokens_image(s.parts[&sp - spans.data()].image);
      const auto nx = mtmd_image_tokens_get_decoder_pos(t, 0, sp.n_tokens - 1).x + 1;
      wider_than_tall |= nx * nx > sp.n_tokens;
      taller_than_wide |= nx * nx < sp.n_tokens;
    }
    convs.push_back(c);
    run_until_logits(ex, convs, rng, n_batch);
    const auto input = s.input();
    const auto alone = ref(input);
    std::mt19937 noise_rng(1000 + seed);
    double floor = weft_test::batch_noise_floor(f.model);
    for (int t = 0; t < 4; ++t) {
      floor = std::max(floor, nmse(reference(input, static_cast<int>(n_batch), text, &noise_rng, f), alone));
    }
    worst_floor = std::max(worst_floor, floor);
    const double err = nmse(c.logits(), alone);
    worst_image = std::max(worst_image, err);
    EXPECT_LT(err, 8 * floor) << "seed " << seed << ": nmse " << err << " vs this conversation's floor " << floor;
    for (int i = 0; i < 7; ++i) {
      expect_logits(convs[i], weft_test::reference_logits(f.model, text[i]), fmt::format("seed {} text {}", seed, i),
                    &worst_text, f);
    }
  }
  EXPECT_TRUE(wider_than_tall && taller_than_wide && fewer_positions && one_wide)
      << "the seeds should give grids of every shape";
  RecordProperty("nmse_image_conversation", fmt::format("{:.3g}", worst_image));
  RecordProperty("image_noise_floor", fmt::format("{:.3g}", worst_floor));
  std::printf("worst nmse: M-RoPE image conversation %.3g (its raw floor %.3g), text %.3g\n", worst_image,
              worst_floor, worst_text);
}

// The same positions after a fork, rewinds to the image's end and to before
// it, and a removal of text before the image, which an M-RoPE cache cannot
// shift: the rest is decoded again, image included, from its embeddings.
TEST(ImagesMrope, ForkRewindRemove) {
  const auto &f = qwen();
  const auto &m = f.model;
  std::mt19937 rng(7);
  weft::Executor ex(m, params(64, f));
  auto others = neighbours(ex, rng, 3);
  const Scene s = scene(rng, 1);
  auto c = prompt_scene(ex, s);
  run_until_logits(ex, {c}, rng, 64);
  expect(c, s.input(), "decoded");
  const std::uint32_t begin = c.images()[0].begin, end = begin + c.images()[0].n_tokens;
  const auto &p = s.parts[0];

  auto child = c.fork();
  const auto x = random_tokens(rng, m, 7), y = random_tokens(rng, m, 5);
  child.prompt(x);
  c.prompt(y);
  others[0].prompt(random_tokens(rng, m, 11));
  run_until_logits(ex, {c, child, others[0]}, rng, 64);
  expect(child, {s.text[0], p.before, p.image, p.after, cat({s.text[1], x})}, "fork");
  expect(c, {s.text[0], p.before, p.image, p.after, cat({s.text[1], y})}, "fork's source");

  const std::uint32_t total = c.n_tokens();
  EXPECT_TRUE(throws_weft([&] { c.rewind(total - (begin + 1)); }, weft::Errc::invalid_argument, "image"));
  c.rewind(total - end);  // to the image's end: text continues at t + n_pos
  const auto z = random_tokens(rng, m, 6);
  c.prompt(z);
  run_until_logits(ex, {c}, rng, 64);
  expect(c, {s.text[0], p.before, p.image, z}, "rewind to the image's end");

  // Remove text before the image: later positions move down, the image's
  // with them.
  const std::uint32_t cut0 = 2, cut1 = static_cast<std::uint32_t>(s.text[0].size()) - 1;
  ASSERT_LT(cut0, cut1);
  c.remove(cut0, cut1);
  c.prompt(x);
  run_until_logits(ex, {c}, rng, 64);
  auto kept = s.text[0];
  kept.erase(kept.begin() + cut0, kept.begin() + cut1);
  expect(c, {kept, p.before, p.image, cat({z, x})}, "removal before the image");

  c.rewind(c.n_tokens() - static_cast<std::uint32_t>(kept.size()));
  EXPECT_TRUE(c.images().empty());
  c.prompt(y);
  run_until_logits(ex, {c}, rng, 64);
  expect_logits(c, weft_test::reference_logits(m, cat({kept, y})), "rewind before the image", nullptr, f);
  // The fork kept its image and its positions.
  child.prompt(y);
  run_until_logits(ex, {child}, rng, 64);
  expect(child, {s.text[0], p.before, p.image, p.after, cat({s.text[1], x, y})}, "fork after the source's edits");
}

// Saved (full KV and tokens-only) and loaded into another executor; an
// executor snapshot with a fork; parked to RAM, disk and recompute with one
// slot for three conversations.
TEST(ImagesMrope, StateAndSpill) {
  const auto &f = qwen();
  const auto &m = f.model;
  double worst = 0;
  for (unsigned seed = 1; seed <= 2; ++seed) {
    std::mt19937 rng(40 + seed);
    const Scene s = scene(rng, static_cast<int>(seed));
    weft::Executor ex(m, params(64, f));
    auto convs = neighbours(ex, rng, 3);
    auto c = prompt_scene(ex, s);
    convs.push_back(c);
    run_until_logits(ex, convs, rng, 64);
    const auto full = c.save();
    const auto tokens_only = c.save({.tokens_only = true});
    auto fork = c.fork();
    const auto x = random_tokens(rng, m, 4);
    fork.prompt(x);
    run_until_logits(ex, {fork}, rng, 64);
    const auto snap = ex.save_all();

    weft::Executor other(m, params(32, f));
    auto busy = neighbours(other, rng, 2);
    auto back = other.load(full);
    auto again = other.load(tokens_only);
    EXPECT_EQ(back.images()[0].n_pos, c.images()[0].n_pos);
    expect(back, s.input(), fmt::format("seed {}: loaded", seed), &worst);
    busy.push_back(again);
    run_until_logits(other, busy, rng, 32);
    expect(again, s.input(), fmt::format("seed {}: loaded tokens-only", seed), &worst);
    const auto y = random_tokens(rng, m, 1 + static_cast<int>(rng() % 9));
    back.prompt(y);
    again.prompt(y);
    run_until_logits(other, {back, again}, rng, 32);
    auto more = s.input();
    more.push_back(y);
    expect(back, more, fmt::format("seed {}: loaded, then text", seed), &worst);
    expect(again, more, fmt::format("seed {}: tokens-only, then text", seed), &worst);

    weft::Executor third(m, params(64, f));
    auto all = third.load_all(snap);
    ASSERT_EQ(all.size(), 5u);
    auto with_x = s.input();
    with_x.push_back(x);
    auto lc = all.at(c.id()), lfork = all.at(fork.id());
    EXPECT_EQ(lc.images()[0].id, lfork.images()[0].id);  // still one image
    expect(lc, s.input(), fmt::format("seed {}: snapshot, source", seed), &worst);
    expect(lfork, with_x, fmt::format("seed {}: snapshot, fork", seed), &worst);
    lfork.prompt(y);
    run_until_logits(third, {lfork}, rng, 64);
    with_x.push_back(y);
    expect(lfork, with_x, fmt::format("seed {}: snapshot's fork, then text", seed), &worst);
  }

  const auto dir = weft_test::temp_dir("images-mrope-spill");
  for (const SpillTier &t : spill_tiers(dir.string())) {
    std::mt19937 rng(100 + static_cast<unsigned>(t.where));
    auto p = params(32, f);
    p.n_seq_max = 1;
    p.spill = t.spill;
    weft::Executor ex(m, p);
    const Scene s = scene(rng, 2);
    auto c = prompt_scene(ex, s);
    run_until_logits(ex, {c}, rng, 32);
    auto others = neighbours(ex, rng, 2);
    run_until_logits(ex, others, rng, 32);
    EXPECT_EQ(c.residency(), t.where) << t.name;
    const auto x = random_tokens(rng, m, 5);
    c.prompt(x);
    run_until_logits(ex, {c}, rng, 32);
    EXPECT_EQ(c.residency(), weft::Residency::resident) << t.name;
    auto more = s.input();
    more.push_back(x);
    expect(c, more, fmt::format("parked to {} and back", t.name), &worst);
  }
  RecordProperty("nmse_worst", fmt::format("{:.3g}", worst));
}

namespace {

// Where `pattern` starts in `bytes` (exactly once), else npos.
std::size_t find_once(const std::vector<std::uint8_t> &bytes, const std::vector<std::uint8_t> &pattern) {
  std::size_t at = std::string::npos;
  for (std::size_t i = 0; i + pattern.size() <= bytes.size(); ++i) {
    if (std::memcmp(bytes.data() + i, pattern.data(), pattern.size()) != 0) continue;
    if (at != std::string::npos) return std::string::npos;
    at = i;
  }
  return at;
}

template <class... T> std::vector<std::uint8_t> le(T... v) {
  std::vector<std::uint8_t> out;
  (..., [&](std::uint32_t x) {
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<std::uint8_t>(x >> (8 * k)));
  }(v));
  return out;
}

void fix_crc(std::vector<std::uint8_t> &b) {
  const std::uint32_t crc = weft::detail::crc32(std::span(b).first(b.size() - 4));
  std::memcpy(b.data() + b.size() - 4, &crc, 4);
}

}  // namespace

// An image record's grid width (version 5) must give its positions; a
// version 4 state (no grid width: ordinary positions) with an image loads.
TEST(ImagesMrope, GridInTheStateFormat) {
  std::mt19937 rng(3);
  {
    const auto &f = qwen();
    weft::Executor ex(f.model, params(64, f));
    const Scene s = scene(rng, 1);
    auto c = prompt_scene(ex, s);
    run_until_logits(ex, {c}, rng, 64);
    const auto sp = c.images()[0];
    auto blob = c.save();
    const auto nx = mtmd_image_tokens_get_decoder_pos(mtmd_input_chunk_get_tokens_image(s.parts[0].image), 0,
                                                      sp.n_tokens - 1).x + 1;
    const std::size_t at = find_once(blob, le(sp.begin, sp.n_tokens, sp.n_pos, nx));
    ASSERT_NE(at, std::string::npos);
    for (std::uint32_t bad : {0u, sp.n_tokens + 1}) {
      auto b = blob;
      std::memcpy(b.data() + at + 12, &bad, 4);
      fix_crc(b);
      EXPECT_TRUE(throws_weft([&] { (void)ex.load(b); }, weft::Errc::corrupt, "grid")) << bad;
    }
    EXPECT_EQ(ex.stats().conversations, 1u);
    // A grid one cell wide gives n_pos == n_tokens, so a width of 0 passes the
    // codec; the loader still refuses an ordinary layout for an M-RoPE projector.
    auto d = ex.create();
    const Rgb narrow = random_image(rng, 20, 200);
    d.prompt(s.text[0]);
    d.prompt_image(narrow.w, narrow.h, narrow.px);
    run_until_logits(ex, {d}, rng, 64);
    const auto ns = d.images()[0];
    ASSERT_EQ(ns.n_pos, ns.n_tokens) << "a 20 x 200 picture should be one cell wide";
    auto one_wide = d.save();
    const std::size_t at1 = find_once(one_wide, le(ns.begin, ns.n_tokens, ns.n_pos, 1u));
    ASSERT_NE(at1, std::string::npos);
    std::memset(one_wide.data() + at1 + 12, 0, 4);
    fix_crc(one_wide);
    EXPECT_TRUE(throws_weft([&] { (void)ex.load(one_wide); }, weft::Errc::corrupt, "laid out for ordinary positions"));
    EXPECT_EQ(ex.stats().conversations, 2u);
  }
  {
    const auto &f = fixture();  // gemma3: ordinary positions
    weft::Executor ex(f.model, params(64, f));
    auto c = ex.create();
    const auto a = random_tokens(rng, f.model, 9, true);
    const Rgb img = image(rng);
    const auto parts = tokenize(img, f);
    c.prompt(a);
    c.prompt_image(img.w, img.h, img.px);
    run_until_logits(ex, {c}, rng, 64);
    const auto sp = c.images()[0];
    auto v4 = c.save();
    const std::size_t at = find_once(v4, le(sp.begin, sp.n_tokens, sp.n_pos, 0u));
    ASSERT_NE(at, std::string::npos);
    // Version 5's grid width and audio flag go.
    v4.erase(v4.begin() + static_cast<std::ptrdiff_t>(at + 12), v4.begin() + static_cast<std::ptrdiff_t>(at + 17));
    v4[8] = 4;
    fix_crc(v4);
    auto back = ex.load(v4);
    ASSERT_EQ(back.images().size(), 1u);
    expect_logits(back, reference({a, parts.before, parts.image, parts.after}), "version 4 with an image");
  }
}

#endif  // WEFT_HAVE_MTMD
