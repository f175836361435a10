// DraftModel: the executor's second context for Drafter::model
// (ExecutorParams::draft_model). Each drafting conversation keeps a sequence
// there holding its tokens; after a step samples, the stepper asks for
// drafts (want(), under the state lock, copying only the tokens a sequence
// lacks), decodes them with the lock released (run()), and hands each
// conversation its proposal. Only the stepping thread touches it.
#pragma once

#include <llama.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "weft/executor.hpp"
#include "weft/sampling.hpp"
#include "weft/types.hpp"

namespace weft::detail {

class DraftModel {
 public:
  // Checks the draft model against the target (vocabulary token for token,
  // plain attention) and the params' ranges, and makes the context. Throws
  // Errc::invalid_argument / out_of_range naming the value, Errc::backend
  // when llama.cpp cannot make the context.
  DraftModel(const Model &target, const DraftModelParams &params, int n_threads, llama_flash_attn_type kernel);
  ~DraftModel();
  DraftModel(const DraftModel &) = delete;
  DraftModel &operator=(const DraftModel &) = delete;

  // Starts a round of wants (the previous round's proposals are dropped).
  void begin();
  // Conversation `conv`, whose tokens are `history` then `next` (sampled,
  // not decoded yet), wants up to `n` drafts after `next`, picked with its
  // sampler's logit biases. Copies what its sequence lacks. Takes the least
  // recently used sequence not wanted this round when it has none: at most
  // n_seq_max wants a round (the caller chooses whose turn it is). False
  // when the round is full.
  bool want(std::uint64_t conv, std::span<const Token> history, Token next, std::uint32_t n,
            std::span<const LogitBias> biases);
  struct Ran {
    std::uint32_t tokens = 0;  // decoded in the draft context
    double seconds = 0;
  };
  // Decodes the round: each wanted conversation's missing tokens, then one
  // llama_decode per draft position for all of them. With `seconds`, as
  // many positions as its learnt costs predict fit (none when the catching
  // up alone does not). A decode that fails leaves no proposals and empties
  // the context (the sequences are decoded again next time).
  Ran run(std::optional<double> seconds);
  // The round's proposals, in want() order.
  struct Proposal {
    std::uint64_t conv = 0;
    std::size_t at = 0;  // history.size() when wanted: the tokens follow `next` there
    Token next = 0;
    std::vector<Token> tokens;
  };
  std::span<Proposal> proposals() { return std::span(proposals_).first(n_wants_); }

 private:
  struct Slot {
    std::uint64_t conv = 0;  // 0 = free
    std::size_t offset = 0;  // history index of tokens[0] (a window of a long conversation)
    std::vector<Token> tokens;  // what its sequence holds
    std::uint64_t used = 0;     // round it last drafted in
  };
  struct Want {
    int slot = -1;
    std::vector<Token> missing;  // to decode, `next` last
    std::uint32_t n = 0;
    std::vector<LogitBias> biases;
  };
  void clear_slot(Slot &s, int seq);
  void reset_all();
  bool decode(int n_tokens);
  std::uint32_t cells_held() const;
  // Greedy pick from `logits` plus `biases`, or -1 when its probability is under p_min.
  Token pick(const float *logits, std::span<const LogitBias> biases) const;

  DraftModelParams params_;
  llama_context *ctx_ = nullptr;
  llama_batch batch_{};
  std::uint32_t n_ctx_ = 0, n_batch_ = 0, window_ = 0;
  std::int32_t n_vocab_ = 0;
  std::vector<Slot> slots_;
  std::vector<Want> wants_;
  std::vector<Proposal> proposals_;
  std::size_t n_wants_ = 0;
  std::uint64_t round_ = 0;
  // Learnt costs: seconds per caught-up token, and per draft position.
  double token_s_ = 0, position_s_ = 0;
};

}  // namespace weft::detail
