// weft/make_mmproj.hpp — seeded random multimodal projectors ("mmproj" GGUF
// files, the second file of a llama.cpp vision or audio model) for a
// generated text model, loadable by llama.cpp's mtmd (`llama-mtmd-cli --mmproj`).
//
// The projector carries no meaning: it exists so tests, demos and benchmarks
// of images (and audio) in conversations have real files. It is a small
// vision transformer (patch embedding, a few pre-norm blocks) plus the
// projector of the chosen kind, mapping an image to `mmproj_tokens_per_image()`
// embeddings of the text model's width, or for qwen2a a small Whisper-style
// audio encoder mapping 30 s of audio to 750 embeddings. Weights are drawn so
// that the embeddings clearly depend on the pixels or samples (the patch
// embedding or conv dominates the learned positions) and have the scale of
// the text model's own token embeddings, so an image or a clip moves the
// logits about as much as text does. Same base, parameters and seed
// give a byte-identical file (docs/MODELS.md, "Projector files").
//
// Thread-safety: make_mmproj() is reentrant; calls writing different paths may
// run concurrently. It only reads `base`.
#pragma once

#include <cstdint>
#include <string>

#include "weft/export.hpp"

namespace weft {

enum class MmprojKind {
  // Gemma 3's projector (clip.projector_type "gemma3"): SigLIP-style ViT,
  // average pooling by `merge` per side, RMS norm, linear projection. Ordinary
  // (1-D) positions; mtmd decodes its image embeddings non-causally
  // (mtmd_decode_use_non_causal). Works with any text architecture.
  gemma3,
  // Qwen2-VL's projector (clip.projector_type "qwen2vl_merger"): ViT with 2-D M-RoPE
  // inside attention, 2 x 2 patch merge (merge must be 2), MLP. With an
  // M-RoPE text model (make_qwen2vl_text_model()) mtmd gives its image chunks
  // M-RoPE positions: a w x h token grid advances the position by max(w, h),
  // not by its token count. Its input size is dynamic: mtmd resizes an image
  // to multiples of 2 * patch_size (keeping 8 .. 4096 tokens), so the token
  // count depends on the image (112 x 112 -> 16, a 644 x 476 photo -> 391);
  // image_size is nominal: mmproj_tokens_per_image() counts for that size.
  qwen2vl,
  // An AUDIO projector, Qwen2-Audio's (clip.projector_type "qwen2a"): a
  // Whisper-style encoder (two conv1d layers over n_mel_bins log-mel
  // channels, the second with stride 2; 1500 learned positions; n_layer
  // LayerNorm blocks with GELU (erf) FFNs, q/v biases and no k bias; average
  // pooling by 2; a final LayerNorm) and one linear layer (mm.a.fc) to the
  // text model's width. Shape defaults as below (2 blocks, 64 wide, 4 heads,
  // FFN 128) and 128 mel bins; the image fields are ignored. mtmd feeds it
  // 16 kHz mono float samples (mtmd_bitmap_init_from_audio): it appends 30 s
  // of silence, makes 10 ms mel frames and cuts them into whole 30 s chunks
  // of 3000 frames (the last, partial one dropped), each one audio chunk of
  // 3000 / 2 / 2 = 750 tokens (25 per second of chunk). A clip of N samples
  // is floor((floor((N + 480000) / 160) + 1) / 3000) chunks: 750 tokens for
  // anything shorter than 29.99 s (1.5 s of audio is 750 tokens, mostly
  // encoded silence), 1500 up to 59.99 s, and so on. Works with any text
  // architecture; ordinary (1-D) positions, decoded causally.
  qwen2a,
};

// "gemma3" | "qwen2vl" | "qwen2a" -> kind; anything else throws Errc::invalid_argument naming it.
WEFT_API MmprojKind parse_mmproj_kind(const std::string &name);
WEFT_API const char *mmproj_kind_name(MmprojKind kind) noexcept;

struct MakeMmprojParams {
  // Text model GGUF the projector is for; its embedding width (and the scale
  // of its token embeddings) are read from it. Required.
  std::string base;
  // Output path. Required. Written atomically (temp file, fsync, rename).
  std::string out;
  MmprojKind kind = MmprojKind::gemma3;  // default gemma3
  std::uint64_t seed = 1;                // default 1
  // Side of the square image the encoder sees, in pixels (gemma3: mtmd
  // resizes every input to it; qwen2vl: nominal, see above). 16 .. 1024, a
  // multiple of patch_size * merge. Default 112.
  int image_size = 112;
  // Side of a patch, in pixels. 2 .. 64. Default 14.
  int patch_size = 14;
  // Patches merged per side (gemma3: average pooling,
  // clip.vision.projector.scale_factor; qwen2vl: concatenation,
  // clip.vision.spatial_merge_size, must be 2). 1 .. 8. Default 2:
  // 112 / 14 = 8 patches per side -> 4 x 4 = 16 tokens.
  int merge = 2;
  // Vision transformer shape. Defaults: 2 blocks, 64 wide, 4 heads, FFN 128.
  // n_layer 1 .. 8; n_embd 8 .. 1024 and a multiple of n_head; n_head 1 .. 64;
  // n_ff 8 .. 4096 and != n_embd (llama.cpp's loader takes an FFN whose down
  // projection is n_embd wide on input for a legacy file with up and down swapped).
  // (The same fields shape qwen2a's audio encoder, where n_ff may equal n_embd.)
  int n_layer = 2;
  int n_embd = 64;
  int n_head = 4;
  int n_ff = 128;
  // qwen2a only: log-mel channels mtmd computes and the first conv reads
  // (clip.audio.num_mel_bins; Whisper large-v3 and Qwen2-Audio use 128,
  // older Whisper models 80). 8 .. 256. Default 128.
  int n_mel_bins = 128;
};

// Image tokens (embeddings) an image_size x image_size image becomes:
// (image_size / (patch_size * merge))^2 (for gemma3, every image); 0 for
// qwen2a, which takes no images. Pure; does not validate.
WEFT_API int mmproj_tokens_per_image(const MakeMmprojParams &params) noexcept;

// Writes the projector. Throws Error:
//  - invalid_argument: empty path, a shape value outside its range above
//    (the message names the value and the limit), image_size not a multiple
//    of patch_size * merge (image kinds), qwen2vl with merge != 2 or a head
//    width not a multiple of 4, `base` is itself a projector;
//  - not_found: `base` does not exist;
//  - corrupt: `base` is not a readable GGUF or lacks its embedding width;
//  - io: `out` not writable, disk full.
// Never leaves a partial file at `out`; a previous file there stays intact.
WEFT_API void make_mmproj(const MakeMmprojParams &params);

// Writes `base`, a llama-architecture GGUF (e.g. a generated preset), as the
// qwen2vl architecture: the same tensors and tokenizer, the llama.* keys
// renamed qwen2vl.*, and qwen2vl.rope.dimension_sections splitting the rotary
// half-dimension as Qwen2-VL does (1/4 temporal, 3/8 height, 3/8 width, e.g.
// [2, 3, 3, 0] for tiny's 16-wide heads). llama.cpp decodes it with M-RoPE
// (four position components per token; for text all four are equal). Its
// logits differ from `base`'s (M-RoPE rotates NEOX-style pairs). Throws Error: invalid_argument (empty out, `base` not llama, rotary
// dimension below 8), not_found/corrupt (`base`), io (`out`). Atomic, as above.
WEFT_API void make_qwen2vl_text_model(const std::string &base, const std::string &out);

}  // namespace weft
