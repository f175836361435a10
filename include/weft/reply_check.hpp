// weft/reply_check.hpp — judges NPC replies in a demo-style transcript
// against the grammar of the npc corpus (weft/train.hpp).
//
// The corpus is generated from a small grammar, so whether a reply is one the
// corpus could have produced for that NPC, in answer to that player line, has
// an exact answer: the right sentence shape for the question, the NPC's own
// name, role and place, the role's goods at a price in its range, a quoted
// price repeated correctly. `weft corpus --check FILE` prints it.
//
// A transcript is a sequence of dialogues separated by blank lines, each a
// header line "<Name> is the <role> of Eldermoor." and then alternating
// "Player: ..." and "<Name>: ..." lines, player first — what make_npc_corpus()
// writes and what `weft demo` prints.
//
// Thread-safety: both functions are reentrant and pure apart from reading the
// file; results are owned by the caller.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "weft/export.hpp"

namespace weft {

struct ReplyVerdict {
  std::size_t line = 0;   // 1-based line of the reply in the transcript
  std::string npc;        // the dialogue's NPC, from its header
  std::string role;       // "blacksmith"
  std::string player;     // the player line it answers, without "Player: "
  std::string reply;      // the NPC's text, without "<Name>: ", trimmed
  // False when the player line is not one the corpus grammar has (a game's
  // own line): the reply cannot be judged and counts in neither share.
  bool judged = true;
  bool fits = false;
  // Why not, when judged and !fits: one short sentence each.
  std::vector<std::string> reasons;
};

struct ReplyCheck {
  std::size_t dialogues = 0;
  std::size_t replies = 0;   // judged NPC replies
  std::size_t fit = 0;       // judged replies that fit
  std::size_t unjudged = 0;  // NPC replies to player lines outside the grammar
  std::vector<ReplyVerdict> verdicts;  // every NPC reply, in transcript order
  // fit / replies; 0 when there are none.
  double share() const noexcept { return replies == 0 ? 0.0 : double(fit) / double(replies); }
};

// Judges every NPC reply in `transcript`. Throws Error(Errc::corrupt) naming
// the line when the text is not a transcript (no header, an unknown role, a
// line that is not "Speaker: text", an NPC line with no player line before it).
WEFT_API ReplyCheck check_npc_replies(std::string_view transcript);

// The same for a file. Throws Error: not_found (no such file), io (unreadable),
// corrupt (as above).
WEFT_API ReplyCheck check_npc_replies_file(const std::string &path);

// A GBNF grammar (for SamplerParams::grammar) that admits the NPC lines the
// corpus has for this NPC and role — its own name, place and work, the
// role's goods at prices in their ranges — as " <line>\n", the text that
// follows "<Name>:". Derived from the corpus grammar alone, never from the
// player's line: a reply of the wrong kind stays possible. Throws
// Errc::invalid_argument for an unknown role or an empty name. Pure.
WEFT_API std::string npc_reply_grammar(const std::string &name, const std::string &role);
// The same, narrowed to the lines that answer `player_line` (the kind of line
// the checker asks of a reply to it: a greeting for a greeting, a word on
// business for "How is business?"), which a game knows as it wrote the line.
// The model still writes every detail (name, goods, prices, places). A line
// the corpus would not write (another question, free text): all the role's
// lines, as above. Throws as above. Pure.
WEFT_API std::string npc_reply_grammar(const std::string &name, const std::string &role,
                                       const std::string &player_line);

}  // namespace weft
