// The CPU backend of a native or fixed build (tests/dist covers the
// portable one): what it reports, and the check that keeps a fixed build
// from running code the CPU lacks instructions for.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

#include "core/backend_loader.hpp"
#include "weft/weft.hpp"

namespace {

TEST(CpuBackend, NativeBuildSaysSo) {
  const weft::CpuBackend b = weft::cpu_backend();
  EXPECT_EQ(b.variant, "native");  // the test presets build with WEFT_NATIVE=ON
  EXPECT_FALSE(b.runtime_dispatch);
  EXPECT_FALSE(b.forced);
  EXPECT_TRUE(b.available.empty());
  EXPECT_TRUE(b.directory.empty());
  EXPECT_NE(b.features.find("CPU"), std::string::npos) << b.features;
}

TEST(CpuBackend, MissingFeaturesAreListedInOrder) {
  const std::set<std::string, std::less<>> cpu = {"sse42", "avx", "fma"};
  auto has = [&](std::string_view n) { return cpu.count(n) > 0; };
  using weft::detail::missing_cpu_features;
  EXPECT_EQ(missing_cpu_features("sse42,avx,avx2,fma,bmi2", has), (std::vector<std::string>{"avx2", "bmi2"}));
  EXPECT_TRUE(missing_cpu_features("", has).empty());
  EXPECT_TRUE(missing_cpu_features("avx,,fma,", has).empty());
  EXPECT_EQ(missing_cpu_features("avx512", has), (std::vector<std::string>{"avx512"}));
}

TEST(CpuBackend, FeatureQueryReadsTheLoadedBackend) {
  weft::cpu_backend();
  // What -march=native gave this build: SSE3 is in every x86-64 CPU ggml
  // supports; a name ggml never reports is false.
#if defined(__x86_64__)
  EXPECT_TRUE(weft::detail::cpu_backend_has("SSE3"));
#endif
  EXPECT_FALSE(weft::detail::cpu_backend_has("NO_SUCH_FEATURE"));
}

}  // namespace
