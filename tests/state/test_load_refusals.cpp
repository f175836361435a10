// Loading state the cache cannot take: refused whole, the executor unchanged.
#include <gtest/gtest.h>

#include <random>

#include "common.hpp"
#include "reference.hpp"
#include "state/state_codec.hpp"

// KV data llama.cpp refuses (another cache type) is a typed error, and the
// executor is unchanged: no conversation added, no cell or slot held — also
// while a worker steps.
TEST(State, KvDataOfAnotherCacheTypeIsRefusedWhole) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(31);
  weft::Executor f32(m, {.n_ctx = 512, .n_batch = 64, .n_seq_max = 2, .kv_type = weft::KvType::f32});
  auto c = f32.create();
  c.prompt(weft_test::random_tokens(rng, m, 24, true));
  weft_test::run_until_idle(f32);
  const auto bytes = c.save();
  weft::Executor f16(m, {.n_ctx = 512, .n_batch = 64, .n_seq_max = 2});
  auto other = f16.create();
  other.prompt(weft_test::random_tokens(rng, m, 8, true));
  weft_test::run_until_idle(f16);
  const auto before = f16.stats();
  EXPECT_TRUE(weft_test::throws_weft([&] { (void)f16.load(bytes); }, weft::Errc::corrupt, "refused the KV data"));
  const auto after = f16.stats();
  EXPECT_EQ(after.conversations, before.conversations);
  EXPECT_EQ(after.cells_used, before.cells_used);
  EXPECT_EQ(after.slots_used, before.slots_used);
  EXPECT_TRUE(other.has_logits());
}

// The fields of versions 9-12 refuse what a writer could not have written
// (records made with the codec itself, each with one thing wrong).
TEST(State, GenerationRecordFieldsOfNewerVersionsAreChecked) {
  using weft::detail::ConvRecord;
  using weft::detail::GenRecord;
  constexpr std::int32_t kVocab = 100;
  auto refused = [&](const GenRecord &g, const weft::SamplerParams &sp, const char *needle) {
    ConvRecord r;
    r.history = {1, 2, 3};
    r.sampler_params = sp;
    r.gen = g;
    const auto bytes = weft::detail::encode_conversation(r, 7, kVocab);
    return weft_test::throws_weft([&] { (void)weft::detail::decode_conversation(bytes, 7, kVocab, 1024); },
                                  weft::Errc::corrupt, needle);
  };
  GenRecord g;
  g.max_tokens = 8;
  g.tokens = {5, 6};
  g.logprobs = true;
  g.top_logprobs = 1;
  g.logprob_entries = {{5, -1.0f, {{5, -1.0f}}}};
  EXPECT_TRUE(refused(g, {}, "1 logprob entries for 2 generated tokens"));
  g.logprob_entries.push_back({7, -2.0f, {}});
  EXPECT_TRUE(refused(g, {}, "logprob entry 1 is not token 1's"));
  g.logprob_entries[1] = {6, -2.0f, {{kVocab + 3, -2.0f}}};
  EXPECT_TRUE(refused(g, {}, "generation.logprobs.top.token = 103 is outside the vocabulary"));
  g.logprob_entries[1].top.clear();
  g.top_logprobs = 21;
  EXPECT_TRUE(refused(g, {}, "generation.top_logprobs = 21"));
  g.top_logprobs = 0;
  g.logprob_entries = {{5, -1.0f, {}}, {6, -2.0f, {}}};
  EXPECT_TRUE(refused(g, {.mirostat = 1}, "SamplerParams.mirostat = 1"));  // version 10's params validated
  g.tools = true;
  EXPECT_TRUE(refused(g, {.typical_p = 2.0f}, "SamplerParams.typical_p = 2"));  // and in version 11
  // Version 12: banned strings validated, and no tail a sampler could not keep.
  EXPECT_TRUE(refused(g, {.banned_strings = {"ok", ""}}, "SamplerParams.banned_strings[1] is 0 bytes"));
  weft::detail::Sampler::State st;
  st.ban_tail = std::string(256, 'x');
  g.sampler = weft::SamplerParams{.banned_strings = {"abc"}};
  g.sampler_state = st;
  EXPECT_TRUE(refused(g, {}, "the banned strings' tail is 256 bytes; at most 255"));
}
