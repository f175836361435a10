// The gpu label's main: says which device runs (the log keeps it), and
// stops at once when there is none.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "weft/memory_fit.hpp"

namespace {

class Device : public ::testing::Environment {
 public:
  void SetUp() override {
    const char *icd = std::getenv("VK_ICD_FILENAMES");
    const auto devices = weft::gpu_devices();
    for (const auto &d : devices) {
      std::printf("weft gpu tests: device %s, %s, %.1f of %.1f GiB free (ICD %s)\n", d.name.c_str(),
                  d.description.c_str(), static_cast<double>(d.free_bytes) / (1 << 30),
                  static_cast<double>(d.total_bytes) / (1 << 30), icd != nullptr ? icd : "the loader's choice");
    }
    std::fflush(stdout);
    ASSERT_FALSE(devices.empty()) << "no GPU device: weft was built without a GPU backend, or the ICD "
                                  << (icd != nullptr ? icd : "(none named)") << " offers none (ggml-vulkan skips a CPU-type device such as lavapipe unless GGML_VK_VISIBLE_DEVICES names it)";
  }
};

}  // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new Device);
  return RUN_ALL_TESTS();
}
