// Token sampling for one conversation. Internal.
//
// Sampler wraps a llama.cpp sampler chain built from SamplerParams and samples
// from a logits vector the caller keeps (weft stores logits per conversation
// rather than reading them back from the context). Streamed text:
// text_stream.hpp.
//
// Thread-safety: none; each conversation owns one and uses it from the
// stepping thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/banned_strings.hpp"
#include "core/sampling_stages.hpp"
#include "weft/model.hpp"
#include "weft/sampling.hpp"
#include "weft/types.hpp"

struct llama_sampler;
struct llama_token_data;
struct llama_token_data_array;

namespace weft::detail {

// The longest grammar, grammar_root or json_schema a sampler takes: what a
// saved state's strings may hold (state_codec's kMaxString), so every
// sampler that runs can be saved and loaded again.
inline constexpr std::size_t kMaxSamplerText = 1u << 20;

// Throws Errc::invalid_argument naming the field, its value and the allowed
// range (e.g. "SamplerParams.top_p = 1.5 is outside (0, 1]"). NaN fails every
// range; a text over kMaxSamplerText is Errc::out_of_range.
void validate(const SamplerParams &p);
// The checks of typical_p, XTC, DRY and mirostat alone (validate() runs them).
void validate_stages(const SamplerParams &p);
// Whether any of those differs from its default: the state then needs
// version 10 to hold them.
bool uses_stages(const SamplerParams &p);

class Sampler {
 public:
  // Validates (a logit_bias token outside the vocabulary is
  // Errc::out_of_range), then builds [grammar] -> penalties -> top_k -> top_p -> min_p ->
  // temp -> dist(seed), or [grammar] -> penalties -> greedy when temperature is
  // 0. Stages that are off (top_k 0, top_p 1, min_p 0) are left out.
  // penalty_last_n = -1 ("the whole context") means `n_ctx` tokens, or the
  // model's n_ctx_train when n_ctx is 0.
  // The grammar is params.grammar, or json_schema_to_grammar(json_schema)
  // (start rule "root"). Throws Errc::invalid_argument for bad params, a
  // grammar llama.cpp cannot parse (quoting llama.cpp's logged reason) or a
  // json_schema that does not convert.
  Sampler(const Model &model, const SamplerParams &params, std::int32_t n_ctx = 0);
  ~Sampler();
  Sampler(Sampler &&) noexcept;
  Sampler &operator=(Sampler &&) noexcept;
  Sampler(const Sampler &) = delete;
  Sampler &operator=(const Sampler &) = delete;

  // An independent copy with identical state (RNG position, penalty history,
  // grammar stacks): sampling both from equal logits gives equal tokens.
  Sampler clone() const;

  // Picks a token from `logits` (size n_vocab, else Errc::invalid_argument;
  // a NaN entry is refused too), plus params().logit_bias, added in a copy
  // of its own before every path below (so a bias can change the argmax and
  // the top k). Advances the RNG (temperature > 0) but not the
  // penalty history or grammar: call accept() with the token that is kept.
  // Throws Errc::invalid_argument "grammar admits no token" when the grammar
  // (together with -inf logits) leaves nothing to choose, or when every logit
  // is -inf. weft's own work here does not allocate; llama.cpp's grammar and
  // top_p stages may.
  //
  // With a grammar, sample() first picks as if there were none (by the paths
  // below) and keeps that token when the grammar allows it; otherwise it
  // draws again over the vocabulary the grammar masks (as sample_chain()),
  // from the RNG position and mirostat state the first pick started from.
  // This is llama.cpp's common sampler's order; it costs one token's check
  // where masking 32,000 costs ~2 ms. params().banned_strings are checked
  // the same way: a pick that would complete one is drawn again over the
  // vocabulary with every such token masked (and the grammar's mask, if any).
  //
  // When the chain is a plain argmax (temperature 0, penalties
  // that llama.cpp's penalty stage skips: penalty_last_n 0, or repeat 1 with
  // frequency and presence 0), sample() takes the argmax directly instead of
  // filling a candidate array and running the chain: the same token (the
  // first of equal maxima, as llama.cpp's greedy stage), the same errors, and
  // the same state (greedy draws no RNG; the chain's stages are stateless here).
  // With `ban_eog`, the model's end-of-generation tokens are never picked
  // (their logits count as -inf: GenerateParams::ignore_eos); refused as
  // above when nothing else is left.
  Token sample(std::span<const float> logits, bool ban_eog = false);
  // sample() through the full llama.cpp chain, never the fast path, the
  // grammar and banned_strings (if any) masking the vocabulary first. For tests and benchmarks
  // that compare the two.
  Token sample_chain(std::span<const float> logits, bool ban_eog = false);
  // Whether sample() takes the argmax fast path (see above).
  bool greedy_fast_path() const noexcept { return fast_greedy_; }
  // At a temperature with top_k in [1, kTopKFastMax], no mirostat and
  // penalties off, sample() selects the top k candidates itself in one pass
  // over the logits and hands llama.cpp's chain only those, sorted (its
  // top_k stage then has nothing left to sort): the same candidates in the
  // same order as its partial sort, so the same token and state. When the
  // order is not unique (equal logits among or at the edge of the top k, or
  // fewer than k finite ones) it takes the full chain instead.
  static constexpr std::int32_t kTopKFastMax = 256;
  bool top_k_fast_path() const noexcept { return fast_top_k_; }
  // sample() through the top-k path alone, for tests and benchmarks: the
  // token, or -1 (nothing drawn, state unchanged) when the full chain must
  // decide. Only when top_k_fast_path().
  Token sample_top_k(std::span<const float> logits, bool ban_eog = false);

  // The draw sample() makes again over the vocabulary the grammar masks,
  // without masking all of it: when sample() takes the greedy or the top-k
  // fast path, the best k tokens the grammar allows decide, so tokens are
  // checked best first, a widening prefix at a time, until the k best
  // allowed (and their order) are unique: the token and state
  // sample_chain() would give. -1 (nothing drawn, state unchanged) when the
  // full mask must decide (no grammar, another chain, ties at the edge, or
  // a quarter of the vocabulary (greedy; a sixteenth with a top k) checked
  // without deciding, or, with a top k, for 1, 2, 4 ... 64 draws after
  // such a miss). For tests and benchmarks; sample() uses it.
  Token sample_masked(std::span<const float> logits, bool ban_eog = false);

  // Records a generated token in the penalty history and advances the grammar.
  // Throws Errc::out_of_range for an id outside the vocabulary and
  // Errc::invalid_argument for a token the grammar does not allow here (state
  // is then unchanged).
  void accept(Token token);

  // The next token starts a new text: banned_strings look back no further
  // (a generation's first token, with the conversation's own sampler).
  void start_text() noexcept { bans_.clear(); }

  // Records prompt tokens in the penalty history only (the grammar constrains
  // what is generated, not the prompt). Throws Errc::out_of_range for an id
  // outside the vocabulary, before recording any.
  void accept_prompt(std::span<const Token> tokens);

  const SamplerParams &params() const noexcept { return params_; }

  // Everything needed to rebuild this sampler elsewhere (a state file): the
  // RNG position and the journal of accepted tokens that the penalties and
  // the grammar were fed (prompt-only tokens as -(t + 1)). Without a grammar
  // the journal keeps only what the penalty window can still see.
  // With mirostat, its running mu too (absent: it starts at 2 * tau); with
  // banned_strings, the end of the text they look back on.
  struct State {
    std::uint64_t rng = 0;
    std::vector<std::int32_t> journal;
    std::optional<float> mirostat_mu;
    std::optional<std::string> ban_tail;
  };
  State state() const;
  // A sampler with `params` whose penalties, grammar and RNG are as `state`
  // left them. Throws Errc::corrupt when the journal does not replay (a
  // token the grammar refuses, an id outside the vocabulary).
  static Sampler restore(const Model &model, const SamplerParams &params, std::int32_t n_ctx, const State &state);

 private:
  struct Free {
    void operator()(llama_sampler *s) const noexcept;
  };
  using Ptr = std::unique_ptr<llama_sampler, Free>;

  Sampler(Model model, SamplerParams params, Ptr grammar, Ptr chain, Ptr temp);

  Model model_;
  SamplerParams params_;
  Ptr grammar_;  // null without a grammar; kept apart so sample() can tell why nothing is left
  Ptr chain_;    // penalties ... temperature; weft selects (greedy or its own RNG)
  Ptr temp_;     // the temperature stage, apart from chain_ when XTC runs between them
  ChainPlan plan_;
  float mu_ = 0.0f;  // Mirostat 2.0's running maximum surprise
  BannedStrings bans_;
  std::vector<float> banned_;          // the logits with banned_strings' completions masked, reused
  std::vector<float> masked_;          // the logits with EOG masked (ban_eog), reused
  std::vector<float> biased_;          // the logits plus params_.logit_bias (when set), reused
  // weft draws from the final distribution itself so the RNG state is one
  // serialisable number (llama.cpp's dist sampler hides its engine).
  std::uint64_t rng_ = 0;
  std::vector<std::int32_t> journal_;
  std::size_t journal_keep_ = 0;  // 0 = keep all (a grammar needs the whole history)
  bool fast_greedy_ = false;      // the chain is [penalties, off] -> greedy: sample() is an argmax
  bool fast_top_k_ = false;       // the chain is [penalties, off] -> top_k -> ...: sample() selects the top k
  std::uint8_t masked_skip_ = 0;     // sample_masked: top-k draws left to the full mask
  std::uint8_t masked_backoff_ = 1;  // ...after the next miss (doubling to 64)
  Token sample_argmax(std::span<const float> logits) const;
  // After chain_: XTC and the temperature (when split), then weft's draw
  // (or mirostat's), and the checks on it.
  Token finish(llama_token_data_array &arr);
  // sample() without the grammar: the fast paths or chain_draw(unmasked).
  Token sample_free(std::span<const float> logits, bool ban_eog);
  // Candidates from `logits` (masked by the grammar when `masked`), the
  // chain, then finish().
  Token chain_draw(std::span<const float> logits, bool ban_eog, bool masked);
  bool grammar_allows(Token token);
  // Neither a banned string nor the grammar refuses `token` here.
  bool allowed(Token token);
  // `logits` with what banned_strings refuse masked; Errc::invalid_argument when nothing is left.
  std::span<const float> mask_banned(std::span<const float> logits);
  Token draw(llama_token_data_array &arr);
  void apply_chain(llama_token_data_array &arr);
  void check_size(std::span<const float> logits) const;
  void journal_push(std::int32_t entry);
};

}  // namespace weft::detail
