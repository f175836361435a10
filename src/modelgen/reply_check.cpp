// weft::check_npc_replies: judges NPC replies against the npc corpus grammar.
//
// Each sentence shape the corpus writer (corpus.cpp) uses is listed here as a
// template with typed slots. A reply is matched with the slots open (any
// good, any name, any number), then the slot values are checked against the
// dialogue: that way a wrong good or price is reported as exactly that,
// rather than as "no match". The test that corpus text of any seed fits 100%
// keeps these templates in step with the writer.
#include "weft/reply_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "modelgen/npc_grammar.hpp"
#include "modelgen/reply_templates.hpp"

namespace weft {
namespace {

using namespace detail::npc;

const char *kind_name(Kind k) {
  static constexpr const char *names[] = {
      "a greeting", "an offer of goods", "a price of a good", "a sale", "a haggling answer",
      "a refusal to lower the price", "a rumour", "a warning", "a quest", "a quest accepted", "a quest declined",
      "directions", "a word on business", "a description of the work", "a weather remark", "a farewell"};
  return names[static_cast<int>(k)];
}

Template parse(Kind kind, std::string_view t) {
  static const std::map<std::string, Slot, std::less<>> slots = {
      {"addr", Slot::addr}, {"name", Slot::name}, {"title", Slot::title}, {"rplace", Slot::rplace},
      {"work", Slot::work}, {"good", Slot::good}, {"a", Slot::a}, {"A", Slot::A}, {"coins", Slot::coins},
      {"num", Slot::num}, {"creature", Slot::creature}, {"place", Slot::place}, {"time", Slot::time},
      {"lost", Slot::lost}, {"dir", Slot::dir}, {"weather", Slot::weather}, {"goodslow", Slot::goodslow}};
  Template out{kind, {}};
  while (!t.empty()) {
    const auto open = t.find('{');
    if (open != 0) {
      out.parts.push_back({false, {}, std::string(t.substr(0, open))});
      if (open == std::string_view::npos) break;
    }
    const auto close = t.find('}', open);
    out.parts.push_back({true, slots.find(t.substr(open + 1, close - open - 1))->second, {}});
    t.remove_prefix(close + 1);
  }
  return out;
}

std::string with_name(const char *line) {
  std::string s = line;
  s.replace(s.find("{}"), 2, "{name}");
  return s;
}

}  // namespace

const std::vector<Template> &detail::npc::npc_templates() {
  static const std::vector<Template> t = [] {
    std::vector<Template> v;
    auto add = [&](Kind k, std::string_view s) { v.push_back(parse(k, s)); };
    add(Kind::greeting, "Welcome to my {rplace}, {addr}.");
    add(Kind::greeting, "Hello, {addr}. I am {name}, the {title} of this town.");
    add(Kind::greeting, "Good day to you, {addr}. {work}");
    add(Kind::greeting, "Ah, a new face. Come in, {addr}, the {rplace} is warm today.");
    add(Kind::trade_offer, "I can sell you {a} {good} for {coins}.");
    add(Kind::trade_price, "{A} {good} costs {coins}.");
    add(Kind::trade_take, "That will be {coins}. Thank you, {addr}.");
    add(Kind::haggle, "Fine, {coins} it is. You drive a hard bargain.");
    add(Kind::haggle, "No, {coins} is too little. The price is {num}.");
    add(Kind::too_much, "Then come back when your purse is heavier, {addr}.");
    add(Kind::rumour, "They say {a} {creature} was seen near {place} {time}.");
    add(Kind::rumour, "A merchant told me the {creature} at {place} is growing bolder.");
    add(Kind::rumour, "Lights were seen at {place} {time}. Nobody knows why.");
    add(Kind::worried, "Keep away from {place} after dark, {addr}.");
    add(Kind::worried, "Only if you walk alone. Most folk are safe inside the walls.");
    add(Kind::quest_offer, "{A} {creature} has been troubling {place}. Drive it away and I will pay you {num} gold coins.");
    add(Kind::quest_offer, "I lost my {lost} near {place}. Bring it back and I will give you {num} gold coins.");
    add(Kind::quest_accept, "Thank you, {addr}. Come back to the {rplace} when it is done.");
    add(Kind::quest_decline, "It is all I have, {addr}. Think about it.");
    add(Kind::directions, "Go {dir} past {place}. You cannot miss it.");
    add(Kind::directions, "Follow the road {dir} for a mile, then turn at {place}.");
    add(Kind::directions, "It is behind {place}, a short walk {dir} of here.");
    add(Kind::business, "{work} Business is {goodslow} this season.");
    add(Kind::what_do, "I am the {title}. {work}");
    add(Kind::weather, "Aye, {weather} indeed. The {rplace} is busy on {weather} days.");
    add(Kind::farewell, "Farewell, {addr}. Safe travels.");
    add(Kind::farewell, "Come back to the {rplace} any time, {addr}.");
    add(Kind::farewell, "Go well, {addr}. Mind {place} at night.");
    add(Kind::farewell, "Goodbye, and may the road be kind to you.");
    return v;
  }();
  return t;
}

namespace {

const std::vector<Template> &player_templates() {
  static const std::vector<Template> t = [] {
    std::vector<Template> v;
    auto add = [&](Kind k, std::string_view s) { v.push_back(parse(k, s)); };
    for (const char *g : kGreet) add(Kind::greeting, with_name(g));
    for (const char *a : kTradeAsk) add(Kind::trade_offer, a);
    add(Kind::trade_price, "How much is {a} {good}?");
    add(Kind::trade_take, "I will take it.");
    add(Kind::haggle, "Would you take {coins}?");
    add(Kind::too_much, "That is too much for me.");
    for (const char *a : kRumourAsk) add(Kind::rumour, a);
    add(Kind::worried, "Should I be worried?");
    for (const char *a : kQuestAsk) add(Kind::quest_offer, a);
    add(Kind::quest_accept, "I will do it.");
    add(Kind::quest_decline, "{num} gold coins is not enough.");
    add(Kind::directions, "How do I get to {place}?");
    add(Kind::business, "How is business?");
    add(Kind::what_do, "What do you do here?");
    add(Kind::weather, "It is a {weather} day.");
    for (const char *b : kBye) add(Kind::farewell, with_name(b));
    return v;
  }();
  return t;
}

// The words a slot may take while matching: open sets, checked afterwards.
std::vector<std::string> slot_words(Slot s, const std::string &npc) {
  std::vector<std::string> w;
  auto all = [&](const auto &list) {
    for (const char *x : list) w.emplace_back(x);
  };
  switch (s) {
    case Slot::addr: all(kAddress); break;
    case Slot::name: all(kNames); w.push_back(npc); break;
    case Slot::title: for (const auto &r : roles()) w.emplace_back(r.title); break;
    case Slot::rplace: for (const auto &r : roles()) w.emplace_back(r.place); break;
    case Slot::work: for (const auto &r : roles()) all(r.work); break;
    case Slot::good: for (const auto &r : roles()) for (const auto &g : r.goods) w.emplace_back(g.name); break;
    case Slot::a: w = {"an", "a"}; break;
    case Slot::A: w = {"An", "A"}; break;
    case Slot::creature: all(kCreatures); break;
    case Slot::place: all(kPlaces); break;
    case Slot::time: all(kTimes); break;
    case Slot::lost: all(kLost); break;
    case Slot::dir: all(kDirections); break;
    case Slot::weather: all(kWeather); break;
    case Slot::goodslow: w = {"good", "slow"}; break;
    case Slot::coins: case Slot::num: break;
  }
  return w;
}

using Captures = std::vector<std::pair<Slot, std::string>>;

// Backtracking match of `text` from `pos` against parts[i..]; fills `caps`.
bool match(const std::vector<Part> &parts, std::size_t i, std::string_view text, std::size_t pos,
           const std::string &npc, Captures &caps) {
  if (i == parts.size()) return pos == text.size();
  const Part &p = parts[i];
  const std::string_view rest = text.substr(pos);
  if (!p.slot) return rest.starts_with(p.text) && match(parts, i + 1, text, pos + p.text.size(), npc, caps);
  auto attempt = [&](std::size_t len) {
    caps.emplace_back(p.s, std::string(rest.substr(0, len)));
    if (match(parts, i + 1, text, pos + len, npc, caps)) return true;
    caps.pop_back();
    return false;
  };
  if (p.s == Slot::num || p.s == Slot::coins) {
    std::size_t d = 0;
    while (d < rest.size() && d < 6 && std::isdigit(static_cast<unsigned char>(rest[d]))) ++d;
    if (d == 0) return false;
    if (p.s == Slot::num) return attempt(d);
    for (std::string_view unit : {" gold coins", " gold coin"}) {
      if (rest.substr(d).starts_with(unit) && attempt(d + unit.size())) return true;
    }
    return false;
  }
  for (const auto &w : slot_words(p.s, npc)) {
    if (rest.starts_with(w) && attempt(w.size())) return true;
  }
  return false;
}

int number_of(const std::string &s) { return std::atoi(s.c_str()); }

const Good *find_good(const Role &r, const std::string &name) {
  for (const auto &g : r.goods) {
    if (name == g.name) return &g;
  }
  return nullptr;
}

const char *article(const std::string &noun) {
  return std::string_view("aeiou").find(noun[0]) != std::string_view::npos ? "an" : "a";
}

struct Player {
  Kind kind;
  Captures caps;
};

std::optional<Player> parse_player(const std::string &line, const std::string &npc) {
  for (const auto &t : player_templates()) {
    Captures caps;
    if (match(t.parts, 0, line, 0, npc, caps)) return Player{t.kind, std::move(caps)};
  }
  return std::nullopt;
}

}  // namespace

std::optional<detail::npc::Kind> detail::npc::player_kind(const std::string &line, const std::string &npc) {
  const auto p = parse_player(line, npc);
  return p ? std::optional<Kind>(p->kind) : std::nullopt;
}

namespace {

std::string capture(const Captures &caps, Slot s) {
  for (const auto &[slot, v] : caps) {
    if (slot == s) return v;
  }
  return {};
}

// What the NPC has said so far in this dialogue that later replies must repeat.
struct Memory {
  std::map<std::string, int> prices;  // good -> quoted price
  std::optional<int> last_price;
  std::string rumour_place;
};

// The reasons a reply matched to template `t` with `caps` does not fit.
std::vector<std::string> constraints(const Role &role, const std::string &npc, const Player &pl, const Template &t,
                                     const Captures &caps, const Memory &mem) {
  std::vector<std::string> why;
  std::string good;
  std::string article_seen;
  std::vector<std::string> weathers;
  std::optional<int> coins;
  for (const auto &[s, v] : caps) {
    switch (s) {
      case Slot::name:
        if (v != npc) why.push_back(fmt::format("names itself {}, but the NPC is {}", v, npc));
        break;
      case Slot::title:
        if (v != role.title) why.push_back(fmt::format("claims to be the {}, but {} is the {}", v, npc, role.title));
        break;
      case Slot::rplace:
        if (v != role.place) why.push_back(fmt::format("speaks of the {}, but the {}'s place is the {}", v, role.title,
                                                       role.place));
        break;
      case Slot::work:
        if (std::find_if(role.work.begin(), role.work.end(), [&](const char *w) { return v == w; }) ==
            role.work.end()) {
          why.push_back(fmt::format("\"{}\" is not the {}'s work", v, role.title));
        }
        break;
      case Slot::good: good = v; break;
      case Slot::a: case Slot::A: article_seen = v; break;
      case Slot::weather: weathers.push_back(v); break;
      case Slot::coins: {
        const int n = number_of(v);
        if ((n == 1) != !v.ends_with("coins")) why.push_back(fmt::format("\"{}\" is not the corpus's plural", v));
        coins = n;
        break;
      }
      default: break;
    }
  }
  if (!good.empty()) {
    const Good *g = find_good(role, good);
    if (g == nullptr) {
      why.push_back(fmt::format("the {} does not sell {} {}", role.title, article(good), good));
    } else if (coins) {
      if (*coins < g->lo || *coins > g->hi) {
        why.push_back(fmt::format("price {} is outside the {}'s {} .. {}", *coins, good, g->lo, g->hi));
      }
      if (auto it = mem.prices.find(good); it != mem.prices.end() && it->second != *coins) {
        why.push_back(fmt::format("the {} was quoted at {} before, now {}", good, it->second, *coins));
      }
    }
    if (!article_seen.empty()) {
      std::string want = article(good);
      if (t.parts[0].slot && t.parts[0].s == Slot::A) want[0] = 'A';
      if (article_seen != want) why.push_back(fmt::format("\"{} {}\" has the wrong article", article_seen, good));
    }
    if (pl.kind == Kind::trade_price && capture(pl.caps, Slot::good) != good) {
      why.push_back(fmt::format("the player asked about the {}, not the {}", capture(pl.caps, Slot::good), good));
    }
  }
  if (t.kind == Kind::trade_take && coins && mem.last_price && *coins != *mem.last_price) {
    why.push_back(fmt::format("charges {} for what was quoted at {}", *coins, *mem.last_price));
  }
  if (t.kind == Kind::haggle) {
    const int offer = number_of(capture(pl.caps, Slot::coins));
    if (coins && *coins != offer) why.push_back(fmt::format("repeats the offer as {}, the player offered {}", *coins, offer));
    const bool accepts = t.parts[0].text.starts_with("Fine");
    if (mem.last_price) {
      const int price = *mem.last_price;
      // The corpus accepts an offer of at least three quarters of the price.
      if (accepts != (offer * 4 >= price * 3)) {
        why.push_back(fmt::format("{} an offer of {} for a price of {}", accepts ? "accepts" : "refuses", offer, price));
      }
      const std::string stated = capture(caps, Slot::num);
      if (!stated.empty() && number_of(stated) != price) {
        why.push_back(fmt::format("states the price as {}, it was quoted at {}", stated, price));
      }
    }
  }
  if (t.kind == Kind::worried) {
    const std::string p = capture(caps, Slot::place);
    if (!p.empty() && !mem.rumour_place.empty() && p != mem.rumour_place) {
      why.push_back(fmt::format("warns of {}, but the rumour was about {}", p, mem.rumour_place));
    }
  }
  if (t.kind == Kind::quest_offer) {
    const int r = number_of(capture(caps, Slot::num));
    if (r < 25 || r > 100 || r % 5 != 0) why.push_back(fmt::format("a reward of {} is not 25 .. 100 in fives", r));
  }
  if (t.kind == Kind::weather) {
    const std::string said = capture(pl.caps, Slot::weather);
    for (const auto &w : weathers) {
      if (w != said) why.push_back(fmt::format("answers \"{}\" to a {} day", w, said));
    }
  }
  return why;
}

void remember(const Template &t, const Captures &caps, Memory &mem) {
  const std::string good = capture(caps, Slot::good), coins = capture(caps, Slot::coins);
  if ((t.kind == Kind::trade_offer || t.kind == Kind::trade_price) && !good.empty() && !coins.empty()) {
    mem.prices.emplace(good, number_of(coins));
    mem.last_price = number_of(coins);
  }
  if (t.kind == Kind::rumour) mem.rumour_place = capture(caps, Slot::place);
}

ReplyVerdict judge(const Role &role, const std::string &npc, const std::string &player, const std::string &reply,
                   Memory &mem) {
  ReplyVerdict v;
  v.npc = npc;
  v.role = role.title;
  v.player = player;
  v.reply = reply;
  const auto pl = parse_player(player, npc);
  if (!pl) {
    v.judged = false;
    v.reasons.push_back("the player line is not one the corpus has; not judged");
    return v;
  }
  // The best reading: a template of the asked-for kind with the fewest
  // broken constraints; otherwise say what kind of line it was instead.
  std::optional<std::vector<std::string>> best;
  const Template *best_t = nullptr;
  Captures best_caps;
  std::vector<Kind> other_kinds;
  for (const auto &t : npc_templates()) {
    Captures caps;
    if (!match(t.parts, 0, reply, 0, npc, caps)) continue;
    if (t.kind != pl->kind) {
      other_kinds.push_back(t.kind);
      continue;
    }
    auto why = constraints(role, npc, *pl, t, caps, mem);
    if (!best || why.size() < best->size()) {
      best = std::move(why);
      best_t = &t;
      best_caps = std::move(caps);
    }
  }
  if (best) {
    v.reasons = std::move(*best);
    v.fits = v.reasons.empty();
    remember(*best_t, best_caps, mem);
  } else if (!other_kinds.empty()) {
    v.reasons.push_back(fmt::format("{} does not answer \"{}\" ({} does)", kind_name(other_kinds.front()), player,
                                    kind_name(pl->kind)));
  } else if (reply.empty()) {
    v.reasons.push_back("empty reply");
  } else {
    v.reasons.push_back("not a sentence of the corpus grammar");
  }
  return v;
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

[[noreturn]] void malformed(std::size_t line, const std::string &what) {
  detail::fail(Errc::corrupt, fmt::format("transcript line {}: {}", line, what));
}

}  // namespace

ReplyCheck check_npc_replies(std::string_view text) {
  ReplyCheck out;
  const Role *role = nullptr;  // null between dialogues
  std::string npc, player;
  bool awaiting_reply = false;
  Memory mem;
  std::size_t n = 0;
  while (!text.empty() || n == 0) {
    const auto nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++n;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    if (trim(raw).empty()) {
      role = nullptr;
      if (text.empty()) break;
      continue;
    }
    const std::string line(raw);
    if (role == nullptr) {
      const std::string tail = " of Eldermoor.";
      const auto is = line.find(" is the ");
      if (is == std::string::npos || !line.ends_with(tail) || is == 0) {
        malformed(n, fmt::format("expected a header such as \"Brenna is the blacksmith of Eldermoor.\", got \"{}\"",
                                 line));
      }
      const std::string title = line.substr(is + 8, line.size() - tail.size() - is - 8);
      const auto &rs = roles();
      const auto it = std::find_if(rs.begin(), rs.end(), [&](const Role &r) { return title == r.title; });
      if (it == rs.end()) malformed(n, fmt::format("unknown role \"{}\" in the header", title));
      role = &*it;
      npc = line.substr(0, is);
      mem = {};
      awaiting_reply = false;
      ++out.dialogues;
      continue;
    }
    const auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0 || line.substr(0, colon).find(' ') != std::string::npos) {
      malformed(n, fmt::format("expected \"Player: ...\" or \"{}: ...\", got \"{}\"", npc, line));
    }
    const std::string who = line.substr(0, colon), said = trim(std::string_view(line).substr(colon + 1));
    if (who == "Player") {
      player = said;
      awaiting_reply = true;
      continue;
    }
    if (!awaiting_reply) malformed(n, fmt::format("{} speaks with no player line to answer", who));
    awaiting_reply = false;
    ReplyVerdict v = judge(*role, npc, player, said, mem);
    v.line = n;
    if (who != npc) {
      v.fits = false;
      v.reasons.insert(v.reasons.begin(), fmt::format("spoken by {}, but the dialogue's NPC is {}", who, npc));
    }
    if (!v.judged) {
      ++out.unjudged;
    } else {
      ++out.replies;
      if (v.fits) ++out.fit;
    }
    out.verdicts.push_back(std::move(v));
  }
  return out;
}

ReplyCheck check_npc_replies_file(const std::string &path) {
  const auto bytes = detail::read_file(path, std::uint64_t{1} << 30);
  return check_npc_replies(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
}

}  // namespace weft
