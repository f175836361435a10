// The sentence shapes of the npc corpus's NPC lines, as templates with typed
// slots. Internal: the reply checker (reply_check.cpp) matches replies
// against them and the reply grammar (reply_grammar.cpp) turns them into GBNF.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace weft::detail::npc {

// What a player line asks for; the NPC's reply must be of the same kind.
enum class Kind {
  greeting, trade_offer, trade_price, trade_take, haggle, too_much, rumour, worried, quest_offer, quest_accept,
  quest_decline, directions, business, what_do, weather, farewell
};

enum class Slot { addr, name, title, rplace, work, good, a, A, coins, num, creature, place, time, lost, dir, weather,
                  goodslow };

struct Part {
  bool slot = false;
  Slot s{};
  std::string text;  // when !slot
};

struct Template {
  Kind kind;
  std::vector<Part> parts;
};

// Every NPC sentence shape of the corpus writer, tagged with the kind of
// player line it answers. Immutable; thread-safe.
const std::vector<Template> &npc_templates();

// The kind of a player line said to NPC `npc`, as the checker reads it;
// nullopt for a line the corpus would not write. Pure.
std::optional<Kind> player_kind(const std::string &line, const std::string &npc);

}  // namespace weft::detail::npc
