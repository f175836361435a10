// The npc corpus's roles (npc_grammar.hpp).
#include "modelgen/npc_grammar.hpp"

namespace weft::detail::npc {

const std::vector<Role> &roles() {
  static const std::vector<Role> r = {
      {"blacksmith", "forge",
       {{"iron sword", 20, 60}, {"steel axe", 15, 45}, {"horseshoe", 2, 6}, {"shield", 18, 50}, {"dagger", 6, 20},
        {"helmet", 12, 35}},
       {"I mend armour for the guards.", "I have been at the anvil since dawn.", "The fire must stay hot all day."}},
      {"innkeeper", "inn",
       {{"room for the night", 3, 9}, {"bowl of stew", 1, 4}, {"mug of ale", 1, 3}, {"loaf of bread", 1, 3},
        {"hot bath", 2, 5}},
       {"Travellers come in from the forest road every night.", "The rooms upstairs are clean and warm.",
        "I hear every story told at my tables."}},
      {"merchant", "stall",
       {{"silk scarf", 5, 15}, {"lantern", 4, 12}, {"rope", 2, 6}, {"map of the valley", 8, 25}, {"compass", 10, 30},
        {"wool cloak", 6, 18}},
       {"I buy cheap in the city and sell fair here.", "My cart came over the bridge this morning.",
        "Trade has been slow since the rains."}},
      {"healer", "house of healing",
       {{"healing salve", 4, 12}, {"bandage", 1, 3}, {"fever draught", 6, 16}, {"sleeping tea", 2, 7}},
       {"I tend the sick and the wounded.", "Herbs from the forest heal most wounds.",
        "Rest is the best medicine, but few listen."}},
      {"town guard", "gate",
       {{"pass for the gate", 2, 5}, {"spare spear", 10, 25}, {"torch", 1, 2}},
       {"I keep watch at the gate from dusk to dawn.", "No one enters the town without a name.",
        "The captain wants the walls watched day and night."}},
      {"baker", "bakery",
       {{"loaf of bread", 1, 3}, {"honey cake", 2, 6}, {"meat pie", 3, 7}, {"sweet roll", 1, 4}},
       {"I light the ovens before the sun is up.", "The whole street smells of my bread.",
        "Flour comes from the mill by the river."}},
      {"hunter", "lodge",
       {{"deer hide", 5, 14}, {"bow", 15, 40}, {"bundle of arrows", 3, 9}, {"smoked meat", 2, 6}},
       {"I know every path in the old forest.", "The deer move to the hills in winter.",
        "I follow tracks that others cannot see."}},
      {"alchemist", "workshop",
       {{"potion of strength", 12, 40}, {"fire oil", 8, 22}, {"vial of light", 6, 18}, {"antidote", 7, 20}},
       {"I mix potions from roots and stones.", "Careful, some of these bottles bite.",
        "The tower once held the greatest alchemists."}},
      {"farmer", "farm",
       {{"sack of grain", 2, 6}, {"basket of apples", 1, 4}, {"wheel of cheese", 3, 9}, {"dozen eggs", 1, 3}},
       {"The harvest was good this year.", "Crows eat half my seed if I let them.",
        "I sell at the market every morning."}},
      {"bard", "corner of the square",
       {{"song", 1, 5}, {"ballad of the old king", 3, 8}, {"lute string", 1, 3}},
       {"I sing of heroes and lost kings.", "Every tale grows a little in the telling.",
        "A song costs less than a story, and lasts longer."}},
      {"fisher", "dock",
       {{"fresh trout", 2, 5}, {"net", 6, 15}, {"barrel of eels", 5, 12}, {"fishing rod", 4, 10}},
       {"The river gives, and the river takes.", "I cast my nets before sunrise.",
        "The fish bite best when it rains."}},
      {"scholar", "library",
       {{"old book", 10, 35}, {"scroll", 4, 12}, {"lesson in reading", 2, 6}, {"star chart", 12, 30}},
       {"I study the runes on the ruined tower.", "These books are older than the town.",
        "Knowledge is the only treasure that grows when shared."}},
  };
  return r;
}

}  // namespace weft::detail::npc
