// Per-conversation adapters against raw llama.cpp: a conversation decoded by
// weft under its own LoRA/control-vector setting, batched beside others
// under other settings, has the logits raw llama.cpp gives decoding it
// alone with that setting applied — across setting changes mid-history,
// fork, rewind, save/load, park to RAM/disk and recompute.
#include <gguf.h>
#include <gtest/gtest.h>
#include <llama.h>

#include <fmt/format.h>


#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "common.hpp"
#include "core/model_impl.hpp"
#include "modelgen/model_writer.hpp"
#include "exec/adapter_spans.hpp"
#include "reference.hpp"
#include "weft/make_adapter.hpp"

namespace {

namespace fs = std::filesystem;
using weft::AdapterKind;
using weft::Token;

constexpr int kLayers = 4;  // deeper than tiny, so control-vector layer ranges matter

struct Files {
  fs::path dir, model, a, b, c;
};

const Files &files() {
  static const Files made = [] {
    Files f;
    f.dir = weft_test::temp_dir("adapters");
    f.model = f.dir / "deep.gguf";
    weft::detail::write_random_model({.shape = {kLayers, 64, 4, 2, 256, 1024, false, weft::WeightType::f32},
                                      .type = weft::WeightType::f32,
                                      .preset = "adapter-exec-test",
                                      .seed = 11,
                                      .out = f.model.string()});
    auto make = [&](const char *name, AdapterKind kind, std::uint64_t seed) {
      const auto out = f.dir / name;
      weft::make_adapter({.base = f.model.string(), .out = out.string(), .kind = kind, .seed = seed});
      return out;
    };
    f.a = make("a.gguf", AdapterKind::lora, 1);
    f.b = make("b.gguf", AdapterKind::lora, 2);
    f.c = make("c.gguf", AdapterKind::control_vector, 3);
    return f;
  }();
  return made;
}

const weft::Model &deep() {
  static const weft::Model m = weft::Model::load({.path = files().model.string()});
  return m;
}

// --- The independent path: raw llama.cpp, its own adapter loads ---

struct RefUse {
  fs::path path;
  float scale = 1;
  int l0 = -1, l1 = -1;
};
using RefSetting = std::vector<RefUse>;
struct RefPart {
  std::uint32_t until;  // positions before this one (and after the last part's) use `setting`
  RefSetting setting;
};

llama_adapter_lora *ref_lora(const fs::path &p) {
  static std::map<fs::path, llama_adapter_lora *> loaded;  // freed with the model
  auto &l = loaded[p];
  if (l == nullptr) l = llama_adapter_lora_init(deep().impl()->model, p.c_str());
  EXPECT_NE(l, nullptr);
  return l;
}

// direction.<layer> tensors, read with gguf directly (not weft's loader).
std::vector<float> ref_cvec(const fs::path &p) {
  ggml_context *data = nullptr;
  gguf_context *g = gguf_init_from_file(p.c_str(), {false, &data});
  EXPECT_NE(g, nullptr);
  std::vector<float> out(64 * (kLayers - 1), 0.0f);
  for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
    const std::string name = gguf_get_tensor_name(g, i);
    const int layer = std::stoi(name.substr(name.find('.') + 1));
    const auto *t = ggml_get_tensor(data, name.c_str());
    for (int j = 0; j < 64; ++j) out[(layer - 1) * 64 + j] += static_cast<const float *>(t->data)[j];
  }
  gguf_free(g);
  ggml_free(data);
  return out;
}

void ref_apply(llama_context *ctx, const RefSetting &s) {
  std::vector<llama_adapter_lora *> loras;
  std::vector<float> scales;
  std::vector<float> cvec;
  int l0 = -1, l1 = -1;
  for (const RefUse &u : s) {
    if (u.path == files().c) {
      const auto dir = ref_cvec(u.path);
      if (cvec.empty()) cvec.assign(dir.size(), 0.0f);
      const int a = u.l0 < 0 ? 1 : u.l0, b = u.l1 < 0 ? kLayers - 1 : u.l1;
      for (int l = a; l <= b; ++l) {
        for (int j = 0; j < 64; ++j) cvec[(l - 1) * 64 + j] += u.scale * dir[(l - 1) * 64 + j];
      }
      l0 = l0 < 0 ? a : std::min(l0, a);
      l1 = std::max(l1, b);
    } else {
      loras.push_back(ref_lora(u.path));
      scales.push_back(u.scale);
    }
  }
  ASSERT_EQ(llama_set_adapters_lora(ctx, loras.empty() ? nullptr : loras.data(), loras.size(),
                                    scales.empty() ? nullptr : scales.data()),
            0);
  ASSERT_EQ(llama_set_adapter_cvec(ctx, cvec.empty() ? nullptr : cvec.data(), cvec.size(), 64, l0, l1), 0);
}

// Last-token logits of `tokens` decoded alone, each part under its setting.
std::vector<float> ref_logits(const std::vector<Token> &tokens, const std::vector<RefPart> &parts, int chunk = 32) {
  auto p = llama_context_default_params();
  p.n_ctx = 1024;
  p.n_batch = p.n_ubatch = 32;
  p.n_seq_max = 1;
  p.n_threads = p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(deep().impl()->model, p);
  EXPECT_NE(ctx, nullptr);
  llama_batch batch = llama_batch_init(32, 0, 1);
  std::size_t pos = 0;
  for (std::size_t k = 0; k < parts.size() && pos < tokens.size(); ++k) {
    const std::size_t until = k + 1 == parts.size() ? tokens.size() : std::min<std::size_t>(parts[k].until, tokens.size());
    ref_apply(ctx, parts[k].setting);
    while (pos < until) {
      batch.n_tokens = 0;
      for (; pos < until && batch.n_tokens < chunk; ++pos) {
        const int i = batch.n_tokens++;
        batch.token[i] = tokens[pos];
        batch.pos[i] = static_cast<llama_pos>(pos);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = pos + 1 == tokens.size();
      }
      EXPECT_EQ(llama_decode(ctx, batch), 0);
    }
  }
  const float *l = llama_get_logits_ith(ctx, -1);
  std::vector<float> out(l, l + deep().n_vocab());
  llama_batch_free(batch);
  llama_free(ctx);
  return out;
}

// llama.cpp's own noise under a setting: sequences decoded beside others in
// batches of every shape vs. each alone, all under the setting, as
// weft_test::batch_noise_floor measures it for the base model. A LoRA adds
// matmuls whose rounding depends on the batch shape too.
double setting_floor(const RefSetting &s) {
  return weft_test::measure_batch_noise(
      deep(), 8, [&](llama_context *ctx) { ref_apply(ctx, s); },
      [&](const std::vector<Token> &t) { return ref_logits(t, {{UINT32_MAX, s}}); });
}

// Seconds each, and every test process needs some: cached next to the test
// models by the model's fingerprint and the setting (the files are the same
// bytes in every process: seeded).
double cached_floor(const RefSetting &s) {
  std::string key = fmt::format("{:016x}", deep().fingerprint());
  for (const RefUse &u : s) key += fmt::format(";{}:{}:{}:{}", u.path.filename().string(), u.scale, u.l0, u.l1);
  return weft_test::cached_measurement("adapter-floors.txt", key, [&] { return setting_floor(s); });
}

// 8x the larger floor, as logits_tolerance does for the base model.
double tolerance(const std::vector<RefPart> &parts) {
  // (Not weft_test::batch_noise_floor: its cache holds the tiny model's.)
  double tol = 8.0 * cached_floor({});
  for (const RefPart &p : parts) tol = std::max(tol, 8.0 * cached_floor(p.setting));
  return tol;
}

// --- The same settings through weft ---

struct Settings {
  weft::Adapter a, b, c;
  std::vector<RefSetting> ref;
  std::vector<std::vector<weft::AdapterUse>> uses;
};

Settings settings(const weft::Model &m) {
  Settings s{m.load_adapter(files().a), m.load_adapter(files().b), m.load_adapter(files().c), {}, {}};
  const auto &f = files();
  auto add = [&](RefSetting r, std::vector<weft::AdapterUse> u) {
    s.ref.push_back(std::move(r));
    s.uses.push_back(std::move(u));
  };
  add({}, {});
  add({{f.a}}, {{s.a}});
  add({{f.b, 0.7f}}, {{s.b, 0.7f}});
  add({{f.a, 0.5f}, {f.b, 1.5f}}, {{s.b, 1.5f}, {s.a, 0.5f}});  // order does not matter
  add({{f.c}}, {{s.c}});
  add({{f.c, 2.0f, 2, 3}}, {{s.c, 2.0f, 2, 3}});
  add({{f.a}, {f.c, 1.0f, 1, 2}}, {{s.a}, {s.c, 1.0f, 1, 2}});
  return s;
}

weft::ExecutorParams params(std::uint32_t n_seq_max = 8) {
  weft::ExecutorParams p;
  p.n_ctx = 2048;
  p.n_batch = 64;
  p.n_seq_max = n_seq_max;
  p.n_threads = 2;
  return p;
}

// A conversation and what the reference must decode for it.
struct Tracked {
  weft::Conversation conv;
  std::vector<RefPart> parts;
  void set(const Settings &s, std::size_t k) {
    conv.set_adapters(s.uses[k]);
    const std::uint32_t n = conv.n_tokens();
    if (!parts.empty() && parts.back().until > n) parts.back().until = n;
    if (!parts.empty() && parts.back().until == 0) parts.pop_back();
    if (!parts.empty()) parts.back().until = n;
    parts.push_back({UINT32_MAX, s.ref[k]});
  }
  ::testing::AssertionResult matches() const {
    const double tol = tolerance(parts);
    const auto got = conv.logits();
    const auto want = ref_logits(conv.tokens(), parts);
    const double e = weft_test::nmse(got, want);
    if (e <= tol) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "conversation " << conv.id() << ": nmse " << e << " > " << tol;
  }
};

}  // namespace

TEST(Adapters, SettingsReallyDiffer) {
  const auto s = settings(deep());
  std::mt19937 rng(1);
  const auto tokens = weft_test::random_tokens(rng, deep(), 24, true);
  const auto base = ref_logits(tokens, {{UINT32_MAX, {}}});
  double tol = 0;
  for (std::size_t k = 0; k < s.ref.size(); ++k) {
    const double t = tolerance({{UINT32_MAX, s.ref[k]}});
    std::printf("setting %zu: batch-shape floor x8 = %.3g\n", k, t);
    tol = std::max(tol, t);
  }
  // Each setting moves the logits far beyond the tolerance, so a test below
  // that applies the wrong one (or none) fails.
  for (std::size_t k = 1; k < s.ref.size(); ++k) {
    EXPECT_GT(weft_test::nmse(ref_logits(tokens, {{UINT32_MAX, s.ref[k]}}), base), 1000 * tol) << "setting " << k;
  }
  // And a control vector's layer range matters.
  EXPECT_GT(weft_test::nmse(ref_logits(tokens, {{UINT32_MAX, s.ref[4]}}),
                            ref_logits(tokens, {{UINT32_MAX, {{files().c, 1.0f, 2, 3}}}})),
            1000 * tol);
}

TEST(Adapters, BatchedBesideOtherSettingsEqualsDecodingAlone) {
  for (std::uint32_t seed : {1u, 2u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    weft::Executor ex(deep(), params());
    const auto s = settings(deep());
    std::vector<Tracked> convs;
    for (int i = 0; i < 8; ++i) {
      Tracked t{ex.create(), {}};
      t.set(s, rng() % s.uses.size());
      t.conv.prompt(weft_test::random_tokens(rng, deep(), 5 + static_cast<int>(rng() % 60), true));
      convs.push_back(std::move(t));
    }
    weft_test::run_until_idle(ex, &rng, 40);
    for (const auto &t : convs) EXPECT_TRUE(t.matches());
    // A new setting mid-history applies to later tokens only; generated
    // tokens decode under it too.
    for (auto &t : convs) {
      t.set(s, rng() % s.uses.size());
      t.conv.prompt(weft_test::random_tokens(rng, deep(), 1 + static_cast<int>(rng() % 30)));
      if (rng() % 2 == 0) t.conv.generate({.max_tokens = 4});
    }
    weft_test::run_until_idle(ex, &rng, 40);
    for (const auto &t : convs) EXPECT_TRUE(t.matches());
    EXPECT_GT(ex.stats().adapter_switches, 0u);
  }
}

TEST(Adapters, HistoryOperationsKeepEachPositionsSetting) {
  const auto dir = weft_test::temp_dir("adapters-spill");
  auto p = params(4);
  p.spill.disk_dir = dir.string();
  weft::Executor ex(deep(), p);
  const auto s = settings(deep());
  std::mt19937 rng(7);
  Tracked t{ex.create(), {}};
  t.set(s, 1);
  t.conv.prompt(weft_test::random_tokens(rng, deep(), 40, true));
  weft_test::run_until_idle(ex);
  t.set(s, 6);
  t.conv.prompt(weft_test::random_tokens(rng, deep(), 25));
  weft_test::run_until_idle(ex);
  ASSERT_TRUE(t.matches());

  // Fork: the child inherits history and setting, then goes its own way.
  Tracked child{t.conv.fork(), t.parts};
  EXPECT_EQ(child.conv.adapters().size(), 2u);
  child.set(s, 5);
  child.conv.prompt(weft_test::random_tokens(rng, deep(), 9));
  weft_test::run_until_idle(ex);
  EXPECT_TRUE(child.matches());

  // Rewind into the second setting's tokens, then on under a third.
  t.conv.rewind(10);
  t.parts.back().until = UINT32_MAX;
  weft_test::run_until_idle(ex);
  EXPECT_TRUE(t.matches());
  t.set(s, 3);
  t.conv.prompt(weft_test::random_tokens(rng, deep(), 7));
  weft_test::run_until_idle(ex);
  EXPECT_TRUE(t.matches());

  // Save/load into another executor with the adapters loaded there.
  {
    weft::Executor other(deep(), params(2));
    Tracked loaded{other.load(t.conv.save()), t.parts};
    EXPECT_TRUE(loaded.matches());
    loaded.conv.prompt(weft_test::random_tokens(rng, deep(), 5));
    weft_test::run_until_idle(other);
    EXPECT_TRUE(loaded.matches());
  }

  // Tokens only: every position is decoded again, each under its setting.
  {
    weft::Executor other(deep(), params(2));
    Tracked again{other.load(child.conv.save({.tokens_only = true})), child.parts};
    weft_test::run_until_idle(other);
    EXPECT_TRUE(again.matches());
  }

  // Park to RAM, disk and recompute: restored or re-decoded alike.
  for (int tier = 0; tier < 3; ++tier) {
    SCOPED_TRACE("tier " + std::to_string(tier));
    auto q = params(2);
    if (tier >= 1) q.spill.ram_bytes = 0;
    if (tier == 1) q.spill.disk_dir = dir.string();
    weft::Executor other(deep(), q);
    Tracked moved{other.load(child.conv.save()), child.parts};
    weft_test::run_until_idle(other);
    ASSERT_TRUE(moved.conv.park());
    weft_test::run_until_idle(other);
    EXPECT_EQ(moved.conv.residency(),
              tier == 0 ? weft::Residency::ram : tier == 1 ? weft::Residency::disk : weft::Residency::recompute);
    moved.conv.prompt(weft_test::random_tokens(rng, deep(), 3));
    weft_test::run_until_idle(other);
    EXPECT_TRUE(moved.matches());
  }
}

TEST(Adapters, PrefixReuseNeverCrossesSettings) {
  weft::Executor ex(deep(), params());
  const auto s = settings(deep());
  std::mt19937 rng(3);
  const auto lore = weft_test::random_tokens(rng, deep(), 96, true);
  Tracked plain{ex.create(), {}}, under_a{ex.create(), {}};
  plain.set(s, 0);
  under_a.set(s, 1);
  plain.conv.prompt(lore);
  weft_test::run_until_idle(ex);
  under_a.conv.prompt(lore);
  weft_test::run_until_idle(ex);
  EXPECT_EQ(ex.stats().prefix_tokens_reused, 0u);  // the base model's KV is not A's
  EXPECT_TRUE(plain.matches());
  EXPECT_TRUE(under_a.matches());
  // The same setting shares.
  Tracked also_a{ex.create(), {}};
  also_a.set(s, 1);
  auto more = lore;
  more.push_back(lore[5]);
  also_a.conv.prompt(more);
  weft_test::run_until_idle(ex);
  EXPECT_GE(ex.stats().prefix_tokens_reused, 80u);
  EXPECT_TRUE(also_a.matches());
}

namespace {

// The longest run of steps a generating conversation went without a token,
// 8 conversations generating `max_tokens` each under `groups` settings, each
// step under `budget`; `steps` gets how many steps it took.
std::uint32_t longest_wait(std::size_t groups, const weft::StepBudget &budget, std::uint32_t max_tokens,
                           std::uint32_t rng_seed, std::uint32_t *steps = nullptr) {
  weft::Executor ex(deep(), params());
  const auto s = settings(deep());
  std::mt19937 rng(rng_seed);
  std::vector<weft::Conversation> convs;
  std::vector<weft::Generation> gens;
  for (std::size_t i = 0; i < 8; ++i) {
    convs.push_back(ex.create());
    convs.back().set_adapters(s.uses[1 + i % groups]);
    convs.back().prompt(weft_test::random_tokens(rng, deep(), 8, true));
  }
  weft_test::run_until_idle(ex);  // prompts first: then only generation
  for (auto &c : convs) gens.push_back(c.generate({.max_tokens = max_tokens}));
  std::vector<std::uint32_t> tokens(8, 0), since(8, 0);
  std::uint32_t worst = 0, step = 1;
  for (; step <= 2000; ++step) {
    ex.step(budget);
    for (std::size_t i = 0; i < 8; ++i) {
      const auto n = static_cast<std::uint32_t>(gens[i].result().tokens.size());
      if (n != tokens[i] || gens[i].done()) since[i] = step;
      tokens[i] = n;
      worst = std::max(worst, step - since[i]);
    }
    if (std::all_of(gens.begin(), gens.end(), [](auto &g) { return g.done(); })) break;
  }
  for (auto &g : gens) EXPECT_TRUE(g.done());
  EXPECT_GT(ex.stats().adapter_switches, groups > 1 ? 10u : 0u);
  if (steps != nullptr) *steps = step;
  return worst;
}

}  // namespace

TEST(Adapters, GroupsTakeTurnsUnderATightTimeBudget) {
  // A time budget that holds a group or two a step (each costs a call and a
  // switch): the step serves the most urgent groups, the others lead the
  // next step, so every conversation keeps progressing.
  std::uint32_t steps = 0;
  const std::uint32_t worst = longest_wait(4, {.max_time = std::chrono::microseconds(300)}, 10, 9, &steps);
  std::printf("time budget: done in %u steps, longest wait between tokens %u steps\n", steps, worst);
  // Four groups, at least one served a step, each waiting its turn.
  EXPECT_LE(worst, 16u);
}

TEST(Adapters, GroupsTakeTurnsUnderATightBudget) {
  // No group starves: with four settings each conversation waits no longer
  // between tokens than with one (the turns are per conversation, whatever
  // its group), beyond a step of slack.
  const weft::StepBudget three{.max_tokens = 3};
  const std::uint32_t one = longest_wait(1, three, 16, 5), four = longest_wait(4, three, 16, 5);
  std::printf("longest wait between tokens: %u steps with one group, %u with four\n", one, four);
  EXPECT_LE(four, one + 1);
  EXPECT_LE(one, 4u);  // 8 conversations, 3 tokens a step
}

TEST(Adapters, BadInputIsRefusedAndOthersGoOn) {
  const auto s = settings(deep());
  weft::Executor ex(deep(), params());
  auto busy = ex.create();
  busy.set_adapters({{s.a}});
  busy.prompt(std::vector<Token>{deep().bos(), 10, 11, 12});
  auto gen = busy.generate({.max_tokens = 6});
  auto c = ex.create();
  using weft::Errc;
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_adapters({{weft::Adapter{}}}); }, Errc::invalid_argument, "empty"));
  const float nan = std::nanf(""), inf = INFINITY;
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_adapters({{s.a, nan}}); }, Errc::invalid_argument, "not finite"));
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_adapters({{s.c, inf}}); }, Errc::invalid_argument, "not finite"));
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_adapters({{s.c, 1.0f, 0, 2}}); }, Errc::invalid_argument, "[1, 3]"));
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_adapters({{s.c, 1.0f, 2, 4}}); }, Errc::invalid_argument, "[1, 3]"));
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_adapters({{s.c, 1.0f, 3, 2}}); }, Errc::invalid_argument, "empty"));
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_adapters({{s.a, 1.0f, 1, 2}}); }, Errc::invalid_argument, "LoRA"));
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_adapters({{s.a}, {s.a, 2.0f}}); }, Errc::invalid_argument, "twice"));
  // Loaded for another model: another Model handle, even of the same file.
  const auto other = weft::Model::load({.path = files().model.string()});
  const auto foreign = other.load_adapter(files().a.string());
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_adapters({{foreign}}); }, Errc::invalid_argument, "another model"));
  EXPECT_TRUE(c.adapters().empty());  // unchanged by the refusals
  // Files.
  const auto dir = weft_test::temp_dir("adapters-bad");
  EXPECT_TRUE(weft_test::throws_weft([&] { deep().load_adapter((dir / "none.gguf").string()); }, Errc::not_found));
  weft_test::write_file(dir / "text.gguf", std::string_view("not a gguf at all"));
  EXPECT_TRUE(weft_test::throws_weft([&] { deep().load_adapter((dir / "text.gguf").string()); }, Errc::corrupt));
  EXPECT_TRUE(weft_test::throws_weft([&] { deep().load_adapter(files().model.string()); }, Errc::invalid_argument,
                                     "neither"));
  // A LoRA made for a narrower model: llama.cpp's shape check, no abort.
  const auto narrow = dir / "narrow.gguf";
  weft::detail::write_random_model({.shape = {kLayers, 32, 4, 2, 128, 256, false, weft::WeightType::f32},
                                    .type = weft::WeightType::f32,
                                    .preset = "adapter-exec-test",
                                    .seed = 2,
                                    .out = narrow.string()});
  weft::make_adapter({.base = narrow.string(), .out = (dir / "narrow-lora.gguf").string()});
  weft::make_adapter({.base = narrow.string(), .out = (dir / "narrow-cvec.gguf").string(),
                      .kind = AdapterKind::control_vector});
  EXPECT_TRUE(weft_test::throws_weft([&] { deep().load_adapter((dir / "narrow-lora.gguf").string()); },
                                     Errc::invalid_argument, "refused"));
  EXPECT_TRUE(weft_test::throws_weft([&] { deep().load_adapter((dir / "narrow-cvec.gguf").string()); },
                                     Errc::invalid_argument, "width"));
  // A state decoded under an adapter this executor's model has not loaded.
  const auto bytes = [&] {
    weft::Executor e2(other, params(2));
    auto x = e2.create();
    x.set_adapters({{foreign}});
    x.prompt(std::vector<Token>{deep().bos(), 5, 6});
    weft_test::run_until_idle(e2);
    return x.save();
  }();
  {
    const auto fresh = weft::Model::load({.path = files().model.string()});
    weft::Executor e3(fresh, params(2));
    EXPECT_TRUE(weft_test::throws_weft([&] { e3.load(bytes); }, Errc::not_found, "weft-lora-seed1"));
    EXPECT_EQ(e3.stats().conversations, 0u);
    const auto again = fresh.load_adapter(files().a.string());  // loaded: now it loads
    EXPECT_EQ(e3.load(bytes).adapters().size(), 1u);
  }
  // The busy one finished undisturbed.
  weft_test::run_until_idle(ex);
  EXPECT_TRUE(gen.done());
  EXPECT_EQ(gen.result().tokens.size(), 6u);
}

TEST(Adapters, AnAdapterKeepsItsModelAlive) {
  weft::Adapter a;
  {
    const auto m = weft::Model::load({.path = files().model.string()});
    a = m.load_adapter(files().a.string());
  }
  // The Model handle is gone; the adapter still answers and frees safely.
  EXPECT_EQ(a.kind(), AdapterKind::lora);
  EXPECT_NE(a.fingerprint(), 0u);
  weft::Executor ex(deep(), params(2));
  auto c = ex.create();
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_adapters({{a}}); }, weft::Errc::invalid_argument, "another model"));
}

// AdapterSpans against a plain vector of one setting per position, over
// seeded random records, rewinds and removes.
TEST(AdapterSpans, MatchesAPerPositionModel) {
  using weft::detail::AdapterConfig;
  using weft::detail::AdapterConfigPtr;
  std::vector<AdapterConfigPtr> cfgs{nullptr};
  for (std::uint64_t k = 1; k <= 3; ++k) {
    auto c = std::make_shared<AdapterConfig>();
    c->key = k;
    c->canon = {k};
    cfgs.push_back(c);
  }
  for (std::uint32_t seed = 1; seed <= 50; ++seed) {
    std::mt19937 rng(seed);
    weft::detail::AdapterSpans spans;
    std::vector<const AdapterConfig *> model;  // setting of each recorded position
    AdapterConfigPtr current = cfgs[rng() % cfgs.size()];
    for (int op = 0; op < 60; ++op) {
      const auto n = static_cast<std::uint32_t>(model.size());
      switch (rng() % 5) {
        case 0:
        case 1: {  // decode k positions at the end, or re-decode some recorded ones
          const std::uint32_t p = n == 0 || rng() % 3 != 0 ? n : static_cast<std::uint32_t>(rng() % n);
          const auto k = static_cast<std::uint32_t>(1 + rng() % 9);
          const std::uint32_t run = spans.run(p, k, current);
          ASSERT_GE(run, 1u);
          const AdapterConfigPtr &cfg = spans.at(p, current);
          for (std::uint32_t i = p; i < p + run; ++i) {
            const AdapterConfig *want = i < n ? model[i] : current.get();
            ASSERT_TRUE(weft::detail::same_adapters(want, cfg.get())) << "seed " << seed << " op " << op;
          }
          // The run stops at a change (or at k).
          if (run < k) {
            const std::uint32_t i = p + run;
            const AdapterConfig *next = i < n ? model[i] : current.get();
            ASSERT_FALSE(weft::detail::same_adapters(next, cfg.get()));
          }
          spans.record(p, run, cfg);
          for (std::uint32_t i = n; i < p + run; ++i) model.push_back(cfg.get());
          break;
        }
        case 2:
          current = cfgs[rng() % cfgs.size()];
          break;
        case 3: {
          const std::uint32_t to = n == 0 ? 0 : static_cast<std::uint32_t>(rng() % (n + 1));
          spans.truncate(to);
          model.resize(std::min<std::size_t>(model.size(), to));
          break;
        }
        case 4: {
          if (n == 0) break;
          const std::uint32_t a = static_cast<std::uint32_t>(rng() % n);
          const std::uint32_t b = a + static_cast<std::uint32_t>(rng() % (n - a + 1));
          spans.erase(a, b);
          model.erase(model.begin() + a, model.begin() + b);
          break;
        }
      }
      ASSERT_EQ(spans.end(), model.size());
      for (std::uint32_t i = 0; i < model.size(); ++i) {
        ASSERT_TRUE(weft::detail::same_adapters(spans.at(i, current).get(), model[i]))
            << "seed " << seed << " op " << op << " position " << i;
      }
      // Stored compactly: no two neighbouring spans alike, none when all base.
      const auto &v = spans.spans();
      for (std::size_t i = 1; i < v.size(); ++i) {
        ASSERT_LT(v[i - 1].start, v[i].start);
        ASSERT_FALSE(weft::detail::same_adapters(v[i - 1].cfg.get(), v[i].cfg.get()));
      }
    }
  }
}
