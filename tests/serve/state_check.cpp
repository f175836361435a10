// The exact check behind the cluster tests: each conversation state a node
// wrote (or serves) holds the logits a fresh decode of its own history
// gives. Loads every STATE_FILE into an executor, decodes the same tokens
// alone on raw llama.cpp (the tests' reference path), and prints one JSON
// line per file: {"file", "tokens", "nmse", "tolerance"} — the tolerance
// being the tests' usual one (8x llama.cpp's measured batch-shape floor).
//
//   state_check MODEL STATE_FILE...
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "reference.hpp"

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: state_check MODEL STATE_FILE...\n");
    return 2;
  }
  try {
    const auto model = weft::Model::load({.path = argv[1]});
    const double tol = weft_test::logits_tolerance(model);
    weft::ExecutorParams ep;
    ep.n_ctx = 4096;
    ep.n_seq_max = 1;
    ep.n_threads = 1;
    for (int i = 2; i < argc; ++i) {
      std::ifstream in(argv[i], std::ios::binary);
      const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
      weft::Executor ex(model, ep);
      auto conv = ex.load(bytes);
      weft_test::run_until_idle(ex);  // a tokens-only or refused KV load decodes here
      const auto tokens = conv.tokens();
      const double e = weft_test::nmse(conv.logits(), weft_test::reference_logits(model, tokens, 64, 4096));
      std::printf("%s\n", nlohmann::json{{"file", argv[i]}, {"tokens", tokens.size()}, {"nmse", e}, {"tolerance", tol}}
                              .dump()
                              .c_str());
    }
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "state_check: %s\n", e.what());
    return 1;
  }
}
