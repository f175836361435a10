// weft/compaction.hpp — history compaction by the NPC's own model: a
// summary written on a fork, then Conversation::compact, with no wait
// (docs/EXECUTOR.md, "Memory and compaction").
//
// Thread-safety: summarize_and_compact may be called from any thread; its
// callback runs on the stepping thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "weft/conversation.hpp"
#include "weft/export.hpp"
#include "weft/generation.hpp"
#include "weft/memory.hpp"

namespace weft {

class Executor;

// summarize_and_compact: what it did.
struct SummaryResult {
  std::string summary;              // the line the model wrote (no newline)
  bool compacted = false;           // the conversation was compacted with it
  std::uint64_t memory_id = 0;      // its entry in SummaryParams::memory (0: none)
  std::optional<Error> error;       // why not (the generation's error, or compact()'s)
};

struct SummaryParams {
  // As CompactParams: the tokens kept at the start and at the end.
  // Defaults 0 and 64.
  std::uint32_t keep_first = 0;
  std::uint32_t keep_last = 64;
  // Prompted on a fork of the conversation after its history; the model
  // answers in one line (a grammar holds it to one non-empty line). Default
  // "\nSummary of the conversation so far, in one line: ".
  std::string instruction = "\nSummary of the conversation so far, in one line: ";
  // Most tokens of the summary. Default 48.
  std::uint32_t max_tokens = 48;
  // What surrounds the summary in the compacted history. Defaults
  // "Earlier: " and "\n".
  std::string prefix = "Earlier: ";
  std::string suffix = "\n";
  // Where the summary is remembered as well (an entry with metadata
  // "summary", embedded on the executor). Default none.
  std::optional<Memory> memory;
  // Called on the stepping thread once it is over. Default none. Must not
  // throw (a throw is ignored) nor call step().
  std::function<void(const SummaryResult &result)> on_done;
};

// History compaction by the NPC's own model, without a wait: forks `conv`,
// prompts the fork with the instruction and generates the summary under the
// executor's steps. When it ends (on the stepping thread) the fork is
// disposed and, unless `conv` is generating then (its reply is not cut:
// SummaryResult::compacted false, the summary handed to on_done), `conv` is
// compacted to keep_first + prefix + summary + suffix + its last keep_last
// tokens — of its history as it is then. Returns the summary's generation.
// Throws as Conversation::fork, prompt and generate do, and
// Errc::out_of_range when keep_first + keep_last exceed conv's tokens.
WEFT_API Generation summarize_and_compact(Executor &executor, Conversation &conv, const SummaryParams &params = {});

}  // namespace weft
