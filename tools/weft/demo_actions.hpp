// weft demo --actions: a merchant who sells through tool calls (weft/tools.hpp).
#pragma once

#include <string>

#include "weft/model.hpp"

namespace weft_cli {

struct ActionsDemoOptions {
  unsigned max_tokens = 40;  // per spoken reply
  unsigned seed = 1;
  float temperature = 0.8f;
  int threads = 0;
  std::string transcripts;   // also written here when set
};

// Plays the scene on `model` and prints its transcript: each player line is
// answered by a call the game applies to the merchant's inventory, the
// result goes back in, and the merchant speaks. Ends with how many lines
// were answered by a well-formed call.
void run_actions_demo(const weft::Model &model, const ActionsDemoOptions &o);

}  // namespace weft_cli
