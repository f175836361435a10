// Game threads never wait for a step: every call a game makes returns while a
// step is held inside its decode or its sampling, and what the calls did is
// exactly right once the cache has followed (compared with a fresh decode of
// the same tokens, or with the same call made while no step runs).
#include <gtest/gtest.h>
#include <llama.h>

#include <chrono>
#include <functional>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"
#include "exec/test_access.hpp"
#include "reference.hpp"
#include "weft/make_model.hpp"

namespace {

using weft_test::random_tokens;
using weft_test::reference_logits;
using weft_test::run_until_idle;
using namespace std::chrono_literals;

weft::ExecutorParams params() {
  weft::ExecutorParams p{.n_ctx = 1024, .n_batch = 64, .n_seq_max = 12, .n_threads = 2};
  p.events = true;
  return p;
}

// The cache holds exactly what the ledger says, for every conversation.
void expect_cache_exact(weft::Executor &ex) {
  auto &core = weft::detail::TestAccess::core(ex);
  std::lock_guard lock(core.mu);
  for (const auto &[id, c] : core.convs.all) {
    EXPECT_NO_THROW(core.kv->verify(c->kv)) << "conversation " << id;
    if (c->kv.has_slot()) {
      EXPECT_EQ(c->kv.n(), c->n_decoded()) << "conversation " << id;
    }
  }
}

void expect_logits_fresh(const weft::Conversation &c, const weft::Model &m = weft_test::tiny()) {
  ASSERT_TRUE(c.has_logits());
  EXPECT_LT(weft_test::nmse(c.logits(), reference_logits(m, c.tokens())), weft_test::logits_tolerance(m));
}

// Holds the stepping thread inside the next llama_decode (or sample) until
// released; bounded so a failing test cannot hang the suite.
struct Gate {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> armed{false};
  void hold() {
    if (!armed.exchange(false)) return;
    entered.set_value();
    released.wait_for(30s);
  }
};

// Runs fn on another thread; true when it returned within the bound (a call
// that waited for the held step would not).
bool returns_promptly(const std::function<void()> &fn, std::string *error = nullptr) {
  auto f = std::async(std::launch::async, [&] {
    try {
      fn();
    } catch (const std::exception &e) {
      if (error) *error = e.what();
    }
  });
  const bool ok = f.wait_for(5s) == std::future_status::ready;
  if (!ok) f.wait();  // after the gate opens, for a clean exit
  return ok;
}

}  // namespace

TEST(NoWait, EveryGameCallReturnsWhileAStepDecodes) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(21);
  weft::Executor ex(m, params());
  // Conversations in every state a game has them in.
  auto talker = ex.create(), forked = ex.create(), rewound = ex.create(), shifted = ex.create(),
       gone = ex.create(), parked = ex.create(), sampled = ex.create();
  for (auto *c : {&talker, &forked, &rewound, &shifted, &gone, &parked, &sampled}) {
    c->prompt(random_tokens(rng, m, 40, true));
  }
  run_until_idle(ex);
  auto twin = ex.create();  // shifted's twin, shifted while no step runs
  twin.prompt(shifted.tokens());
  run_until_idle(ex);
  const auto saved = talker.save();
  const auto saved_tokens = talker.tokens();
  const auto forked_tokens = forked.tokens();
  auto gen = sampled.generate({.max_tokens = 400});

  Gate gate;
  weft::detail::set_decode_hook(ex, [&](const llama_batch &) {
    gate.hold();
    return 0;
  });
  talker.prompt(random_tokens(rng, m, 30));  // the step to hold decodes this
  gate.armed = true;
  std::thread stepper([&] { ex.step(); });
  ASSERT_EQ(gate.entered.get_future().wait_for(30s), std::future_status::ready);

  // Every game-facing call, while the step is inside llama_decode.
  std::optional<weft::Conversation> child, loaded, created;
  std::future<std::vector<std::uint8_t>> async_save;
  const std::uint32_t cells_before = ex.cells_free();
  std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"create", [&] { created = ex.create(); }},
      {"prompt", [&] { created->prompt(random_tokens(rng, m, 5, true)); }},
      {"fork", [&] { child = forked.fork(); }},
      {"rewind", [&] { rewound.rewind(7); }},
      {"remove", [&] { shifted.remove(3, 9); }},
      {"shift_left", [&] { shifted.shift_left(1, 2); }},
      {"dispose", [&] { gone.dispose(); }},
      {"park", [&] { EXPECT_TRUE(parked.park()); }},
      {"prefetch", [&] { parked.prefetch(); }},
      {"load", [&] { loaded = ex.load(saved); }},
      {"set_sampler", [&] { sampled.set_sampler({.temperature = 0.8f, .seed = 3}); }},
      {"set_priority", [&] { sampled.set_priority(2); }},
      {"cancel", [&] { gen.cancel(); }},
      {"generate", [&] { (void)forked.generate({.max_tokens = 2}); }},
      {"poll_events", [&] { (void)ex.poll_events(); }},
      {"stats", [&] { (void)ex.stats(); }},
      {"cells_free", [&] { (void)ex.cells_free(); }},
      {"readers",
       [&] {
         (void)talker.tokens(), (void)talker.n_tokens(), (void)talker.n_decoded(), (void)talker.n_queued();
         (void)talker.n_cells(), (void)talker.has_logits(), (void)talker.residency(), (void)talker.generation();
         (void)talker.error(), (void)gone.disposed(), (void)talker.has_logits();
       }},
      {"save_async", [&] { async_save = rewound.save_async(); }},
  };
  for (auto &[name, fn] : calls) {
    std::string error;
    EXPECT_TRUE(returns_promptly(fn, &error)) << name << " waited for the running step";
    EXPECT_EQ(error, "") << name;
  }
  // The save is the one thing that needs the boundary: not before it.
  EXPECT_EQ(async_save.wait_for(0s), std::future_status::timeout);
  // Effects are visible at once through the handles.
  EXPECT_EQ(child->tokens(), forked_tokens);
  EXPECT_TRUE(gone.disposed());
  EXPECT_EQ(loaded->tokens(), saved_tokens);
  gate.release.set_value();
  stepper.join();
  ASSERT_EQ(async_save.wait_for(30s), std::future_status::ready);
  const auto async_bytes = async_save.get();

  weft::detail::set_decode_hook(ex, nullptr);
  run_until_idle(ex);
  twin.remove(3, 9);
  twin.shift_left(1, 2);
  run_until_idle(ex);
  expect_cache_exact(ex);
  EXPECT_GT(ex.cells_free(), cells_before) << "the disposed conversation's cells came back";
  // Right, not just quick: each against an independent path.
  EXPECT_EQ(child->tokens(), forked_tokens);
  expect_logits_fresh(*child);
  expect_logits_fresh(rewound);
  expect_logits_fresh(*loaded);
  expect_logits_fresh(talker);
  EXPECT_EQ(shifted.tokens(), twin.tokens());
  EXPECT_LT(weft_test::nmse(shifted.logits(), twin.logits()), weft_test::logits_tolerance(m));
  // The bytes are rewound's state at that boundary: loaded, it is rewound.
  auto from_async = ex.load(async_bytes);
  run_until_idle(ex);
  EXPECT_EQ(from_async.tokens(), rewound.tokens());
  EXPECT_LT(weft_test::nmse(from_async.logits(), rewound.logits()), weft_test::logits_tolerance(m));
  EXPECT_EQ(gen.reason(), weft::FinishReason::cancelled);
  EXPECT_NE(parked.residency(), weft::Residency::resident);
}

TEST(NoWait, CallsReturnWhileAStepSamples) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(22);
  weft::Executor ex(m, params());
  auto a = ex.create(), b = ex.create();
  a.prompt(random_tokens(rng, m, 20, true));
  b.prompt(random_tokens(rng, m, 20, true));
  a.set_sampler({.temperature = 0.7f, .seed = 5});
  auto ga = a.generate({.max_tokens = 50});
  auto gb = b.generate({.max_tokens = 50});
  run_until_idle(ex);  // not idle while generating: bounded by max_tokens
  ASSERT_TRUE(ga.done());
  ga = a.generate({.max_tokens = 4});
  gb = b.generate({.max_tokens = 4});
  Gate gate;
  weft::detail::set_sample_hook(ex, [&] { gate.hold(); });
  gate.armed = true;
  std::thread stepper([&] { ex.step(); });
  ASSERT_EQ(gate.entered.get_future().wait_for(30s), std::future_status::ready);
  std::optional<weft::Conversation> child;
  std::vector<float> child_logits;
  std::vector<weft::Token> at_fork;
  std::vector<weft::Token> more = random_tokens(rng, m, 3);
  // A fork with no input of its own: its sampler copy is not there yet, so a
  // manual sample() is refused (typed), not raced.
  std::optional<weft::Conversation> waiting;
  std::string refusal;
  EXPECT_TRUE(returns_promptly([&] {
    waiting = a.fork();
    try {
      (void)waiting->sample();
    } catch (const weft::Error &e) {
      if (e.code() == weft::Errc::invalid_argument) refusal = e.what();
    }
  }));
  EXPECT_NE(refusal.find("in use by the running step"), std::string::npos) << refusal;
  EXPECT_TRUE(returns_promptly([&] {
    child = a.fork();  // a's sampler is in use: the child's copy comes after
    at_fork = a.tokens();
    // Input for the child before its cache is shared: the same step plans
    // it next, and must see it as the history says.
    child->prompt(more);
  }));
  EXPECT_TRUE(returns_promptly([&] { b.set_sampler({.temperature = 0.5f, .seed = 1}); }));
  EXPECT_TRUE(returns_promptly([&] { gb.cancel(); }));
  EXPECT_TRUE(returns_promptly([&] { (void)ex.stats(), (void)ex.poll_events(), (void)a.tokens(); }));
  gate.release.set_value();
  stepper.join();
  // The step went on to plan the child: with its cache as its history says.
  expect_cache_exact(ex);
  weft::detail::set_sample_hook(ex, nullptr);
  while (!ga.done()) ex.step();
  run_until_idle(ex);
  expect_cache_exact(ex);
  at_fork.insert(at_fork.end(), more.begin(), more.end());
  EXPECT_EQ(child->tokens(), at_fork);
  EXPECT_FALSE(child->error().has_value()) << child->error()->what();
  expect_logits_fresh(*child);
  EXPECT_NO_THROW((void)child->sample()) << "the fork got its sampler after the sampling phase";
  EXPECT_EQ(gb.reason(), weft::FinishReason::cancelled);
  EXPECT_EQ(ga.reason(), weft::FinishReason::max_tokens);
}

// Seeded random game threads against a running worker: whatever interleaving
// of operations and steps happens, the cache ends exact and every
// conversation's logits equal a fresh decode of its tokens.
void random_operations_against_a_worker(const weft::Model &m, std::uint32_t seeds) {
  std::uint64_t drafted = 0;
  for (std::uint32_t seed = 1; seed <= seeds; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    auto p = params();
    p.spill.ram_bytes = 64ull << 20;
    p.n_seq_max = 4;  // fewer slots than conversations: parking too
    weft::Executor ex(m, p);
    ex.start({.budget = {.max_tokens = 16}});
    std::vector<weft::Conversation> convs;
    std::vector<std::uint8_t> snapshot;
    for (int op = 0; op < 150; ++op) {
      if (convs.size() < 3 || rng() % 8 == 0) {
        convs.push_back(ex.create());
        convs.back().prompt(random_tokens(rng, m, 4 + static_cast<int>(rng() % 30), true));
        continue;
      }
      auto &c = convs[rng() % convs.size()];
      try {
        switch (rng() % 9) {
          case 0: c.prompt(random_tokens(rng, m, 1 + static_cast<int>(rng() % 12))); break;
          case 1: {
            weft::GenerateParams g{.max_tokens = 1 + static_cast<std::uint32_t>(rng() % 12)};
            if (rng() % 2 == 0) {
              // Drafts verified while game threads act (a small alphabet:
              // replies repeat, so lookup drafts).
              g.max_tokens += 12;
              g.speculative = weft::SpeculativeParams{.drafter = weft::Drafter::lookup, .ngram_min = 1, .adaptive = false};
              g.sampler = weft::SamplerParams{};
              for (weft::Token t : {300, 301, 302}) g.sampler->logit_bias.push_back({t, 30.0f});
            }
            (void)c.generate(g);
            break;
          }
          case 2: if (auto g = c.generation()) g->cancel(); break;
          case 3: convs.push_back(c.fork()); break;
          case 4: c.rewind(static_cast<std::uint32_t>(rng() % (c.n_tokens() + 1))); break;
          case 5: (void)c.park(); break;
          case 6: snapshot = c.save(); break;
          case 7: if (!snapshot.empty()) convs.push_back(ex.load(snapshot)); break;
          case 8: c.dispose(); break;
        }
      } catch (const weft::Error &e) {
        // Refusals a game would see (prompting while generating, an empty
        // conversation's generate, a disposed handle) are fine; nothing else.
        EXPECT_TRUE(e.code() == weft::Errc::invalid_argument || e.code() == weft::Errc::disposed) << e.what();
      }
      if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    }
    ex.stop();
    for (auto &c : convs) {
      if (c.disposed()) continue;
      if (auto g = c.generation()) g->cancel();
      if (c.n_tokens() == 0) continue;
      if (!c.has_logits() && c.n_queued() == 0) c.rewind(0);
    }
    run_until_idle(ex);
    expect_cache_exact(ex);
    for (auto &c : convs) {
      if (c.disposed() || c.n_tokens() == 0) continue;
      SCOPED_TRACE(c.id());
      EXPECT_EQ(c.n_queued(), 0u);
      expect_logits_fresh(c, m);
    }
    drafted += ex.stats().tokens_drafted;
  }
  // Only plain attention drafts (docs/EXECUTOR.md, "Speculative decoding").
  // How many drafts a plain model verifies here depends on how far the
  // worker gets before the game threads cancel or rewind (under TSan, none
  // in one run): Speculative.* cover drafting deterministically.
  if (m.memory() != weft::Model::Memory::plain) EXPECT_EQ(drafted, 0u);
  ::testing::Test::RecordProperty("drafted", static_cast<int>(drafted));
}

TEST(NoWait, RandomOperationsAgainstAWorkerKeepEveryConversationExact) {
  random_operations_against_a_worker(weft_test::tiny(), 4);
}

// The same on a sliding-window, a hybrid and a recurrent model, whose cuts
// re-decode or restore checkpoints (their state copied with the lock
// released, between decodes).
TEST(NoWait, RandomOperationsAgainstAWorkerOnEveryModelFamily) {
  const auto dir = weft_test::temp_dir("nowait-families");
  for (auto arch : {weft::ModelArch::gemma3, weft::ModelArch::lfm2, weft::ModelArch::mamba}) {
    SCOPED_TRACE(weft::model_arch_name(arch));
    const auto path = (dir / (std::string(weft::model_arch_name(arch)) + ".gguf")).string();
    weft::MakeModelParams mp;
    mp.arch = arch;
    mp.out = path;
    weft::make_model(mp);
    random_operations_against_a_worker(weft::Model::load({.path = path}), 2);
  }
}

// KV data that llama.cpp refuses, loaded while a worker runs: load() has
// returned already, so the conversation is decoded again from its tokens
// (with a warning) instead of the error a load with nobody stepping throws.
TEST(NoWait, ALoadRefusedAtTheWorkersBoundaryIsDecodedAgain) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(23);
  weft::Executor f32(m, {.n_ctx = 512, .n_batch = 64, .n_seq_max = 2, .kv_type = weft::KvType::f32});
  auto c = f32.create();
  c.prompt(random_tokens(rng, m, 24, true));
  run_until_idle(f32);
  const auto bytes = c.save();
  weft::Executor ex(m, params());
  ex.start();
  auto loaded = ex.load(bytes);  // would throw Errc::corrupt with no worker
  EXPECT_EQ(loaded.tokens(), c.tokens());
  auto expect = c.tokens();
  const auto more = random_tokens(rng, m, 5);
  expect.insert(expect.end(), more.begin(), more.end());
  loaded.prompt(more);
  for (int i = 0; i < 5000 && !(loaded.has_logits() && loaded.n_queued() == 0); ++i) std::this_thread::sleep_for(1ms);
  ex.stop();
  EXPECT_FALSE(loaded.error().has_value());
  EXPECT_EQ(loaded.tokens(), expect);
  EXPECT_EQ(ex.stats().recomputes, 1u) << "decoded again from its tokens";
  EXPECT_EQ(ex.stats().restores, 0u);
  expect_cache_exact(ex);
  expect_logits_fresh(loaded);
}

// A prompt on a game thread, while a step decodes, that needs the slot a
// prefix cache entry holds: the entry gives it up at the step's boundary,
// not on the game thread (evicting calls llama_memory_seq_rm, which must
// never run beside llama_decode: `weft serve` crashed with a double free).
TEST(NoWait, APromptNeverEvictsTheCacheOffTheBoundary) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(31);
  weft::Executor ex(m, {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 3, .n_threads = 2});
  auto &core = weft::detail::TestAccess::core(ex);
  auto cached_entries = [&] {
    std::lock_guard lock(core.mu);
    return core.kv->cache_entries();
  };
  auto gone = ex.create(), b = ex.create(), c = ex.create();
  for (auto *x : {&gone, &b, &c}) x->prompt(random_tokens(rng, m, 40, true));
  run_until_idle(ex);
  gone.dispose();  // its cells and slot stay as a prefix cache entry
  run_until_idle(ex);
  ASSERT_EQ(cached_entries(), 1u);
  ASSERT_EQ(ex.stats().slots_used, 2u) << "the entry's slot counts as free";

  Gate gate;
  weft::detail::set_decode_hook(ex, [&](const llama_batch &) {
    gate.hold();
    return 0;
  });
  b.prompt(random_tokens(rng, m, 5));
  gate.armed = true;
  std::thread stepper([&] { ex.step(); });
  ASSERT_EQ(gate.entered.get_future().wait_for(30s), std::future_status::ready);
  auto d = ex.create();
  const auto h = random_tokens(rng, m, 12, true);
  EXPECT_TRUE(returns_promptly([&] { d.prompt(h); }));
  EXPECT_EQ(cached_entries(), 1u) << "evicted on the game thread while llama_decode ran";
  gate.release.set_value();
  stepper.join();
  weft::detail::set_decode_hook(ex, nullptr);
  run_until_idle(ex);
  EXPECT_EQ(cached_entries(), 0u) << "given up at the boundary instead";
  expect_cache_exact(ex);
  expect_logits_fresh(d);
  expect_logits_fresh(b);
}
