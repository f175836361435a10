// Loads a model through an installed weft and prints its token count for a
// fixed text; the test compares with the in-tree build.
#include <weft/weft.hpp>

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  try {
    auto model = weft::Model::load({.path = argv[1]});
    std::printf("weft %s tokens=%zu\n", weft::version(), model.tokenize("Hello, blacksmith!").size());
  } catch (const weft::Error &e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
