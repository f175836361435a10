#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include "common.hpp"

using weft_test::throws_weft;

namespace {

std::filesystem::path make(const std::filesystem::path &dir, const std::string &name, std::uint64_t seed,
                           std::optional<weft::WeightType> type = {}) {
  auto path = dir / name;
  weft::make_model({.preset = weft::ModelPreset::tiny, .seed = seed, .type = type, .out = path.string()});
  return path;
}

}  // namespace

TEST(MakeModel, SameSeedGivesIdenticalBytes) {
  auto dir = weft_test::temp_dir("same-seed");
  const auto a = weft_test::read_file(make(dir, "a.gguf", 7));
  const auto b = weft_test::read_file(make(dir, "b.gguf", 7));
  ASSERT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b);
  // The fixture's file came from the CLI with the same seed.
  EXPECT_TRUE(a == weft_test::read_file(weft_test::tiny_path()));
}

TEST(MakeModel, OtherSeedGivesOtherWeightsAndFingerprint) {
  auto dir = weft_test::temp_dir("other-seed");
  const auto a = make(dir, "a.gguf", 1);
  const auto b = make(dir, "b.gguf", 2);
  EXPECT_FALSE(weft_test::read_file(a) == weft_test::read_file(b));
  const auto ma = weft::Model::load({.path = a.string()});
  const auto mb = weft::Model::load({.path = b.string()});
  EXPECT_NE(ma.fingerprint(), mb.fingerprint());
  EXPECT_EQ(ma.fingerprint(), weft::Model::load({.path = a.string()}).fingerprint());
}

TEST(MakeModel, EveryTypeLoadsWithThePresetShape) {
  auto dir = weft_test::temp_dir("types");
  const auto shape = weft::preset_shape(weft::ModelPreset::tiny);
  std::uint64_t f32_size = 0;
  for (auto t : {weft::WeightType::f32, weft::WeightType::f16, weft::WeightType::q8_0, weft::WeightType::q4_0}) {
    SCOPED_TRACE(weft::weight_type_name(t));
    const auto path = make(dir, std::string(weft::weight_type_name(t)) + ".gguf", 3, t);
    const auto m = weft::Model::load({.path = path.string()});
    EXPECT_EQ(m.n_layer(), shape.n_layer);
    EXPECT_EQ(m.n_embd(), shape.n_embd);
    EXPECT_EQ(m.n_ctx_train(), shape.n_ctx_train);
    EXPECT_EQ(m.n_vocab(), 32000);
    EXPECT_EQ(m.meta("weft.preset"), "tiny");
    if (t == weft::WeightType::f32) f32_size = m.size_bytes();
    else EXPECT_LT(m.size_bytes(), f32_size);  // conversion really happened
  }
}

TEST(MakeModel, UnwritableOutputIsAnIoErrorAndLeavesNothing) {
  auto dir = weft_test::temp_dir("unwritable");
  const auto path = dir / "no-such-dir" / "m.gguf";
  EXPECT_TRUE(throws_weft([&] { make(dir, "no-such-dir/m.gguf", 1); }, weft::Errc::io, "cannot create"));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(MakeModel, DiskFullLeavesNoPartialFile) {
  // A file-size limit makes write() fail as a full disk would (EFBIG).
  auto dir = weft_test::temp_dir("full");
  const auto out = dir / "m.gguf";
  weft_test::write_file(out, std::string_view("previous model"));
  EXPECT_TRUE(weft_test::with_file_size_limit(
      1 << 20, [&] { return throws_weft([&] { make(dir, "m.gguf", 1); }, weft::Errc::io, "writing"); }));
  // The previous file is intact and no temp file is left.
  EXPECT_EQ(weft_test::read_file(out).size(), std::string_view("previous model").size());
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
}

TEST(MakeModel, BadVocabularyAndNamesAreTypedErrors) {
  auto dir = weft_test::temp_dir("bad-vocab");
  EXPECT_TRUE(throws_weft(
      [&] { weft::make_model({.out = (dir / "m.gguf").string(), .vocab = (dir / "missing.gguf").string()}); },
      weft::Errc::not_found, "missing.gguf"));
  const auto junk = dir / "junk.gguf";
  weft_test::write_file(junk, std::string_view("GGUFjunkjunkjunk"));
  EXPECT_TRUE(throws_weft([&] { weft::make_model({.out = (dir / "m.gguf").string(), .vocab = junk.string()}); },
                          weft::Errc::corrupt, "junk.gguf"));
  EXPECT_FALSE(std::filesystem::exists(dir / "m.gguf"));
  EXPECT_TRUE(throws_weft([] { weft::parse_preset("huge"); }, weft::Errc::invalid_argument, "huge"));
  EXPECT_TRUE(throws_weft([] { weft::parse_weight_type("q5_k"); }, weft::Errc::invalid_argument, "q5_k"));
}
