// Images in the executor: a conversation with text, an image and text,
// decoded by weft beside text-only conversations, has the logits that
// mtmd_helper_eval_chunks gives on raw llama.cpp + mtmd for it alone; the
// same after a fork and after rewinds; the encoder never runs inside a
// step; bad images are typed errors while others generate.
#include <gtest/gtest.h>
#include <llama.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <variant>
#include "exec/test_access.hpp"
#include "reference.hpp"
#include "weft/make_mmproj.hpp"

#ifdef WEFT_HAVE_MTMD
#include <mtmd-helper.h>
#include <mtmd.h>

#include "core/mtmd_log.hpp"

using weft_test::logits_tolerance;
using weft_test::nmse;
using weft_test::random_tokens;
using weft_test::throws_weft;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Rgb {
  std::uint32_t w = 0, h = 0;
  std::vector<std::uint8_t> px;
};

Rgb random_image(std::mt19937 &rng, std::uint32_t w, std::uint32_t h) {
  Rgb img{w, h, std::vector<std::uint8_t>(std::size_t(w) * h * 3)};
  for (auto &p : img.px) p = static_cast<std::uint8_t>(rng() >> 24);
  return img;
}

// The gemma3 projector for tiny, loaded once for weft and once for the
// reference's own mtmd context.
struct Fixture {
  std::string path;
  weft::Projector projector;
  mtmd_context *mctx = nullptr;  // never freed: shared by the binary's tests
};

const Fixture &fixture() {
  static const Fixture f = [] {
    static const fs::path dir = weft_test::temp_dir("images");
    Fixture x;
    x.path = (dir / "gemma3.gguf").string();
    weft::make_mmproj({.base = weft_test::tiny_path(), .out = x.path, .seed = 1});
    x.projector = weft::Projector::load(weft_test::tiny(), {.path = x.path, .n_threads = 2});
    weft::detail::ensure_mtmd_log();
    auto p = mtmd_context_params_default();
    p.use_gpu = false;
    p.n_threads = 2;
    p.print_timings = false;
    p.warmup = false;
    x.mctx = mtmd_init_from_file(x.path.c_str(), weft_test::tiny().impl()->model, p);
    EXPECT_NE(x.mctx, nullptr);
    return x;
  }();
  return f;
}

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

ImageParts tokenize(const Rgb &img) {
  const auto &f = fixture();
  ImageParts out;
  out.chunks = std::make_shared<Chunks>();
  mtmd_bitmap *bitmap = mtmd_bitmap_init(img.w, img.h, img.px.data());
  const char *marker = mtmd_default_marker();
  const mtmd_input_text text{marker, std::strlen(marker), false, true};
  const mtmd_bitmap *bitmaps[] = {bitmap};
  EXPECT_EQ(mtmd_tokenize(f.mctx, out.chunks->chunks, &text, bitmaps, 1), 0);
  mtmd_bitmap_free(bitmap);
  for (std::size_t i = 0; i < mtmd_input_chunks_size(out.chunks->chunks); ++i) {
    const auto *c = mtmd_input_chunks_get(out.chunks->chunks, i);
    if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_IMAGE) {
      out.image = c;
      continue;
    }
    std::size_t n = 0;
    const llama_token *t = mtmd_input_chunk_get_tokens_text(c, &n);
    (out.image ? out.after : out.before).insert((out.image ? out.after : out.before).end(), t, t + n);
  }
  EXPECT_NE(out.image, nullptr);
  return out;
}

// A conversation's input, part by part: text or an image chunk.
using Part = std::variant<std::vector<weft::Token>, const mtmd_input_chunk *>;

// Raw llama.cpp + mtmd, one sequence alone: text in chunks of n_batch and
// each image through mtmd_helper_eval_chunk_single (encode, then
// mtmd_helper_decode_image_chunk), positions continuing as the helper's.
// With `neighbours`, they are decoded first into sequences 1.. of the same
// unified cache, and `rng` splits the text into random chunk widths: the
// batch-shape noise raw llama.cpp itself shows for this conversation.
std::vector<float> reference(const std::vector<Part> &parts, int n_batch = 64,
                             const std::vector<std::vector<weft::Token>> &neighbours = {},
                             std::mt19937 *rng = nullptr) {
  const auto &m = weft_test::tiny();
  auto p = llama_context_default_params();
  p.n_ctx = 1024;
  p.n_batch = p.n_ubatch = static_cast<std::uint32_t>(n_batch);
  p.n_seq_max = static_cast<std::uint32_t>(1 + neighbours.size());
  p.kv_unified = true;
  // As weft's executor on the CPU (ExecutorParams::flash_attn automatic).
  p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.n_threads = p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(m.impl()->model, p);
  EXPECT_NE(ctx, nullptr);
  // Neighbour tokens not decoded yet: they fill the text batches of seq 0
  // (as weft's plan fills a batch), the rest is decoded at the end.
  std::vector<std::size_t> cursor(neighbours.size(), 0);
  std::size_t turn = 0;
  auto fill = [&](llama_batch &batch) {
    for (std::size_t tries = 0; batch.n_tokens < n_batch && tries < neighbours.size();) {
      const std::size_t q = turn++ % neighbours.size();
      if (cursor[q] >= neighbours[q].size()) {
        ++tries;
        continue;
      }
      tries = 0;
      const int r = batch.n_tokens++;
      batch.token[r] = neighbours[q][cursor[q]];
      batch.pos[r] = static_cast<llama_pos>(cursor[q]++);
      batch.n_seq_id[r] = 1;
      batch.seq_id[r][0] = static_cast<llama_seq_id>(q + 1);
      batch.logits[r] = false;
      if (rng != nullptr && (*rng)() % 4 == 0) break;  // batches of odd widths
    }
  };
  llama_pos n_past = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    if (const auto *text = std::get_if<std::vector<weft::Token>>(&parts[i])) {
      if (text->empty()) continue;
      llama_batch batch = llama_batch_init(n_batch, 0, 1);
      for (std::size_t s = 0, w = 0; s < text->size(); s += w) {
        w = rng != nullptr ? 1 + (*rng)() % static_cast<std::size_t>(n_batch) : static_cast<std::size_t>(n_batch);
        batch.n_tokens = 0;
        const std::size_t e = std::min(text->size(), s + w);
        for (std::size_t k = s; k < e; ++k) {
          const int r = batch.n_tokens++;
          batch.token[r] = (*text)[k];
          batch.pos[r] = n_past++;
          batch.n_seq_id[r] = 1;
          batch.seq_id[r][0] = 0;
          batch.logits[r] = last && k + 1 == text->size();
        }
        if (!neighbours.empty()) fill(batch);
        EXPECT_EQ(llama_decode(ctx, batch), 0);
      }
      llama_batch_free(batch);
    } else {
      EXPECT_EQ(mtmd_helper_eval_chunk_single(fixture().mctx, ctx, std::get<const mtmd_input_chunk *>(parts[i]),
                                              n_past, 0, n_batch, false, &n_past),
                0);
    }
  }
  // Seq 0's logits were the last decode's output.
  const float *l = llama_get_logits_ith(ctx, -1);
  std::vector<float> out(l, l + m.n_vocab());
  llama_free(ctx);
  return out;
}

// A PNG of `img`: stored (uncompressed) deflate blocks, so no zlib needed.
std::vector<std::uint8_t> png_of(const Rgb &img) {
  auto crc = [](const std::uint8_t *p, std::size_t n) {
    std::uint32_t c = 0xFFFFFFFFu;
    for (std::size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
  };
  auto be32 = [](std::vector<std::uint8_t> &o, std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) o.push_back(static_cast<std::uint8_t>(v >> s));
  };
  std::vector<std::uint8_t> out = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  auto chunk = [&](const char *type, const std::vector<std::uint8_t> &data) {
    be32(out, static_cast<std::uint32_t>(data.size()));
    std::vector<std::uint8_t> td(type, type + 4);
    td.insert(td.end(), data.begin(), data.end());
    out.insert(out.end(), td.begin(), td.end());
    be32(out, crc(td.data(), td.size()));
  };
  std::vector<std::uint8_t> ihdr;
  be32(ihdr, img.w);
  be32(ihdr, img.h);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB
  chunk("IHDR", ihdr);
  std::vector<std::uint8_t> raw;
  for (std::uint32_t y = 0; y < img.h; ++y) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), img.px.begin() + std::ptrdiff_t(y) * img.w * 3, img.px.begin() + std::ptrdiff_t(y + 1) * img.w * 3);
  }
  std::vector<std::uint8_t> z = {0x78, 0x01};
  std::uint32_t a = 1, b = 0;
  for (std::uint8_t v : raw) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  for (std::size_t off = 0; off < raw.size(); off += 65535) {
    const auto n = static_cast<std::uint16_t>(std::min<std::size_t>(65535, raw.size() - off));
    z.push_back(static_cast<std::uint8_t>(off + n == raw.size() ? 1 : 0));
    z.insert(z.end(), {static_cast<std::uint8_t>(n), static_cast<std::uint8_t>(n >> 8),
                       static_cast<std::uint8_t>(~n), static_cast<std::uint8_t>((~n) >> 8)});
    z.insert(z.end(), raw.begin() + std::ptrdiff_t(off), raw.begin() + std::ptrdiff_t(off + n));
  }
  be32(z, (b << 16) | a);
  chunk("IDAT", z);
  chunk("IEND", {});
  return out;
}

std::vector<weft::Token> cat(std::initializer_list<std::vector<weft::Token>> parts) {
  std::vector<weft::Token> out;
  for (const auto &p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

weft::ExecutorParams params(std::uint32_t n_batch = 64) {
  return {.n_ctx = 1024, .n_batch = n_batch, .n_seq_max = 8, .n_threads = 2, .projector = fixture().projector};
}

// Steps with random budgets until every one has its logits (an image waits
// for the encoder thread meanwhile: idle steps then); bounded.
void run_until_logits(weft::Executor &ex, const std::vector<weft::Conversation> &convs, std::mt19937 &rng,
                      std::uint32_t max_budget) {
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < until) {
    if (std::all_of(convs.begin(), convs.end(), [](const auto &c) { return c.has_logits(); })) return;
    const auto r = ex.step({.max_tokens = 1 + static_cast<std::uint32_t>(rng() % max_budget)});
    if (r.idle) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ADD_FAILURE() << "conversations did not get their logits within 60 s";
}

void expect_logits(const weft::Conversation &c, const std::vector<float> &ref, const std::string &what,
                   double *worst = nullptr) {
  const auto &m = weft_test::tiny();
  ASSERT_TRUE(c.has_logits()) << what;
  const double err = nmse(c.logits(), ref);
  if (worst != nullptr) *worst = std::max(*worst, err);
  EXPECT_LT(err, logits_tolerance(m)) << what << ": nmse " << err << " vs floor " << weft_test::batch_noise_floor(m);
}

}  // namespace

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
    c.prompt(a);
    c.prompt_image(img.w, img.h, img.px);
    c.prompt(b);
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
  c.prompt(a);
  c.prompt_image(img.w, img.h, img.px);
  c.prompt(b);
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
  weft::detail::set_encode_hook(ex, [&] {
    entered = true;
    const auto until = Clock::now() + std::chrono::seconds(30);  // bounded
    while (!release && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  auto other = ex.create();
  other.prompt(random_tokens(rng, m, 10, true));
  auto gen = other.generate({.max_tokens = 20});
  auto c = ex.create();
  const auto a = random_tokens(rng, m, 5, true), b = random_tokens(rng, m, 4);
  const Rgb img = random_image(rng, 30, 30);
  c.prompt(a);
  c.prompt_image(img.w, img.h, img.px);
  c.prompt(b);
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
  // logits of its raw pixels; saving it is refused (not yet).
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
  EXPECT_TRUE(throws_weft([&] { (void)c.save(); }, E::invalid_argument, "cannot save yet"));
}

#endif  // WEFT_HAVE_MTMD

#ifdef WEFT_HAVE_MTMD
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
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<Part>> inputs;
  std::vector<ImageParts> keep;
  for (int i = 0; i < 3; ++i) {
    const auto a = random_tokens(rng, m, 4 + i, true), b = random_tokens(rng, m, 3 + i);
    const Rgb img = random_image(rng, 32, 32);
    keep.push_back(tokenize(img));
    convs.push_back(ex.create());
    convs.back().prompt(a);
    convs.back().prompt_image(img.w, img.h, img.px);
    convs.back().prompt(b);
    inputs.push_back({a, keep.back().before, keep.back().image, keep.back().after, b});
  }
  // Every image encoded before the step that decodes them.
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < until && !std::all_of(convs.begin(), convs.end(), [](auto &c) {
           return c.images()[0].encoded;
         })) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  run_until_logits(ex, convs, rng, 64);
  EXPECT_EQ(embd_rows, std::vector<int>{48});
  for (int i = 0; i < 3; ++i) expect_logits(convs[i], reference(inputs[i]), fmt::format("image {}", i));
}

// M-RoPE projectors load, but their images are not scheduled yet.
TEST(Images, MropeProjectorRefused) {
  const auto dir = weft_test::temp_dir("images-mrope");
  const auto text = (dir / "qwen2vl-text.gguf").string(), proj = (dir / "qwen2vl.gguf").string();
  weft::make_qwen2vl_text_model(weft_test::tiny_path(), text);
  weft::make_mmproj({.base = text, .out = proj, .kind = weft::MmprojKind::qwen2vl});
  const auto model = weft::Model::load({.path = text});
  const auto p = weft::Projector::load(model, {.path = proj});
  EXPECT_TRUE(p.mrope());
  weft::Executor ex(model, {.n_ctx = 256, .n_batch = 32, .n_seq_max = 2, .n_threads = 1, .projector = p});
  auto c = ex.create();
  EXPECT_TRUE(throws_weft([&] { c.prompt_image(16, 16, std::vector<std::uint8_t>(16 * 16 * 3)); },
                          weft::Errc::incompatible, "M-RoPE"));
  // A projector for another model is refused by the executor.
  EXPECT_TRUE(throws_weft([&] { weft::Executor bad(weft_test::tiny(), {.n_ctx = 256, .n_batch = 32, .projector = p}); },
                          weft::Errc::invalid_argument, "another Model"));
  EXPECT_TRUE(throws_weft([&] { (void)weft::Projector::load(model, {.path = (dir / "none.gguf").string()}); },
                          weft::Errc::not_found));
  EXPECT_TRUE(throws_weft([&] { (void)weft::Projector::load(model, {.path = text}); }, weft::Errc::incompatible));
}
#endif  // WEFT_HAVE_MTMD
