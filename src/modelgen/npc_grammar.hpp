// The npc corpus's grammar data: roles with their goods, prices and work
// lines, and the word lists the sentence shapes draw from. Internal, shared
// by the corpus writer (corpus.cpp), the reply checker (reply_check.cpp) and
// the fitted vocabulary (npc_vocab.cpp), so all three agree by construction.
#pragma once

#include <array>
#include <vector>

namespace weft::detail::npc {

struct Good {
  const char *name;
  int lo, hi;  // price range in coins
};

struct Role {
  const char *title;  // "blacksmith"
  const char *place;  // "forge"
  std::vector<Good> goods;
  std::vector<const char *> work;  // "I mend armour for the guards."
};

// The 12 roles, in the order the corpus draws them. Immutable; thread-safe.
const std::vector<Role> &roles();

inline constexpr std::array<const char *, 64> kNames = {
    "Brenna", "Oswin",  "Mara",   "Tobias", "Elda",   "Finn",    "Hilde",  "Corvin", "Ysolde", "Garrick", "Nell",
    "Alaric", "Rowan",  "Sela",   "Bram",   "Ivy",    "Cedric",  "Wren",   "Tamsin", "Hugo",   "Orla",    "Desmond",
    "Lark",   "Magnus", "Petra",  "Quinn",  "Rhea",   "Silas",   "Tilda",  "Ulric",  "Vera",   "Wendel",  "Ada",
    "Bertram", "Cora",  "Dunstan", "Edith", "Fergus", "Greta",   "Harold", "Ingrid", "Jasper", "Kira",    "Leofric",
    "Maude",  "Nils",   "Odette", "Piers",  "Rosalind", "Sten",  "Thea",   "Ulla",   "Viktor", "Wilma",   "Yorick",
    "Zelda",  "Anselm", "Bryn",   "Clement", "Dagny", "Esme",    "Godric", "Helga",  "Ivo"};

inline constexpr std::array<const char *, 16> kPlaces = {
    "the old mill",    "the ruined tower", "the forest road",  "the river bridge", "the market square",
    "the north gate",  "the chapel",      "the stone quarry", "the graveyard",    "the miller's pond",
    "the east fields", "the king's well", "the broken wall",  "the hill fort",    "the crossroads",
    "the deep woods"};

inline constexpr std::array<const char *, 12> kCreatures = {"wolf",   "bear",  "goblin", "giant spider", "troll", "wild boar",
                                                     "ghost",  "bandit", "witch", "serpent",      "ogre",  "pack of rats"};

inline constexpr std::array<const char *, 8> kTimes = {"last night", "this morning", "two days ago", "at dusk",
                                                 "yesterday",  "at midnight",  "before dawn",  "three nights ago"};

inline constexpr std::array<const char *, 10> kLost = {"ring",  "dog",     "brother", "letter", "goat",
                                                "sword", "daughter", "horse",  "key",    "necklace"};

inline constexpr std::array<const char *, 6> kWeather = {"cold", "wet", "warm", "windy", "quiet", "grey"};

inline constexpr std::array<const char *, 5> kAddress = {"traveller", "stranger", "friend", "young one", "adventurer"};

// Player lines that open a trade, a rumour, a quest, and that close a dialogue.
inline constexpr std::array<const char *, 5> kGreet = {"Good morning, {}.", "Hello, {}.", "Good evening, {}.",
                                                       "Greetings, {}.", "Well met, {}."};
inline constexpr std::array<const char *, 4> kTradeAsk = {"What do you have for sale?", "What are you selling today?",
                                                          "Show me your wares.", "Do you have anything for me?"};
inline constexpr std::array<const char *, 3> kRumourAsk = {"Have you heard any news?", "What is the talk of the town?",
                                                           "Anything strange happening lately?"};
inline constexpr std::array<const char *, 2> kQuestAsk = {"Is there any work for me?", "Can I help you with anything?"};
inline constexpr std::array<const char *, 4> kBye = {"Goodbye, {}.", "Farewell, {}.", "I must go now, {}.",
                                                     "Thank you, {}. Goodbye."};
inline constexpr std::array<const char *, 4> kDirections = {"north", "south", "east", "west"};

}  // namespace weft::detail::npc
