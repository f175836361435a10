// Every ExecutorParams::kv_type through the operations that copy KV data: a
// conversation saved and loaded into another executor, or parked in RAM or
// on disk and brought back, goes on to exactly the logits of a twin that
// never left (same cells, same batches: bitwise equal), on a tiny-shaped
// model with 32-wide heads (MakeModelParams::shape) so that every quantised
// type fits; the logits differ between types (each type is really used);
// the refusals (a quantised cache without flash attention, or on 16-wide
// heads) name the type.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"
#include "weft/make_model.hpp"

namespace {

using weft::KvType;
using weft::Token;
using weft_test::random_tokens;
using weft_test::run_until_idle;

const std::vector<std::pair<KvType, const char *>> kTypes = {
    {KvType::f16, "f16"},   {KvType::f32, "f32"},   {KvType::bf16, "bf16"},   {KvType::q8_0, "q8_0"},
    {KvType::q4_0, "q4_0"}, {KvType::q4_1, "q4_1"}, {KvType::q5_0, "q5_0"}, {KvType::q5_1, "q5_1"},
    {KvType::iq4_nl, "iq4_nl"}};

// tiny's tensors with four 32-wide heads.
const weft::Model &wide_heads() {
  static const weft::Model m = [] {
    const auto path = weft_test::temp_dir("kv-types") / "tiny-32.gguf";
    weft::ModelShape s = weft::preset_shape(weft::ModelPreset::tiny);
    s.n_embd = 128;
    s.n_head = 4;
    s.n_head_kv = 2;
    weft::make_model({.preset = weft::ModelPreset::tiny, .seed = 3, .shape = s, .out = path.string()});
    return weft::Model::load({.path = path.string()});
  }();
  return m;
}

weft::ExecutorParams params(KvType t) {
  return {.n_ctx = 512, .n_batch = 64, .n_seq_max = 2, .n_threads = 2, .kv_type = t};
}

}  // namespace

TEST(KvTypes, SaveLoadAndSpillCarryTheCacheExactly) {
  const auto &m = wide_heads();
  const auto dir = weft_test::temp_dir("kv-types-spill");
  std::vector<std::vector<float>> first_logits;
  for (const auto &[type, name] : kTypes) {
    std::mt19937 rng(11);
    const auto p1 = random_tokens(rng, m, 40, true), p2 = random_tokens(rng, m, 9);
    // The twin never leaves; the others leave and come back before p2.
    weft::Executor twin_ex(m, params(type));
    auto twin = twin_ex.create();
    twin.prompt(p1);
    run_until_idle(twin_ex);
    first_logits.push_back(twin.logits());
    twin.prompt(p2);
    run_until_idle(twin_ex);
    const auto want = twin.logits();

    // Saved, loaded into another executor.
    weft::Executor a(m, params(type)), b(m, params(type));
    auto c = a.create();
    c.prompt(p1);
    run_until_idle(a);
    auto loaded = b.load(c.save());
    loaded.prompt(p2);
    run_until_idle(b);
    EXPECT_EQ(loaded.logits(), want) << name << ": saved and loaded";

    // Parked in RAM, and on disk, then back.
    for (const bool disk : {false, true}) {
      auto sp = params(type);
      sp.spill = disk ? weft::SpillParams{.ram_bytes = 0, .disk_dir = dir.string()}
                      : weft::SpillParams{.ram_bytes = 64 << 20};
      sp.prefix_cache_cells = 0;  // else the cells it left stay cached and it comes back elsewhere
      weft::Executor e(m, sp);
      auto x = e.create();
      x.prompt(p1);
      run_until_idle(e);
      ASSERT_TRUE(x.park()) << name;
      EXPECT_EQ(x.residency(), disk ? weft::Residency::disk : weft::Residency::ram) << name;
      x.prompt(p2);
      run_until_idle(e);
      EXPECT_EQ(x.residency(), weft::Residency::resident) << name;
      EXPECT_EQ(x.logits(), want) << name << (disk ? ": parked on disk" : ": parked in RAM");
    }
  }
  // Each type is really the cache's: the logits after the same prompt differ from f16's.
  for (std::size_t i = 1; i < kTypes.size(); ++i) {
    EXPECT_NE(first_logits[i], first_logits[0]) << kTypes[i].second << " decodes as f16 does";
  }
  std::filesystem::remove_all(dir);
}

TEST(KvTypes, RefusalsNameTheType) {
  EXPECT_TRUE(weft_test::throws_weft(
      [] { weft::Executor(wide_heads(), {.kv_type = KvType::q4_0, .flash_attn = weft::FlashAttention::disabled}); },
      weft::Errc::invalid_argument, "ExecutorParams.kv_type = q4_0 needs flash attention (flash_attn = disabled)"));
  EXPECT_TRUE(weft_test::throws_weft(
      [] { weft::Executor(weft_test::tiny(), {.n_ctx = 256, .n_batch = 64, .n_seq_max = 2, .kv_type = KvType::iq4_nl}); },
      weft::Errc::invalid_argument, "ExecutorParams.kv_type = iq4_nl stores heads in blocks of 32; this model's heads are 16 wide"));
  EXPECT_TRUE(weft_test::throws_weft([] { weft::Executor(weft_test::tiny(), {.kv_type = static_cast<KvType>(9)}); },
                                     weft::Errc::invalid_argument, "ExecutorParams.kv_type = 9 is not a KvType"));
  // A shape a llama model cannot have is refused before anything is written.
  weft::ModelShape s = weft::preset_shape(weft::ModelPreset::tiny);
  s.n_head = 3;
  const auto out = weft_test::temp_dir("kv-types-refused") / "never-written.gguf";
  EXPECT_TRUE(weft_test::throws_weft(
      [&] { weft::make_model({.preset = weft::ModelPreset::tiny, .shape = s, .out = out.string()}); },
      weft::Errc::invalid_argument, "MakeModelParams.shape: n_embd = 64 must be in [2, 16384] and n_head (3)"));
  const auto refused = [&](weft::ModelShape bad, weft::ModelPreset preset, const char *why) {
    return weft_test::throws_weft([&] { weft::make_model({.preset = preset, .shape = bad, .out = out.string()}); },
                                  weft::Errc::invalid_argument, why);
  };
  const weft::ModelShape tiny = weft::preset_shape(weft::ModelPreset::tiny);
  s = tiny;
  s.n_layer = 0;
  EXPECT_TRUE(refused(s, weft::ModelPreset::tiny, "MakeModelParams.shape: n_layer = 0 is outside [1, 256]"));
  s = tiny;
  s.n_head_kv = 3;
  EXPECT_TRUE(refused(s, weft::ModelPreset::tiny, "MakeModelParams.shape: n_head_kv = 3 must divide n_head = 4"));
  s = tiny;
  s.n_ctx_train = 8;
  EXPECT_TRUE(refused(s, weft::ModelPreset::tiny, "MakeModelParams.shape: n_ctx_train = 8 must be >= 16"));
  EXPECT_TRUE(refused(tiny, weft::ModelPreset::npc, "the npc preset's shape is TrainParams'"));
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove_all(out.parent_path());
}
