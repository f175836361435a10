// Drafter::model: a second model drafts greedily in its own context and the
// step verifies. The drafting executor's tokens are those of one that
// drafts nothing, over the random scenarios of test_speculative.cpp, with a
// draft model that agrees (the target itself: almost every draft kept) and
// one that mostly does not (other weights); more drafting conversations
// than the draft context's sequences take turns; bad models and params are
// refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <map>

#include "exec/spec_scenarios.hpp"
#include "weft/make_model.hpp"

using namespace spec_test;

namespace {

const weft::Model &other_tiny() {
  static const weft::Model m = [] {
    weft::MakeModelParams mp;
    mp.preset = weft::ModelPreset::tiny;
    mp.seed = 8;  // tiny.gguf is seed 7: the same vocabulary, other weights
    mp.out = (weft_test::temp_dir("draft-model") / "tiny-seed8.gguf").string();
    weft::make_model(mp);
    return weft::Model::load({.path = mp.out});
  }();
  return m;
}

weft::ExecutorParams with_draft(const weft::Model &draft, std::uint32_t n_seq_max = 3, float p_min = 0.0f) {
  auto p = params();
  p.draft_model = weft::DraftModelParams{.model = draft, .n_ctx = 512, .n_seq_max = n_seq_max, .p_min = p_min};
  return p;
}

weft::SpeculativeParams by_model(bool adaptive, std::uint32_t max_draft) {
  return {.drafter = weft::Drafter::model, .max_draft = max_draft, .adaptive = adaptive};
}

// Mixed: some draft with the model, some with lookup, some not at all.
std::optional<weft::SpeculativeParams> mixed(std::mt19937 &rng) {
  std::optional<weft::SpeculativeParams> sp;
  const auto k = rng() % 6;
  if (k < 3) sp = by_model(k == 0, 1 + static_cast<std::uint32_t>(rng() % 10));
  if (k == 3) sp = lookup(false, 4);
  return sp;
}

}  // namespace

TEST(DraftModel, TheTargetAsItsOwnDraftKeepsAlmostEveryDraftAndTheTokensAreThoseWithout) {
  // Three draft sequences for up to six drafting conversations: they take turns.
  const auto n = run_greedy_scenarios(weft_test::tiny(), with_draft(weft_test::tiny()), 8, mixed);
  std::cout << "drafted " << n.drafted << ", kept " << n.accepted << "; " << n.parted << " of " << n.compared
            << " generations parted at a near-tie\n";
  EXPECT_GT(n.drafted, 150u);
  // The draft decodes the same history with the same weights, greedily: it
  // misses only where the reply ends (max_tokens, a stop string) or batch
  // noise tips a near-tie, and where lookup's guesses are rejected.
  EXPECT_GT(static_cast<double>(n.accepted), 0.7 * static_cast<double>(n.drafted));
  EXPECT_LE(n.parted, n.compared / 10) << "near-ties are rare";
}

TEST(DraftModel, ADraftWithOtherWeightsIsMostlyRejectedAndTheTokensAreThoseWithout) {
  const auto n = run_greedy_scenarios(weft_test::tiny(), with_draft(other_tiny()), 6, mixed);
  std::cout << "drafted " << n.drafted << ", kept " << n.accepted << "; " << n.parted << " of " << n.compared
            << " generations parted at a near-tie\n";
  EXPECT_GT(n.drafted, 50u);
  EXPECT_GT(n.drafted - n.accepted, 30u) << "drafts were rejected";
  EXPECT_LE(n.parted, n.compared / 10) << "near-ties are rare";
}

TEST(DraftModel, MoreDraftingConversationsThanSequencesAllDraftAndCountTheirCost) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(3);
  weft::Executor plain(m, params()), spec(m, with_draft(m, 2));
  std::vector<weft::Conversation> ca, cb;
  std::vector<weft::Generation> ga, gb;
  for (int i = 0; i < 6; ++i) {
    const auto p = prompt_with_repeats(rng, m);
    ca.push_back(plain.create());
    cb.push_back(spec.create());
    ca.back().prompt(p);
    cb.back().prompt(p);
    weft::GenerateParams g{.max_tokens = 40, .sampler = small_alphabet(), .ignore_eos = true};
    ga.push_back(ca.back().generate(g));
    g.speculative = by_model(false, 4);
    gb.push_back(cb.back().generate(g));
  }
  double draft_s = 0;
  for (int i = 0; i < 400 && !std::all_of(gb.begin(), gb.end(), [](auto &g) { return g.done(); }); ++i) {
    draft_s += spec.step().draft_seconds;
  }
  weft_test::run_until_idle(plain);
  for (std::size_t i = 0; i < gb.size(); ++i) {
    ASSERT_TRUE(gb[i].done());
    EXPECT_EQ(ga[i].result().tokens, gb[i].result().tokens) << "conversation " << i;
    // Two sequences, six conversations: each gives its sequence up when idle
    // for a step and gets one back, so every conversation drafts.
    EXPECT_GT(gb[i].result().drafted, 0u) << "conversation " << i;
  }
  const auto s = spec.stats();
  EXPECT_GT(s.draft_model_tokens, 0u);
  EXPECT_GT(s.draft_model_seconds, 0.0);
  EXPECT_NEAR(s.draft_model_seconds, draft_s, 1e-9) << "the steps' draft_seconds add up to the executor's";
  EXPECT_EQ(plain.stats().draft_model_tokens, 0u);
}

TEST(DraftModel, BadModelsAndParamsAreRefusedByName) {
  const auto &m = weft_test::tiny();
  const auto dir = weft_test::temp_dir("draft-model-bad");
  auto expect_refused = [&](const weft::ExecutorParams &p, weft::Errc code, const std::string &needle) {
    try {
      weft::Executor ex(m, p);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const weft::Error &e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // Another vocabulary (phi-3's SPM, 32,064 tokens against llama's 32,000).
  weft::MakeModelParams mp;
  mp.preset = weft::ModelPreset::tiny;
  mp.seed = 3;
  mp.vocab = (std::filesystem::path(weft::default_vocab_path()).parent_path() / "ggml-vocab-phi-3.gguf").string();
  mp.out = (dir / "phi3-vocab.gguf").string();
  weft::make_model(mp);
  const auto other_vocab = weft::Model::load({.path = mp.out});
  ASSERT_NE(other_vocab.n_vocab(), m.n_vocab());
  expect_refused(with_draft(other_vocab), weft::Errc::invalid_argument,
                 "has " + std::to_string(other_vocab.n_vocab()) + " tokens and the executor's model " +
                     std::to_string(m.n_vocab()));
  // An embedding model (every token sees every other) predicts no next token.
  mp.vocab.clear();
  mp.preset = weft::ModelPreset::embed;
  mp.out = (dir / "embed.gguf").string();
  weft::make_model(mp);
  expect_refused(with_draft(weft::Model::load({.path = mp.out})), weft::Errc::invalid_argument, "is not causal");
  mp.preset = weft::ModelPreset::tiny;
  // A recurrent draft model cannot drop a rejected draft.
  mp.vocab.clear();
  mp.arch = weft::ModelArch::mamba;
  mp.out = (dir / "mamba.gguf").string();
  weft::make_model(mp);
  expect_refused(with_draft(weft::Model::load({.path = mp.out})), weft::Errc::invalid_argument, "not plain attention");
  auto p = with_draft(m);
  p.draft_model->n_seq_max = 0;
  expect_refused(p, weft::Errc::out_of_range, "DraftModelParams.n_seq_max = 0");
  p = with_draft(m);
  p.draft_model->n_ctx = 32;
  expect_refused(p, weft::Errc::out_of_range, "DraftModelParams.n_ctx = 32");
  p = with_draft(m);
  p.draft_model->p_min = 1.5f;
  expect_refused(p, weft::Errc::out_of_range, "DraftModelParams.p_min = 1.5");
  p = params();
  p.speculative = by_model(true, 4);
  expect_refused(p, weft::Errc::invalid_argument, "needs ExecutorParams::draft_model");
  // A generation asking for the model where the executor has none.
  weft::Executor ex(m, params());
  auto c = ex.create();
  c.prompt(std::vector<weft::Token>{m.bos(), 100, 200});
  try {
    c.generate({.speculative = by_model(true, 4)});
    ADD_FAILURE() << "a model drafter without a draft model";
  } catch (const weft::Error &e) {
    EXPECT_EQ(e.code(), weft::Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("needs ExecutorParams::draft_model"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(c.generation());
}
