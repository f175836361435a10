// libFuzzer target for the state decoders (pure code, no llama.cpp):
//   every input must either decode or raise a weft::Error — never crash,
//   hang or allocate without bound. Built when clang is available
//   (target fuzz_state); CTest runs a bounded smoke, run longer by hand:
//   build/release/tests/weft_fuzz_state -max_total_time=600 corpus/
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "state/state_codec.hpp"
#include "weft/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  // Half the inputs get a valid CRC, so the fuzzer reaches the parser
  // instead of stopping at the checksum.
  std::vector<std::uint8_t> buf(data, data + size);
  if (size > 12 && (data[size - 1] & 1) != 0) {
    const auto crc = weft::detail::crc32(std::span(buf).first(size - 4));
    std::memcpy(buf.data() + size - 4, &crc, 4);
  }
  const std::span<const std::uint8_t> bytes(buf);
  // Fingerprint 0 and the llama SPM vocabulary size: inputs may carry either.
  try {
    (void)weft::detail::decode_conversation(bytes, 0, 32000, 4096);
  } catch (const weft::Error &) {
  }
  try {
    (void)weft::detail::decode_snapshot(bytes, 0);
  } catch (const weft::Error &) {
  }
  return 0;
}
