// Cost of one sample over a 32000-token vocabulary (the tiny model's SPM
// tokenizer, generated into a temp file). Greedy: Sampler::sample() (the
// argmax fast path), Sampler::sample_chain() (candidate array + llama.cpp's
// chain), a plain std::max_element, and the per-token logit copy a step
// makes. At a temperature (top_k 40, top_p 0.95, 0.8): weft's Sampler beside
// llama.cpp's own sampler chain fed as llama.cpp's common sampler feeds it
// (a fresh candidate array per token). Then a JSON schema's grammar, the
// typical-p / XTC / DRY / Mirostat stages, banned strings, and a token's
// logprobs.
// Run with --benchmark_repetitions=5 --benchmark_report_aggregates_only=true.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "core/logprobs.hpp"
#include "core/sampling.hpp"
#include "llama.h"
#include "weft/executor.hpp"
#include "weft/make_model.hpp"
#include "weft/model.hpp"

namespace {

const weft::Model &model() {
  static const weft::Model m = [] {
    const auto path = std::filesystem::temp_directory_path() / "weft-bench-sampling-tiny.gguf";
    if (!std::filesystem::exists(path)) weft::make_model({.preset = weft::ModelPreset::tiny, .out = path.string()});
    return weft::Model::load({.path = path.string()});
  }();
  return m;
}

std::vector<std::vector<float>> logit_set() {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<std::vector<float>> out(16, std::vector<float>(static_cast<std::size_t>(model().n_vocab())));
  for (auto &v : out)
    for (auto &x : v) x = dist(rng);
  return out;
}

// Logits the model produced (16 random prompts): the chain's top_k and
// top_p cost depends on how the logits are spread, so the temperature pair
// is also timed on these.
std::vector<std::vector<float>> model_logit_set() {
  std::mt19937 rng(2);
  std::uniform_int_distribution<weft::Token> tok(3, model().n_vocab() - 1);
  weft::Executor ex(model(), {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 16, .n_threads = 2});
  std::vector<weft::Conversation> convs;
  for (int i = 0; i < 16; ++i) {
    std::vector<weft::Token> p{model().bos()};
    for (int k = 0; k < 12; ++k) p.push_back(tok(rng));
    convs.push_back(ex.create());
    convs.back().prompt(p);
  }
  while (!ex.step().idle) {
  }
  std::vector<std::vector<float>> out;
  for (auto &c : convs) out.push_back(c.logits());
  return out;
}

void BM_SampleGreedyFast(benchmark::State &state) {
  weft::detail::Sampler s(model(), {});
  const auto set = logit_set();
  std::size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(set[i++ % set.size()]));
}

void BM_SampleGreedyChain(benchmark::State &state) {
  weft::detail::Sampler s(model(), {});
  const auto set = logit_set();
  std::size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s.sample_chain(set[i++ % set.size()]));
}

void BM_MaxElement(benchmark::State &state) {
  const auto set = logit_set();
  std::size_t i = 0;
  for (auto _ : state) {
    const auto &v = set[i++ % set.size()];
    benchmark::DoNotOptimize(std::max_element(v.begin(), v.end()) - v.begin());
  }
}

void BM_LogitCopy(benchmark::State &state) {
  const auto set = logit_set();
  std::vector<float> dst;
  std::size_t i = 0;
  for (auto _ : state) {
    const auto &v = set[i++ % set.size()];
    dst.assign(v.begin(), v.end());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
}

constexpr float kTemp = 0.8f, kTopP = 0.95f;
constexpr int kTopK = 40;

void BM_SampleTemperatureWeft(benchmark::State &state) {
  weft::detail::Sampler s(model(), {.temperature = kTemp, .top_k = kTopK, .top_p = kTopP, .seed = 1});
  const auto set = state.range(0) == 0 ? logit_set() : model_logit_set();
  std::size_t i = 0;
  for (auto _ : state) {
    const auto t = s.sample(set[i++ % set.size()]);
    s.accept(t);
    benchmark::DoNotOptimize(t);
  }
}

void BM_SampleTemperatureLlamaChain(benchmark::State &state) {
  llama_sampler *chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(chain, llama_sampler_init_top_k(kTopK));
  llama_sampler_chain_add(chain, llama_sampler_init_top_p(kTopP, 1));
  llama_sampler_chain_add(chain, llama_sampler_init_temp(kTemp));
  llama_sampler_chain_add(chain, llama_sampler_init_dist(1));
  const auto set = state.range(0) == 0 ? logit_set() : model_logit_set();
  std::vector<llama_token_data> cur(set.front().size());
  std::size_t i = 0;
  for (auto _ : state) {
    const auto &lg = set[i++ % set.size()];
    for (std::size_t t = 0; t < lg.size(); ++t) cur[t] = {static_cast<llama_token>(t), lg[t], 0.0f};
    llama_token_data_array arr{cur.data(), cur.size(), -1, false};
    llama_sampler_apply(chain, &arr);
    const llama_token tok = arr.data[arr.selected].id;
    llama_sampler_accept(chain, tok);
    benchmark::DoNotOptimize(tok);
  }
  llama_sampler_free(chain);
}

// Constrained sampling: a JSON schema's grammar over the vocabulary, per
// token (sample + accept), at the temperature above (arg 0), greedy (1), or
// or at the temperature through the full mask on every token (2:
// sample_chain; a rejected pick cost that before the masked draw checked the
// best tokens first);
// the sampler starts over whenever the grammar is complete (not timed).
void BM_SampleJsonSchema(benchmark::State &state) {
  weft::SamplerParams p{.temperature = kTemp, .top_k = kTopK, .top_p = kTopP, .seed = 1,
                        .json_schema = R"({"type": "object", "properties": {"item": {"enum": ["sword", "shield"]},
                          "count": {"type": "integer"}, "note": {"type": "string", "maxLength": 40}},
                          "required": ["item", "count", "note"]})"};
  if (state.range(0) == 1) p.temperature = 0.0f;
  const bool full = state.range(0) == 2;
  auto s = std::make_unique<weft::detail::Sampler>(model(), p);
  const auto set = model_logit_set();
  std::size_t i = 0;
  for (auto _ : state) {
    weft::Token t = -1;
    try {
      const auto &l = set[i++ % set.size()];
      t = full ? s->sample_chain(l) : s->sample(l);
      s->accept(t);
    } catch (const weft::Error &) {
      t = -1;  // only an end token was left: the object is complete
    }
    if (t < 0 || model().is_eog(t)) {
      state.PauseTiming();
      s = std::make_unique<weft::detail::Sampler>(model(), p);
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(t);
  }
}

// typical_p, XTC, DRY and Mirostat 2.0 each added to the temperature chain
// above (0 = none of them, the baseline); then banned strings that seldom
// bite (5: the pick's text checked) and one that bites most picks (6: "e",
// so the vocabulary is masked and the draw made again).
void BM_SampleStages(benchmark::State &state) {
  weft::SamplerParams p{.temperature = kTemp, .top_k = kTopK, .top_p = kTopP, .seed = 1};
  switch (state.range(0)) {
    case 1: p.typical_p = 0.9f; break;
    case 2: p.xtc_probability = 0.5f; break;
    case 3: p.dry_multiplier = 0.8f; break;
    case 4: p.mirostat = 2; break;
    case 5: p.banned_strings = {"As an AI", "language model", "The dragon", "qzx"}; break;
    case 6: p.banned_strings = {"e"}; break;
    default: break;
  }
  weft::detail::Sampler s(model(), p, 1024);
  const auto set = model_logit_set();
  std::size_t i = 0;
  for (auto _ : state) {
    const auto t = s.sample(set[i++ % set.size()]);
    s.accept(t);
    benchmark::DoNotOptimize(t);
  }
}

// GenerateParams::logprobs: one token's log-softmax and the top n.
void BM_Logprob(benchmark::State &state) {
  const auto set = model_logit_set();
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        weft::detail::token_logprob(set[i++ % set.size()], 7, static_cast<std::uint32_t>(state.range(0))));
  }
}

}  // namespace

BENCHMARK(BM_SampleGreedyFast);
BENCHMARK(BM_SampleGreedyChain);
BENCHMARK(BM_MaxElement);
BENCHMARK(BM_LogitCopy);
// Arg 0: normal(0, 3) logits; 1: the model's own.
BENCHMARK(BM_SampleTemperatureWeft)->Arg(0)->Arg(1);
BENCHMARK(BM_SampleTemperatureLlamaChain)->Arg(0)->Arg(1);
BENCHMARK(BM_SampleJsonSchema)->DenseRange(0, 2);
BENCHMARK(BM_SampleStages)->DenseRange(0, 6);
BENCHMARK(BM_Logprob)->Arg(0)->Arg(5)->Arg(20);
BENCHMARK_MAIN();
