// weft serve: the byte formats media arrive in over the wire — base64 (data
// URLs, input_audio) and WAV audio. Strict: anything else is a 400 naming
// the request field (`param`) and what was wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft_cli::serve {

// RFC 4648 base64 (the standard alphabet, '=' padding to a multiple of 4, no
// whitespace). Throws 400 invalid_base64 naming the first bad character's
// offset, and 400 media_too_large when the decoded bytes would exceed
// `max_bytes` (checked before decoding).
std::vector<std::uint8_t> base64_decode(std::string_view text, std::size_t max_bytes, const std::string &param);

// A RIFF/WAVE file as mono f32 samples in [-1, 1]: PCM of 8 (unsigned), 16,
// 24 or 32 bits, or IEEE float32 (WAVE_FORMAT_EXTENSIBLE with either
// subformat too), channels averaged. The file's rate must be `sample_rate`
// (the projector's): audio is never resampled here. Throws 400
// invalid_audio (not a WAV, a cut or empty data chunk, a sample that is not
// finite), unsupported_audio_format (another encoding or bit depth) or
// audio_sample_rate_mismatch (naming both rates).
std::vector<float> decode_wav(const std::vector<std::uint8_t> &file, int sample_rate, const std::string &param);

}  // namespace weft_cli::serve
