// summarize_and_compact (weft/memory.hpp): the summary is a generation on a
// fork, and the compaction its on_finish, so nothing waits.
#include <fmt/format.h>

#include "core/internal.hpp"
#include "weft/executor.hpp"
#include "weft/compaction.hpp"
#include "weft/memory.hpp"

namespace weft {
namespace {

// One non-empty line: the summary cannot run on into a made-up next turn.
constexpr const char *kOneLine = R"(root ::= [^\n]+ "\n")";

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

}  // namespace

Generation summarize_and_compact(Executor &executor, Conversation &conv, const SummaryParams &params) {
  if (std::uint64_t(params.keep_first) + params.keep_last > conv.n_tokens()) {
    detail::fail(Errc::out_of_range, fmt::format("summarize_and_compact: keep_first {} + keep_last {} exceed the "
                                                 "conversation's {} tokens",
                                                 params.keep_first, params.keep_last, conv.n_tokens()));
  }
  Conversation fork = conv.fork();
  try {
    fork.prompt(params.instruction);
    GenerateParams g;
    g.max_tokens = params.max_tokens;
    g.sampler = SamplerParams{.grammar = kOneLine};
    // Runs on the stepping thread once the summary is over; the executor
    // outlives it (its destructor cancels the generation first, and a
    // cancelled one touches nothing but the fork).
    std::optional<Memory> memory = params.memory;  // a handle: add() changes the store it names
    g.on_finish = [&executor, conv, fork, params, memory](const GenerationResult &r) mutable {
      SummaryResult out;
      if (r.reason == FinishReason::error || r.reason == FinishReason::cancelled) {
        out.error = r.error ? *r.error : Error(Errc::cancelled, "the summary's generation was cancelled");
      } else {
        out.summary = trimmed(r.text);
        try {
          if (!conv.generation()) {
            conv.compact({params.keep_first, params.keep_last, params.prefix + out.summary + params.suffix});
            out.compacted = true;
          }
          if (memory) out.memory_id = memory->add(executor, out.summary, "summary");
        } catch (const Error &e) {
          out.error = e;
        }
      }
      try {
        fork.dispose();
        if (params.on_done) params.on_done(out);
      } catch (...) {
        // Documented: ignored.
      }
    };
    return fork.generate(g);
  } catch (...) {
    fork.dispose();
    throw;
  }
}

}  // namespace weft
