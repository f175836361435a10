// weft serve: base64 and WAV, strictly.
#include "serve/media_decode.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>

#include "serve/api_error.hpp"

namespace weft_cli::serve {

namespace {

constexpr std::array<std::int8_t, 256> base64_table() {
  std::array<std::int8_t, 256> t{};
  for (auto &v : t) v = -1;
  const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = static_cast<std::int8_t>(i);
  return t;
}

ApiError bad_audio(const std::string &param, const std::string &message, const char *code = "invalid_audio") {
  return bad_param(param, message, code);
}

std::uint32_t read_le(const std::uint8_t *p, int n) {
  std::uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// One sample of `bits` at p, as [-1, 1].
float sample_at(const std::uint8_t *p, int bits, bool is_float) {
  if (is_float) {
    float f;
    const std::uint32_t v = read_le(p, 4);
    std::memcpy(&f, &v, 4);
    return f;
  }
  switch (bits) {
    case 8: return (static_cast<float>(p[0]) - 128.0f) / 128.0f;  // 8-bit WAV is unsigned
    case 16: return static_cast<float>(static_cast<std::int16_t>(read_le(p, 2))) / 32768.0f;
    case 24: {
      // Sign-extend the 24-bit value through the top byte.
      const auto v = static_cast<std::int32_t>(read_le(p, 3) << 8) >> 8;
      return static_cast<float>(v) / 8388608.0f;
    }
    default: return static_cast<float>(static_cast<std::int32_t>(read_le(p, 4))) / 2147483648.0f;
  }
}

}  // namespace

std::vector<std::uint8_t> base64_decode(std::string_view text, std::size_t max_bytes, const std::string &param) {
  static constexpr auto table = base64_table();
  if (text.empty()) throw bad_param(param, fmt::format("'{}' holds no base64 data", param), "invalid_base64");
  if (text.size() % 4 != 0)
    throw bad_param(param,
                    fmt::format("'{}' is not base64: {} characters, not a multiple of 4 (padded with '=')", param,
                                text.size()),
                    "invalid_base64");
  std::size_t pad = 0;
  if (text.back() == '=') ++pad;
  if (text.size() >= 2 && text[text.size() - 2] == '=') ++pad;
  const std::size_t n_out = text.size() / 4 * 3 - pad;
  if (n_out > max_bytes)
    throw bad_param(param,
                    fmt::format("'{}' decodes to {} bytes; this server takes at most {} per image or audio clip "
                                "(--max-media-bytes)",
                                param, n_out, max_bytes),
                    "media_too_large");
  std::vector<std::uint8_t> out;
  out.reserve(n_out);
  std::uint32_t acc = 0;
  const std::size_t n_data = text.size() - pad;
  for (std::size_t i = 0; i < n_data; ++i) {
    const auto v = table[static_cast<unsigned char>(text[i])];
    if (v < 0)
      throw bad_param(param,
                      fmt::format("'{}' is not base64: character {} (byte 0x{:02x}) is outside the standard alphabet",
                                  param, i, static_cast<unsigned char>(text[i])),
                      "invalid_base64");
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    if (i % 4 == 3) {
      out.push_back(static_cast<std::uint8_t>(acc >> 16));
      out.push_back(static_cast<std::uint8_t>(acc >> 8));
      out.push_back(static_cast<std::uint8_t>(acc));
      acc = 0;
    }
  }
  // The last group: 2 or 3 characters carry 1 or 2 bytes; their unused low bits must be zero.
  const std::size_t tail = n_data % 4;
  if (tail == 2) {
    if (acc & 0xF) throw bad_param(param, fmt::format("'{}' is not canonical base64 (stray bits before '==')", param), "invalid_base64");
    out.push_back(static_cast<std::uint8_t>(acc >> 4));
  } else if (tail == 3) {
    if (acc & 0x3) throw bad_param(param, fmt::format("'{}' is not canonical base64 (stray bits before '=')", param), "invalid_base64");
    out.push_back(static_cast<std::uint8_t>(acc >> 10));
    out.push_back(static_cast<std::uint8_t>(acc >> 2));
  } else if (tail == 1) {
    throw bad_param(param, fmt::format("'{}' is not base64: a group of one character before its padding", param),
                    "invalid_base64");
  }
  return out;
}

std::vector<float> decode_wav(const std::vector<std::uint8_t> &file, int sample_rate, const std::string &param) {
  const std::uint8_t *b = file.data();
  if (file.size() < 12 || std::memcmp(b, "RIFF", 4) != 0 || std::memcmp(b + 8, "WAVE", 4) != 0)
    throw bad_audio(param, fmt::format("'{}' is not a WAV file (no RIFF/WAVE header in its {} bytes)", param,
                                       file.size()));
  int format = -1, channels = 0, bits = 0;
  std::uint32_t rate = 0;
  const std::uint8_t *data = nullptr;
  std::size_t data_size = 0;
  // Chunks: a 4-byte id, a 4-byte size, the body padded to an even length.
  for (std::size_t at = 12; at + 8 <= file.size();) {
    const std::size_t size = read_le(b + at + 4, 4);
    const std::size_t body = at + 8;
    if (size > file.size() - body)
      throw bad_audio(param, fmt::format("'{}': the WAV chunk '{}' at byte {} says {} bytes; the file ends {} bytes "
                                         "later",
                                         param, std::string(reinterpret_cast<const char *>(b + at), 4), at, size,
                                         file.size() - body));
    if (std::memcmp(b + at, "fmt ", 4) == 0) {
      if (size < 16) throw bad_audio(param, fmt::format("'{}': the WAV fmt chunk is {} bytes, under 16", param, size));
      format = static_cast<int>(read_le(b + body, 2));
      channels = static_cast<int>(read_le(b + body + 2, 2));
      rate = read_le(b + body + 4, 4);
      bits = static_cast<int>(read_le(b + body + 14, 2));
      // WAVE_FORMAT_EXTENSIBLE: the real format is the subformat GUID's first two bytes.
      if (format == 0xFFFE && size >= 26) format = static_cast<int>(read_le(b + body + 24, 2));
    } else if (std::memcmp(b + at, "data", 4) == 0) {
      data = b + body;
      data_size = size;
    }
    at = body + size + (size & 1);
  }
  if (format < 0) throw bad_audio(param, fmt::format("'{}': the WAV file has no fmt chunk", param));
  if (!data) throw bad_audio(param, fmt::format("'{}': the WAV file has no data chunk", param));
  const bool is_float = format == 3;
  if (!(format == 1 && (bits == 8 || bits == 16 || bits == 24 || bits == 32)) && !(is_float && bits == 32))
    throw bad_audio(param,
                    fmt::format("'{}': WAV format {} with {} bits per sample; weft serve takes PCM of 8, 16, 24 or 32 "
                                "bits and IEEE float32",
                                param, format, bits),
                    "unsupported_audio_format");
  if (channels < 1) throw bad_audio(param, fmt::format("'{}': the WAV file says {} channels", param, channels));
  if (rate != static_cast<std::uint32_t>(sample_rate))
    throw bad_audio(param,
                    fmt::format("'{}' is sampled at {} Hz; the projector takes {} Hz (weft serve does not resample: "
                                "convert it first)",
                                param, rate, sample_rate),
                    "audio_sample_rate_mismatch");
  const std::size_t frame = static_cast<std::size_t>(channels) * static_cast<std::size_t>(bits / 8);
  const std::size_t n = data_size / frame;
  if (n == 0) throw bad_audio(param, fmt::format("'{}': the WAV data chunk holds no whole sample", param));
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int ch = 0; ch < channels; ++ch) sum += sample_at(data + i * frame + ch * (bits / 8), bits, is_float);
    out[i] = sum / static_cast<float>(channels);
    if (!std::isfinite(out[i]))
      throw bad_audio(param, fmt::format("'{}': WAV sample {} is not a finite number", param, i));
  }
  return out;
}

}  // namespace weft_cli::serve
