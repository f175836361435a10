// The test models' fixture: `weft_make_test_model <out.gguf> <seed> [preset]`
// writes the tiny preset (or the one named) through the library. Its own small program so that a build that
// needs only the models (the TSan preset) does not compile the whole CLI;
// cli_make_model_matches_library checks that `weft make-model` writes the same bytes.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "weft/make_model.hpp"

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s <out.gguf> <seed> [preset]\n", argv[0]);
    return 2;
  }
  try {
    weft::MakeModelParams p;
    p.preset = argc == 4 ? weft::parse_preset(argv[3]) : weft::ModelPreset::tiny;
    p.seed = std::strtoull(argv[2], nullptr, 10);
    p.out = argv[1];
    weft::make_model(p);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "weft_make_test_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
