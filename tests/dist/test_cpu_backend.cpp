// The portable build's CPU variant loader (include/weft/backend.hpp): which
// variant it picks, and the errors for a variant that is missing or that
// this CPU cannot run. The backend loads once per process, so each forced
// choice runs in a fresh process (a "threadsafe" death test re-executes
// this binary for the one test).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "weft/weft.hpp"

namespace {

// Runs in the child: loads with WEFT_CPU_VARIANT=`variant`, prints what
// happened, exits 0 when `want` was thrown (Errc::not_found, say) and the
// message names `needle`.
[[noreturn]] void load_forced(const char *variant, weft::Errc want, const std::string &needle) {
  ::setenv("WEFT_CPU_VARIANT", variant, 1);
  try {
    const weft::CpuBackend b = weft::cpu_backend();
    std::fprintf(stderr, "loaded %s, expected an error\n", b.variant.c_str());
    std::_Exit(2);
  } catch (const weft::Error &e) {
    std::fprintf(stderr, "%s: %s\n", weft::errc_name(e.code()), e.what());
    if (e.code() != want || std::string(e.what()).find(needle) == std::string::npos) std::_Exit(3);
  }
  // Model::load reports the same, every time.
  try {
    (void)weft::Model::load({.path = WEFT_DIST_MODEL});
    std::_Exit(4);
  } catch (const weft::Error &e) {
    std::_Exit(e.code() == want && std::string(e.what()).find(needle) != std::string::npos ? 0 : 5);
  }
}

TEST(CpuBackend, PortableBuildLoadsTheBestVariantThisCpuRuns) {
  ASSERT_EQ(std::getenv("WEFT_CPU_VARIANT"), nullptr) << "run without WEFT_CPU_VARIANT";
  const weft::CpuBackend b = weft::cpu_backend();
  EXPECT_TRUE(b.runtime_dispatch);
  EXPECT_FALSE(b.forced);
  // ggml's x86 list, x64 (SSE2, every x86-64 CPU) to sapphirerapids.
  ASSERT_GE(b.available.size(), 10u);
  bool seen_unsupported = false, has_x64 = false;
  for (const auto &v : b.available) {
    // Best first: every variant this CPU runs comes before any it cannot.
    EXPECT_FALSE(seen_unsupported && v.supported) << v.name << " listed after a variant this CPU cannot run";
    seen_unsupported = seen_unsupported || !v.supported;
    has_x64 = has_x64 || (v.name == "x64" && v.supported);
  }
  EXPECT_TRUE(has_x64) << "x64 is the floor every x86-64 CPU runs";
  EXPECT_EQ(b.variant, b.available.front().name);
  EXPECT_FALSE(b.directory.empty());
  EXPECT_NE(b.features.find("CPU"), std::string::npos) << b.features;
  // The loaded variant decodes.
  auto m = weft::Model::load({.path = WEFT_DIST_MODEL});
  EXPECT_GT(m.n_vocab(), 0);
}

TEST(CpuBackendDeathTest, AMissingVariantIsNotFoundAndListsTheOthers) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(load_forced("nonesuch", weft::Errc::not_found, "x64"), ::testing::ExitedWithCode(0),
              "not_found: WEFT_CPU_VARIANT=nonesuch: no libggml-cpu-nonesuch.so in .*variants there: .*x64");
}

TEST(CpuBackendDeathTest, AVariantThisCpuCannotRunIsIncompatible) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The child re-runs this body: it takes the name from the parent through
  // the environment rather than loading a backend before the death test.
  std::string lacking;
  if (const char *from_parent = std::getenv("WEFT_TEST_LACKING_VARIANT")) {
    lacking = from_parent;
  } else {
    for (const auto &v : weft::cpu_backend().available) {
      if (!v.supported) lacking = v.name;
    }
    if (lacking.empty()) GTEST_SKIP() << "this CPU runs every variant (sapphirerapids included)";
    ::setenv("WEFT_TEST_LACKING_VARIANT", lacking.c_str(), 1);
  }
  EXPECT_EXIT(load_forced(lacking.c_str(), weft::Errc::incompatible, "lacks instructions"),
              ::testing::ExitedWithCode(0), "incompatible: WEFT_CPU_VARIANT=" + lacking);
}

// A folder whose only "variant" is no library at all (a damaged install):
// nothing there runs, so the load fails with a typed error naming the
// folder and what was found, instead of falling through to another folder.
TEST(CpuBackendDeathTest, AFolderWithNoVariantThisCpuRunsIsIncompatible) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const auto dir = std::filesystem::temp_directory_path() / ("weft-bogus-variant-" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
        std::ofstream(dir / "libggml-cpu-bogus.so") << "not a shared library";
        ::setenv("WEFT_BACKEND_DIR", dir.c_str(), 1);
        int rc = 2;
        try {
          (void)weft::cpu_backend();
        } catch (const weft::Error &e) {
          std::fprintf(stderr, "%s: %s\n", weft::errc_name(e.code()), e.what());
          rc = e.code() == weft::Errc::incompatible ? 0 : 3;
        }
        std::filesystem::remove_all(dir);
        std::_Exit(rc);
      },
      ::testing::ExitedWithCode(0), "incompatible: no CPU variant in .*weft-bogus-variant-.* runs on this CPU "
                                    "\\(found: bogus \\(not on this CPU\\)\\)");
}

TEST(CpuBackendDeathTest, AForcedLowerVariantIsTheOneLoaded) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("WEFT_CPU_VARIANT", "sse42", 1);
        const weft::CpuBackend b = weft::cpu_backend();
        std::fprintf(stderr, "variant %s forced %d\n", b.variant.c_str(), b.forced ? 1 : 0);
        std::_Exit(b.variant == "sse42" && b.forced && b.runtime_dispatch ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "variant sse42 forced 1");
}

}  // namespace
