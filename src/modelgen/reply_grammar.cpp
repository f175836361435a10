// weft::npc_reply_grammar: the corpus's NPC sentence shapes as GBNF, with the
// slots narrowed to one NPC: its name, role, place, work lines, and its
// role's goods at prices in their ranges. It knows nothing of the player's
// line, so a reply of the wrong kind or a wrong repeated price stays possible
// (the reply checker's business); it only keeps the model inside the grammar.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/internal.hpp"
#include "modelgen/npc_grammar.hpp"
#include "modelgen/reply_templates.hpp"
#include "weft/reply_check.hpp"

namespace weft {
namespace {

using namespace detail::npc;

std::string quote(std::string_view s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

template <typename List>
std::string alternatives(const List &list) {
  std::string out = "(";
  for (const auto &x : list) out += (out.size() > 1 ? " | " : "") + quote(x);
  return out + ")";
}

std::string numbers(int lo, int hi) {
  std::vector<std::string> n;
  for (int i = lo; i <= hi; ++i) n.push_back(std::to_string(i));
  return alternatives(n);
}

const char *article(const char *noun) { return std::string_view("aeiou").find(noun[0]) != std::string_view::npos ? "an" : "a"; }

// One template as a GBNF sequence; `good`, when set, fills the good slots
// (with its article, and its price range for the price).
std::string sequence(const Template &t, const Role &role, const std::string &name, const Good *good) {
  std::string out;
  for (const auto &p : t.parts) {
    std::string item;
    if (!p.slot) {
      item = quote(p.text);
    } else {
      switch (p.s) {
        case Slot::addr: item = alternatives(kAddress); break;
        case Slot::name: item = quote(name); break;
        case Slot::title: item = quote(role.title); break;
        case Slot::rplace: item = quote(role.place); break;
        case Slot::work: item = alternatives(role.work); break;
        case Slot::good: item = quote(good->name); break;
        case Slot::a: item = good != nullptr ? quote(article(good->name)) : "(\"a\" | \"an\")"; break;
        case Slot::A: {
          std::string a = article(good != nullptr ? good->name : "x");
          a[0] = static_cast<char>(a[0] - 'a' + 'A');
          item = good != nullptr ? quote(a) : "(\"A\" | \"An\")";
          break;
        }
        case Slot::coins:
          if (good == nullptr) {
            item = "coins";
          } else {
            item = "(" + numbers(std::max(good->lo, 2), good->hi) + " \" gold coins\"";
            item += good->lo <= 1 ? " | \"1 gold coin\")" : ")";
          }
          break;
        case Slot::num: item = "num"; break;
        case Slot::creature: item = alternatives(kCreatures); break;
        case Slot::place: item = alternatives(kPlaces); break;
        case Slot::time: item = alternatives(kTimes); break;
        case Slot::lost: item = alternatives(kLost); break;
        case Slot::dir: item = alternatives(kDirections); break;
        case Slot::weather: item = alternatives(kWeather); break;
        case Slot::goodslow: item = "(\"good\" | \"slow\")"; break;
      }
    }
    out += (out.empty() ? "" : " ") + item;
  }
  return out;
}

bool has_good(const Template &t) {
  return std::any_of(t.parts.begin(), t.parts.end(), [](const Part &p) { return p.slot && p.s == Slot::good; });
}

}  // namespace

std::string npc_reply_grammar(const std::string &name, const std::string &role_title) {
  return npc_reply_grammar(name, role_title, std::string());
}

std::string npc_reply_grammar(const std::string &name, const std::string &role_title, const std::string &player_line) {
  const auto &rs = roles();
  const auto it = std::find_if(rs.begin(), rs.end(), [&](const Role &r) { return role_title == r.title; });
  if (it == rs.end()) detail::fail(Errc::invalid_argument, fmt::format("unknown npc role \"{}\"", role_title));
  if (name.empty()) detail::fail(Errc::invalid_argument, "npc_reply_grammar: the NPC's name is empty");
  std::vector<std::string> lines;
  const auto asked = player_line.empty() ? std::nullopt : detail::npc::player_kind(player_line, name);
  for (const auto &t : npc_templates()) {
    if (asked && t.kind != *asked) continue;  // it would not answer the player's line
    if (!has_good(t)) {
      // A quest's creature takes "A"/"An" too; the checker asks no more of it.
      lines.push_back(sequence(t, *it, name, nullptr));
      continue;
    }
    for (const auto &g : it->goods) lines.push_back(sequence(t, *it, name, &g));
  }
  // Parenthesised: GBNF allows line breaks between alternatives only inside a group.
  std::string out = "root ::= \" \" line \"\\n\"\nline ::= (\n    ";
  for (std::size_t i = 0; i < lines.size(); ++i) out += (i ? "\n  | " : "") + lines[i];
  out += "\n)";
  // Prices a template leaves open (a haggled offer, a reward): 1 .. 999.
  out += "\nnum ::= [1-9] [0-9]? [0-9]?\ncoins ::= \"1 gold coin\" | [2-9] \" gold coins\" | [1-9] [0-9] [0-9]? \" gold coins\"\n";
  return out;
}

}  // namespace weft
