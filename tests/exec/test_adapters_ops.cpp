// Adapters under budgets and bad input: groups take turns under a tight
// budget, bad adapters are refused while other conversations go on, and an
// adapter keeps its model alive.
#include <gtest/gtest.h>

#include <random>

#include "exec/adapter_fixture.hpp"

using namespace adapter_test;

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

