// weft::make_npc_corpus: seeded procedural NPC dialogue for the `npc` preset.
//
// Every dialogue is drawn from a small grammar: a header naming the NPC and
// their trade, a greeting, one to three topics (trade, rumour, quest,
// directions, small talk) and a farewell. The slots (names, roles, goods,
// prices, places, creatures, times) vary independently, so a model has to
// learn the structure — copy the NPC's name into every reply, repeat the
// quoted price, keep to the role's goods — rather than memorise lines.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/internal.hpp"
#include "modelgen/npc_grammar.hpp"
#include "modelgen/splitmix.hpp"
#include "weft/train.hpp"

namespace weft {
namespace {

using namespace detail::npc;

struct CorpusRng : detail::SplitMix64 {
  // Uniform in [0, n); n > 0. Bias is negligible for the tiny n used here.
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  int range(int lo, int hi) { return lo + static_cast<int>(below(static_cast<std::size_t>(hi - lo + 1))); }
  bool chance(int percent) { return below(100) < static_cast<std::size_t>(percent); }
  template <typename T>
  const T &pick(std::span<const T> v) {
    return v[below(v.size())];
  }
  template <typename T, std::size_t N>
  const T &pick(const std::array<T, N> &v) {
    return v[below(N)];
  }
};

using Words = std::span<const char *const>;

// "1 gold coin", "7 gold coins".
std::string coins(int n) { return fmt::format("{} gold coin{}", n, n == 1 ? "" : "s"); }

std::string cap(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

const char *article(const char *noun) {
  switch (noun[0]) {
    case 'a': case 'e': case 'i': case 'o': case 'u': return "an";
    default: return "a";
  }
}

class Writer {
 public:
  Writer(CorpusRng &rng, std::string &out) : rng_(rng), out_(out) {}

  void dialogue() {
    name_ = rng_.pick(kNames);
    role_ = &roles()[rng_.below(roles().size())];
    addr_ = rng_.pick(kAddress);
    prices_.assign(role_->goods.size(), 0);
    out_ += npc_header(name_, role_->title);
    greeting();
    const int topics = rng_.range(1, 3);
    for (int i = 0; i < topics; ++i) topic();
    farewell();
    out_ += '\n';
  }

 private:
  void player(const std::string &line) { out_ += "Player: " + line + "\n"; }
  void npc(const std::string &line) { out_ += std::string(name_) + ": " + line + "\n"; }

  void greeting() {
    player(fmt::format(fmt::runtime(rng_.pick(kGreet)), name_));
    switch (rng_.below(4)) {
      case 0: npc(fmt::format("Welcome to my {}, {}.", role_->place, addr_)); break;
      case 1: npc(fmt::format("Hello, {}. I am {}, the {} of this town.", addr_, name_, role_->title)); break;
      case 2: npc(fmt::format("Good day to you, {}. {}", addr_, rng_.pick(std::span<const char *const>(role_->work))));
        break;
      default: npc(fmt::format("Ah, a new face. Come in, {}, the {} is warm today.", addr_, role_->place)); break;
    }
  }

  void topic() {
    switch (rng_.below(6)) {
      case 0: case 1: trade(); break;
      case 2: rumour(); break;
      case 3: quest(); break;
      case 4: directions(); break;
      default: small_talk(); break;
    }
  }

  void trade() {
    const std::size_t gi = rng_.below(role_->goods.size());
    const Good &g = role_->goods[gi];
    // A good keeps its price for the whole dialogue.
    if (prices_[gi] == 0) prices_[gi] = rng_.range(g.lo, g.hi);
    const int price = prices_[gi];
    if (rng_.chance(60)) {
      player(rng_.pick(kTradeAsk));
      npc(fmt::format("I can sell you {} {} for {}.", article(g.name), g.name, coins(price)));
    } else {
      player(fmt::format("How much is {} {}?", article(g.name), g.name));
      npc(fmt::format("{} {} costs {}.", cap(article(g.name)), g.name, coins(price)));
    }
    switch (rng_.below(3)) {
      case 0:
        player("I will take it.");
        npc(fmt::format("That will be {}. Thank you, {}.", coins(price), addr_));
        break;
      case 1: {
        const int offer = price > 2 ? price - rng_.range(1, price / 2) : 1;
        player(fmt::format("Would you take {}?", coins(offer)));
        if (offer * 4 >= price * 3) {
          npc(fmt::format("Fine, {} it is. You drive a hard bargain.", coins(offer)));
        } else {
          npc(fmt::format("No, {} is too little. The price is {}.", coins(offer), price));
        }
        break;
      }
      default:
        player("That is too much for me.");
        npc(fmt::format("Then come back when your purse is heavier, {}.", addr_));
        break;
    }
  }

  void rumour() {
    player(rng_.pick(kRumourAsk));
    const char *c = rng_.pick(kCreatures);
    const char *p = rng_.pick(kPlaces);
    const char *t = rng_.pick(kTimes);
    switch (rng_.below(3)) {
      case 0: npc(fmt::format("They say {} {} was seen near {} {}.", article(c), c, p, t)); break;
      case 1: npc(fmt::format("A merchant told me the {} at {} is growing bolder.", c, p)); break;
      default: npc(fmt::format("Lights were seen at {} {}. Nobody knows why.", p, t)); break;
    }
    if (rng_.chance(50)) {
      player("Should I be worried?");
      npc(rng_.chance(50) ? fmt::format("Keep away from {} after dark, {}.", p, addr_)
                          : std::string("Only if you walk alone. Most folk are safe inside the walls."));
    }
  }

  void quest() {
    player(rng_.chance(50) ? kQuestAsk[0] : kQuestAsk[1]);
    const int reward = rng_.range(5, 20) * 5;
    if (rng_.chance(50)) {
      const char *c = rng_.pick(kCreatures);
      const char *p = rng_.pick(kPlaces);
      npc(fmt::format("{} {} has been troubling {}. Drive it away and I will pay you {} gold coins.",
                      cap(article(c)), c, p, reward));
    } else {
      const char *l = rng_.pick(kLost);
      const char *p = rng_.pick(kPlaces);
      npc(fmt::format("I lost my {} near {}. Bring it back and I will give you {} gold coins.", l, p, reward));
    }
    if (rng_.chance(70)) {
      player("I will do it.");
      npc(fmt::format("Thank you, {}. Come back to the {} when it is done.", addr_, role_->place));
    } else {
      player(fmt::format("{} gold coins is not enough.", reward));
      npc(fmt::format("It is all I have, {}. Think about it.", addr_));
    }
  }

  void directions() {
    const char *p = rng_.pick(kPlaces);
    const char *q = rng_.pick(kPlaces);
    player(fmt::format("How do I get to {}?", p));
    switch (rng_.below(3)) {
      case 0: npc(fmt::format("Go {} past {}. You cannot miss it.", rng_.pick(kDirections), q)); break;
      case 1: npc(fmt::format("Follow the road {} for a mile, then turn at {}.", rng_.pick(kDirections), q)); break;
      default: npc(fmt::format("It is behind {}, a short walk {} of here.", q, rng_.pick(kDirections))); break;
    }
  }

  void small_talk() {
    const char *w = rng_.pick(kWeather);
    switch (rng_.below(3)) {
      case 0:
        player("How is business?");
        npc(fmt::format("{} Business is {} this season.", rng_.pick(std::span<const char *const>(role_->work)),
                        rng_.chance(50) ? "good" : "slow"));
        break;
      case 1:
        player("What do you do here?");
        npc(fmt::format("I am the {}. {}", role_->title, rng_.pick(std::span<const char *const>(role_->work))));
        break;
      default:
        player(fmt::format("It is a {} day.", w));
        npc(fmt::format("Aye, {} indeed. The {} is busy on {} days.", w, role_->place, w));
        break;
    }
  }

  void farewell() {
    player(fmt::format(fmt::runtime(rng_.pick(kBye)), name_));
    switch (rng_.below(4)) {
      case 0: npc(fmt::format("Farewell, {}. Safe travels.", addr_)); break;
      case 1: npc(fmt::format("Come back to the {} any time, {}.", role_->place, addr_)); break;
      case 2: npc(fmt::format("Go well, {}. Mind {} at night.", addr_, rng_.pick(kPlaces))); break;
      default: npc("Goodbye, and may the road be kind to you."); break;
    }
  }

  CorpusRng &rng_;
  std::string &out_;
  const char *name_ = "";
  const Role *role_ = nullptr;
  const char *addr_ = "";
  std::vector<int> prices_;
};

}  // namespace

std::vector<std::string> make_npc_dialogues(const CorpusParams &params) {
  if (params.target_bytes == 0 || params.target_bytes > (std::size_t{1} << 30)) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("CorpusParams.target_bytes = {} (expected 1 .. 1073741824)", params.target_bytes));
  }
  CorpusRng rng{{params.seed ^ 0x6e70632d636f7270ull}};
  std::vector<std::string> out;
  std::size_t total = 0;
  while (total < params.target_bytes) {
    std::string d;
    Writer(rng, d).dialogue();
    total += d.size();
    out.push_back(std::move(d));
  }
  return out;
}

std::string npc_header(const std::string &name, const std::string &role) {
  return fmt::format("{} is the {} of Eldermoor.\n", name, role);
}

std::string make_npc_corpus(const CorpusParams &params) {
  std::string all;
  for (const auto &d : make_npc_dialogues(params)) all += d;
  return all;
}

}  // namespace weft
