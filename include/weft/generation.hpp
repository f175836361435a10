// weft/generation.hpp — a running generation: poll it, wait for it, cancel it.
//
// Ownership: Generation is a cheap, copyable handle to shared progress; it stays
// valid (and its result readable) after the conversation or executor is gone.
// Thread-safety: every method may be called from any thread at any time; none
// waits for a running decode. Callbacks (GenerateParams::on_token) run on the
// thread that calls Executor::step(), never concurrently for one generation.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/error.hpp"
#include "weft/export.hpp"
#include "weft/sampling.hpp"
#include "weft/tools.hpp"
#include "weft/types.hpp"

namespace weft {

enum class FinishReason {
  running = 0,   // not finished yet
  max_tokens,    // produced GenerateParams::max_tokens tokens
  end_of_generation,  // sampled an end-of-generation token (EOS, EOT, ...)
  stop_string,   // the text reached one of GenerateParams::stop
  context_full,  // the conversation reached the executor's n_ctx
  cancelled,     // cancel(), or the conversation was disposed or rewound
  error,         // see GenerationResult::error
};

WEFT_API const char *finish_reason_name(FinishReason reason) noexcept;

// A token and its log-probability (natural log) under the model.
struct TokenProb {
  Token token = 0;
  float logprob = 0.0f;
};

// What GenerateParams::logprobs records for one sampled token: its
// log-probability and the `top_logprobs` most likely tokens at that point,
// most likely first (ties by lower id). Log-probabilities are the
// log-softmax of the logits as the model gave them (Conversation::logits()):
// before logit bias, penalties, grammar and temperature, so they say what
// the model thought, not what the sampler allowed. A token whose logit is
// -inf has logprob -inf.
struct TokenLogprob {
  Token token = 0;
  float logprob = 0.0f;
  std::vector<TokenProb> top;
};

struct GenerationResult {
  // Every sampled token, including the final one (an end-of-generation token
  // too). All of them are part of the conversation: the last is decoded at
  // the next step, so the conversation can go on from it.
  std::vector<Token> tokens;
  // The released text, cut before a matched stop string.
  std::string text;
  // With GenerateParams::logprobs: one entry per token of `tokens`, in order
  // (else empty).
  std::vector<TokenLogprob> logprobs;
  // With GenerateParams::tools, once done: the call the reply made (its text
  // stays in `text` and its tokens in the conversation), or nullopt when it
  // spoke instead or was cut before the call closed.
  std::optional<ToolCall> tool_call;
  // Speculative decoding: draft tokens the steps verified, and of those the
  // ones kept (each of them one decode fewer than without drafts).
  std::uint32_t drafted = 0;
  std::uint32_t accepted = 0;
  FinishReason reason = FinishReason::running;
  // Set when reason == error.
  std::optional<Error> error;
};

// Speculative decoding: a generation drafts the tokens it expects next, and
// the step decodes them with its sampled token in one segment, logits at
// every position. The sampler then runs on each position's logits in turn,
// exactly as it would one step at a time: a draft token is kept when the
// sampler picks it there, and the first it does not pick is replaced by the
// pick; the cells of the rest leave the cache. So the tokens are those the
// model samples without drafts — the same tokens under greedy (up to the
// kernels' batch noise), and at a temperature the same distribution (with a
// seeded sampler, the same tokens too: one draw per position either way).
// Grammars, stop strings and max_tokens see only the kept tokens.
enum class Drafter {
  none = 0,    // every token a decode of its own
  lookup = 1,  // the conversation's own tokens: the continuation of the latest
               // earlier place its last n tokens occur (names, items and prices
               // copied from the prompt); no second model
  model = 2,   // a second, smaller model (ExecutorParams::draft_model) with
               // the same vocabulary: greedy, in a context of its own, every
               // drafting conversation in one llama_decode per draft position
               // (docs/EXECUTOR.md, "Speculative decoding")
};

WEFT_API const char *drafter_name(Drafter drafter) noexcept;

struct SpeculativeParams {
  // Default none.
  Drafter drafter = Drafter::none;
  // Most draft tokens one step verifies for this generation, in
  // [1, kMaxDraft]. Default 8. A step also drafts no more than its token
  // budget, time budget and free KV cells leave after every conversation's
  // own tokens: drafts never take a turn from anyone.
  std::uint32_t max_draft = 8;
  static constexpr std::uint32_t kMaxDraft = 32;
  // lookup: the longest and shortest run of last tokens searched for, in
  // [1, kMaxNgram] with ngram_min <= ngram_max (longest match first). Default 3 and 2.
  std::uint32_t ngram_max = 3;
  std::uint32_t ngram_min = 2;
  static constexpr std::uint32_t kMaxNgram = 8;
  // Draft only as many tokens as the cost model predicts to raise the
  // step's tokens per second, weighing each by this generation's recent
  // acceptance (on a CPU a decode of 2 tokens can cost 2-3x one, so drafts
  // often do not pay there; docs/EXECUTOR.md). false: every draft token the
  // budgets and cells allow. Default true.
  bool adaptive = true;
};

struct GenerateParams {
  // Tokens to produce at most. Default 128. Must be >= 1.
  std::uint32_t max_tokens = 128;
  // Sampler for this generation; default: the conversation's own (see
  // Conversation::set_sampler), whose state then advances.
  std::optional<SamplerParams> sampler;
  // Stop when the text contains any of these (the match is cut from the
  // text; the tokens stay in the conversation). Default none. Empty strings
  // are refused.
  std::vector<std::string> stop;
  // Called on the stepping thread for every sampled token with the text that
  // became final with it: UTF-8-complete, never part of a stop string, maybe
  // empty. Default none. Must not throw (a throw cancels the generation).
  std::function<void(Token token, std::string_view text)> on_token;
  // Never sample an end-of-generation token (their logits are masked, as
  // llama-server's ignore_eos): the generation ends at max_tokens, a stop
  // string, a full context or a cancel. Default false.
  bool ignore_eos = false;
  // Called once when the generation ends, with its final result (reason,
  // tokens, text, error): on the stepping thread, after its last on_token,
  // at the end of the step in which it ended — or of the next step when a
  // call on another thread ended it (cancel(), rewind, dispose), or in the
  // executor's destructor. done() is already true; no weft lock is held.
  // Default none. Must not throw (a throw is ignored) nor call step().
  std::function<void(const GenerationResult &result)> on_finish;
  // Record each sampled token's log-probability (GenerationResult::logprobs,
  // TokenLogprob): one log-softmax over the vocabulary per token, on the
  // stepping thread with no lock held. Default false.
  bool logprobs = false;
  // How many of the most likely tokens each entry lists as well, in
  // [0, kMaxTopLogprobs]; more is Errc::out_of_range. Needs `logprobs`
  // (Errc::invalid_argument otherwise). Default 0.
  std::uint32_t top_logprobs = 0;
  static constexpr std::uint32_t kMaxTopLogprobs = 20;
  // Actions the reply may take (weft/tools.hpp): non-empty, the reply is
  // sampled under tools_grammar(tools, tool_choice, format) — one call, or
  // (with ToolChoice::automatic) plain text — and the call is parsed into
  // GenerationResult::tool_call. The generation then samples with a sampler
  // of its own: `sampler`, or a copy of the conversation's settings (whose
  // state does not advance); either with a grammar or json_schema of its own
  // is Errc::invalid_argument. Default none. The model learns the tools from
  // tools_prompt() in its prompt.
  std::vector<Tool> tools;
  // Default automatic.
  ToolChoice tool_choice = ToolChoice::automatic;
  // The call's format. Default automatic: the model's (Model::tool_format()).
  ToolFormat tool_format = ToolFormat::automatic;
  // Called on the stepping thread for every sampled token, just before
  // on_token, with what `logprobs` recorded for it. Default none; needs
  // `logprobs`. Must not throw (a throw cancels the generation).
  std::function<void(const TokenLogprob &entry)> on_logprob;
  // Speculative decoding (see SpeculativeParams). Default unset: the
  // executor's (ExecutorParams::speculative, which drafts nothing unless
  // set). Out-of-range fields are Errc::out_of_range; an unknown drafter
  // Errc::invalid_argument. A recurrent or hybrid model (its state cannot
  // drop a rejected draft) or one with a sliding window (llama.cpp may have
  // reused the cells a rejected draft leaves) drafts nothing.
  std::optional<SpeculativeParams> speculative;
};

namespace detail {
struct GenState;
}

class WEFT_API Generation {
 public:
  Generation() = default;  // an empty handle: done() is true, result() empty

  // True once finished — and, with GenerateParams::on_token, only after the
  // last callback has returned, so a waiter never misses one.
  bool done() const;
  FinishReason reason() const;
  std::size_t n_tokens() const;
  // The text released so far.
  std::string text() const;
  // A snapshot; complete once done().
  GenerationResult result() const;
  // Waits until done or `timeout` passes; returns done(). Someone must be
  // stepping the executor (a loop or the background worker) for progress.
  bool wait_for(std::chrono::milliseconds timeout) const;
  // Ends the generation now with reason cancelled (if still running). Tokens
  // already sampled stay in the conversation.
  void cancel();

  explicit Generation(std::shared_ptr<detail::GenState> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<detail::GenState> state_;
};

}  // namespace weft
