// weft/conversation.hpp — one dialogue on an executor.
//
// A conversation has a token history (decoded into the executor's KV cache),
// queued input (not decoded yet), the logits of its last decoded token, a
// sampler, and at most one running generation.
//
// Ownership: Conversation is a cheap, copyable handle. The conversation lives
// until dispose() or until its last handle is destroyed, which disposes it.
// A default-constructed handle is empty; every operation on it, or on a
// disposed conversation, throws Errc::disposed.
//
// Thread-safety: any method may be called from any thread, and none but
// save() waits for a running step. Operations that change what the KV cache
// must hold — fork(), rewind(), remove(), shift_left(), dispose(), park() —
// take effect at once for the conversation (tokens(), n_decoded(), logits
// as the docs of each say); the cache follows at a step boundary: at once
// when nobody else steps (or from a callback on the stepping thread), else
// at the stepper's next boundary. Until then n_cells() and residency()
// describe the cache as it is. A decode running for the conversation when it
// changed is not committed to it.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "weft/adapter.hpp"
#include "weft/error.hpp"
#include "weft/export.hpp"
#include "weft/generation.hpp"
#include "weft/memory.hpp"
#include "weft/projector.hpp"
#include "weft/sampling.hpp"
#include "weft/types.hpp"

namespace weft {

enum class Residency {
  resident,   // holds a sequence slot and its KV cells (or has nothing decoded)
  ram,        // parked: KV data in RAM
  disk,       // parked: KV data in a spill file
  recompute,  // parked: tokens only; decoded again when it next runs
};

WEFT_API const char *residency_name(Residency r) noexcept;

struct PromptOptions {
  // Prepend BOS. Default false: weft never adds BOS on its own, so text sent
  // mid-conversation stays BOS-free. Set it on a conversation's first prompt.
  bool add_bos = false;
  // Parse special-token text ("</s>") into control tokens. Default false.
  bool parse_special = false;
};

// Conversation::compact: the history becomes its first keep_first tokens,
// then `summary`, then its last keep_last tokens.
struct CompactParams {
  // Tokens kept at the start (a system prompt, the NPC's card). Default 0.
  std::uint32_t keep_first = 0;
  // Most recent tokens kept. Default 0.
  std::uint32_t keep_last = 0;
  // Text put between them (tokenized without BOS), e.g. a summary of what
  // goes (weft/compaction.hpp, summarize_and_compact). Default empty.
  std::string summary;
};

namespace detail {
struct ConvHandle;
}

// An image in a conversation (Conversation::images()).
struct ImageSpan {
  std::uint64_t id = 0;         // executor-unique, never reused
  std::uint32_t begin = 0;      // its first position in tokens()
  std::uint32_t n_tokens = 0;   // positions (and KV cells) it takes
  std::uint32_t n_pos = 0;      // positions the model's RoPE advances by (n_tokens unless M-RoPE)
  bool encoded = false;         // its embeddings are ready (the encoder thread has run)
  bool audio = false;           // a clip of audio (prompt_audio), not an image
};

struct SaveOptions {
  // Write tokens only, no KV data and no logits: a few bytes a token instead
  // of the model's KV size a token. load() gives a conversation whose whole
  // history is queued input again (n_decoded() 0), decoded by the next steps
  // — sharing what the cache holds of it already. Default false.
  bool tokens_only = false;
};

class WEFT_API Conversation {
 public:
  Conversation() = default;

  // The executor-unique id (never reused).
  std::uint64_t id() const;

  // Queues input; never decodes, never waits for a decode. Any length: long
  // input is decoded over several steps. Throws Errc::out_of_range when the
  // conversation would exceed the executor's n_ctx (naming both), or, under
  // PressurePolicy::fail, when the executor's free KV cells cannot take it,
  // or when it needs a sequence slot, all n_seq_max are held and spill is
  // off (no tier could ever free one); Errc::out_of_range for a token id
  // outside the vocabulary;
  // Errc::invalid_argument for an empty prompt or while a generation runs.
  void prompt(std::string_view text, const PromptOptions &options = {});
  void prompt(std::span<const Token> tokens);
  // Text with media markers (media_marker(), "<__media__>"), each replaced
  // in order by the next of `images` (Projector::prepare), as mtmd_tokenize
  // does it: every piece of text tokenized alone (BOS, if asked, before the
  // first), each image its projector's text around its span. All of it is
  // queued or none (checked as a whole against n_ctx). Throws
  // Errc::invalid_argument when the markers and the images differ in
  // number (naming both), for an empty or another projector's image, and
  // as prompt() and prompt_image() for the rest.
  void prompt(std::string_view text, std::span<const PreparedImage> images, const PromptOptions &options = {});

  // Queues an image (needs ExecutorParams::projector): a PNG or JPEG file's
  // bytes, or raw RGB (width x height x 3 bytes, rows top to bottom). It
  // becomes the text the projector wraps an image in (e.g.
  // "<start_of_image>") and one image span of positions (images()), queued
  // like text. The file is decoded and resized on the calling thread (that
  // costs what the image costs; it never waits for a step); the vision
  // encoder runs on the executor's own encoder thread, never inside step():
  // until its embeddings are ready the conversation's later input waits
  // while other conversations go on. A non-causal image (gemma3-style) is
  // decoded whole in one step; a causal one (qwen2vl-style) in pieces over
  // steps, like a prompt.
  // Throws Errc::invalid_argument without a projector, for an empty or
  // unknown file type (PNG and JPEG only), a zero side, RGB bytes of the
  // wrong size, or while a generation runs; Errc::out_of_range for a side
  // over 8192 or more than 2^25 pixels, or as prompt() for n_ctx and the
  // free cells; Errc::corrupt for bytes that do not decode;
  // Errc::incompatible when an M-RoPE projector lays the image out in a
  // grid other than Qwen2-VL's. A failure of the encoder itself is the
  // conversation's error(). M-RoPE images (Qwen2-VL) take n_tokens cells
  // but advance the positions by n_pos (ImageSpan); models with them cannot
  // shift their cache, so remove() and shift_left() before an image decode
  // the rest again.
  // Images travel with save()/load() and spill (docs/STATE_FORMAT.md).
  void prompt_image(std::span<const std::uint8_t> file);
  void prompt_image(std::uint32_t width, std::uint32_t height, std::span<const std::uint8_t> rgb);
  // An image made earlier by Projector::prepare, on any thread: queueing it
  // costs microseconds (no decode, no copy of its pixels). Throws
  // Errc::invalid_argument for an empty handle or one prepared with another
  // projector than the executor's, and as prompt_image above for the rest.
  void prompt_image(const PreparedImage &image);
  // Queues a clip of audio: mono f32 samples in [-1, 1] at the projector's
  // audio_sample_rate(), preprocessed (the mel spectrogram) on the calling
  // thread, about a millisecond a second of audio; the rest as
  // prompt_image: encoded on the executor's encoder thread, decoded in
  // pieces over steps, kept by save()/load() and spill. The clip is one media span
  // (ImageSpan::audio). Throws Errc::incompatible when the projector takes
  // no audio, Errc::invalid_argument for no samples or one that is not
  // finite, Errc::out_of_range past 2^24 samples, and as prompt_image for
  // the rest.
  void prompt_audio(std::span<const float> samples);
  // Its images and audio clips, by position (queued and decoded ones).
  std::vector<ImageSpan> images() const;

  // Starts generating: each step decodes the last sampled token and samples
  // the next. Queued input is decoded first. Throws Errc::invalid_argument if
  // a generation is already running, the conversation is empty, or params are
  // invalid.
  Generation generate(const GenerateParams &params = {});

  // A new conversation with the same history, queued input, logits and
  // sampler state. The decoded prefix is shared in the KV cache (no copy, no
  // re-decode). Without a free slot an idle conversation is parked to make
  // one; failing that the child starts parked with a copy of the KV data.
  // A parked source's child shares its parked data. Throws
  // Errc::out_of_range when it would need a slot and none can be had: all
  // held, none idle to park, and no spill tier can take the copy.
  Conversation fork();

  // Drops the last n tokens (queued ones first, then decoded ones). Logits
  // for the new last token come from re-decoding that one token at the next
  // step (the whole image, when it is an image's). Throws Errc::out_of_range
  // when n > n_tokens(), Errc::invalid_argument when the cut falls inside an
  // image (images go whole). Cancels a running generation.
  void rewind(std::uint32_t n);
  // Removes history positions [p0, p1) and moves later tokens down (a KV
  // shift — on copies of its own of cells a fork or a shared prefix also
  // holds — or, where the cache cannot shift or there is no room for those
  // copies, re-decoding them). Throws Errc::out_of_range unless p0 <= p1 <=
  // n_decoded(); Errc::invalid_argument when p0 or p1 falls inside an image
  // (an image inside [p0, p1) goes whole). Cancels a running generation.
  void remove(std::uint32_t p0, std::uint32_t p1);
  // Context shift: keep the first `keep` tokens, drop the next `discard`.
  // Same as remove(keep, keep + discard).
  void shift_left(std::uint32_t keep, std::uint32_t discard);

  // History compaction (docs/EXECUTOR.md, "Memory and compaction"): the
  // tokens become tokens()[0, keep_first) + summary + the last keep_last,
  // exactly as a fresh prompt of that history would leave them — the first
  // part keeps its cells, the rest is queued and decoded by the next steps
  // like a prompt (so its logits equal a fresh decode; shift_left() is the
  // cheaper, inexact way, without a summary). Cancels a running generation.
  // Throws Errc::out_of_range when keep_first + keep_last exceed n_tokens()
  // or the result exceeds n_ctx, Errc::invalid_argument when an image lies
  // at or past keep_first (images cannot be re-queued as tokens).
  void compact(const CompactParams &params);

  // Releases the sequence slot and KV cells, drops queued input, cancels a
  // running generation. Idempotent.
  void dispose();
  bool disposed() const;

  // History (decoded) followed by queued input. Each position of an image
  // holds image_token(its id) (weft/types.hpp), a negative value: the
  // vector stays aligned with positions, but is not valid input to prompt().
  std::vector<Token> tokens() const;
  std::uint32_t n_tokens() const;
  std::uint32_t n_decoded() const;
  std::uint32_t n_queued() const;
  // KV cells this conversation references (shared ones included).
  std::uint32_t n_cells() const;

  // True when logits for the last token are available (input fully decoded).
  // A running generation samples from llama.cpp's output in place and keeps
  // none: after a rewind or cancel that leaves its last token they come back
  // with the next step, which decodes that token again.
  bool has_logits() const;
  // Copy of those logits (n_vocab floats). Throws Errc::invalid_argument when
  // has_logits() is false. They stay until replaced by the next decode: no
  // "sample before the next step" rule.
  std::vector<float> logits() const;
  // Samples a token from the current logits with the conversation's sampler
  // and advances its state; the token is not queued (prompt it to keep it).
  Token sample();

  // The conversation's sampler (used by sample() and by generate() without
  // its own). Default: greedy. Throws Errc::invalid_argument for bad params.
  void set_sampler(const SamplerParams &params);
  // Scheduling priority; higher goes first when a step's budget cannot serve
  // everyone. A conversation waiting behind higher ones rises a level every
  // 8 steps it waits, so none starves (docs/EXECUTOR.md, "Turns"). Default 0.
  void set_priority(int priority);
  // The conversation's Memory (weft/memory.hpp), or none (nullopt, the
  // default). save(), save_all() and spill carry it with the conversation
  // (state version 14); fork() shares the same store. The handle is shared:
  // what the game adds through its copy is what gets saved.
  void set_memory(std::optional<Memory> memory);
  std::optional<Memory> memory() const;

  // The LoRA adapters and control vectors (with scales, and layer ranges
  // for control vectors) its tokens decode under from now on — input
  // already queued but not decoded included; empty = the base model. What
  // was decoded before keeps the KV its own setting gave (a history may mix
  // settings; each position is decoded again under its own when it is
  // recomputed). A step decodes each distinct setting in a llama_decode of
  // its own (docs/EXECUTOR.md, "Adapters"). fork() inherits the setting;
  // save()/load() carry it by adapter fingerprint. Never waits for a step.
  // Throws Errc::invalid_argument for an empty Adapter handle, an adapter
  // loaded for another Model (load it with this executor's), a scale that is
  // not finite, a layer range outside [1, n_layer - 1] or set on a LoRA, or
  // an adapter listed twice; the setting is then unchanged.
  void set_adapters(std::span<const AdapterUse> adapters);
  void set_adapters(std::initializer_list<AdapterUse> adapters) {
    set_adapters(std::span<const AdapterUse>(adapters.begin(), adapters.size()));
  }
  // The setting as last set (layer ranges resolved: -1 becomes the layer).
  std::vector<AdapterUse> adapters() const;

  // The last error a step hit for this conversation (decode failure, no KV
  // room under PressurePolicy::fail). While set, its input is held back (not
  // lost); clear_error() lets it be scheduled again.
  std::optional<Error> error() const;
  void clear_error();

  // The running generation, if any.
  std::optional<Generation> generation() const;

  // The conversation's state as bytes (docs/STATE_FORMAT.md): history,
  // queued input, logits, sampler state, a running generation, KV data. Load
  // it with Executor::load into any executor of the same model (and, when it
  // holds images, the same projector: else Errc::incompatible). Each image
  // travels as its embeddings, or as its source while still waiting for the
  // encoder or failed there (encoded again on load). The one call
  // that waits for a running step (the KV data is read at a step boundary);
  // save_async() does not. save(path) writes atomically (temp file, fsync,
  // rename): a crash mid-save leaves the previous file intact.
  std::vector<std::uint8_t> save() const;
  void save(const std::string &path) const;
  // save() with options (SaveOptions): tokens_only writes no KV data — the
  // smallest file; loading decodes the history again (sharing what the
  // cache holds of it already, see ExecutorParams::prefix_cache_cells).
  std::vector<std::uint8_t> save(const SaveOptions &options) const;
  void save(const std::string &path, const SaveOptions &options) const;
  // save() without waiting: the bytes arrive in the future at a step
  // boundary — at once when nobody else steps (no worker, no step running),
  // else at the end of the stepper's running step (a worker is woken for
  // it). Without a worker, the next step() fulfils it. Errors (Errc::disposed
  // when the conversation or executor goes first) arrive through the future.
  std::future<std::vector<std::uint8_t>> save_async() const;
  // The same with a callback instead of a future: `done` gets the bytes, or
  // an empty vector and the error, exactly once — on the stepping thread at
  // that boundary (with the executor's state lock held: do not call back
  // into the executor from it), or on this thread before save_async
  // returns. Throws Errc::disposed at once for a disposed conversation (then
  // `done` is never called).
  void save_async(std::function<void(std::vector<std::uint8_t> bytes, std::exception_ptr error)> done) const;

  // Where its KV data is now.
  Residency residency() const;
  // Hints for a game that knows who speaks next: park() moves this one out
  // of the cache (if resident and something decoded; returns false when no
  // tier can take it) — at once when nobody else steps, else at the
  // stepper's next boundary (then it returns whether a tier is configured:
  // a game thread never copies KV data itself); prefetch()
  // asks the next step to make it resident even before it has input.
  // Neither waits for a running step.
  bool park();
  void prefetch();

  explicit Conversation(std::shared_ptr<detail::ConvHandle> handle) : handle_(std::move(handle)) {}

 private:
  std::shared_ptr<detail::ConvHandle> handle_;
};

}  // namespace weft
