// The sampler's chain and weft's own XTC and Mirostat 2.0 stages.
#include "core/sampling_stages.hpp"

#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/internal.hpp"

namespace weft::detail {

std::uint64_t next_u64(std::uint64_t &s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double next_unit(std::uint64_t &s) { return static_cast<double>(next_u64(s) >> 11) * 0x1.0p-53; }

ChainPlan plan_chain(const SamplerParams &p, std::int32_t dry_n) {
  ChainPlan plan;
  plan.greedy = p.temperature == 0.0f;
  plan.dry = p.dry_multiplier > 0.0f && dry_n > 0;
  plan.mirostat = !plan.greedy && p.mirostat == 2;
  plan.xtc = !plan.greedy && !plan.mirostat && p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f;
  return plan;
}

llama_sampler *checked(llama_sampler *s, const char *what) {
  if (s == nullptr) fail(Errc::backend, fmt::format("llama.cpp could not create the {} sampler", what));
  return s;
}

llama_sampler *build_chain(const llama_vocab *vocab, std::int32_t n_vocab, const SamplerParams &p, const ChainPlan &plan,
                           std::int32_t last_n, std::int32_t dry_n, llama_sampler **temp) {
  llama_sampler *chain = checked(llama_sampler_chain_init(llama_sampler_chain_default_params()), "chain");
  try {
    auto add = [&](llama_sampler *s, const char *what) { llama_sampler_chain_add(chain, checked(s, what)); };
    // Index 0, always present (an empty stage when off), so accept_prompt() can reach it.
    add(llama_sampler_init_penalties(n_vocab, last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty),
        "penalties");
    if (plan.dry) {
      std::vector<const char *> breakers;
      for (const auto &b : p.dry_sequence_breakers) breakers.push_back(b.c_str());
      add(llama_sampler_init_dry(vocab, p.dry_multiplier, p.dry_base, p.dry_allowed_length, dry_n, breakers.data(),
                                 breakers.size()),
          "dry");
    }
    if (plan.greedy) {
      add(llama_sampler_init_greedy(), "greedy");
      return chain;
    }
    if (!plan.mirostat) {
      if (p.top_k > 0) add(llama_sampler_init_top_k(p.top_k), "top_k");
      if (p.typical_p < 1.0f) add(llama_sampler_init_typical(p.typical_p, 1), "typical");
      if (p.top_p < 1.0f) add(llama_sampler_init_top_p(p.top_p, 1), "top_p");
      if (p.min_p > 0.0f) add(llama_sampler_init_min_p(p.min_p, 1), "min_p");
    }
    if (plan.xtc) {
      *temp = checked(llama_sampler_init_temp(p.temperature), "temp");
    } else {
      add(llama_sampler_init_temp(p.temperature), "temp");
    }
  } catch (...) {
    llama_sampler_free(chain);
    throw;
  }
  return chain;
}

namespace {

// By logit, ties by id: the same order wherever it runs.
void sort_candidates(llama_token_data_array &arr) {
  std::sort(arr.data, arr.data + arr.size, [](const llama_token_data &a, const llama_token_data &b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
  arr.sorted = true;
}

// p = softmax of the logits (sorted: the first is the largest).
void softmax_sorted(llama_token_data_array &arr) {
  const float top = arr.data[0].logit;
  double total = 0;
  for (std::size_t i = 0; i < arr.size; ++i) {
    const double e = arr.data[i].logit > -INFINITY ? std::exp(static_cast<double>(arr.data[i].logit - top)) : 0.0;
    arr.data[i].p = static_cast<float>(e);
    total += e;
  }
  for (std::size_t i = 0; i < arr.size; ++i) arr.data[i].p = static_cast<float>(arr.data[i].p / total);
}

}  // namespace

void apply_xtc(llama_token_data_array &arr, float probability, float threshold, std::uint64_t &rng) {
  const double chance = next_unit(rng);
  if (arr.size < 2 || chance >= probability) return;
  sort_candidates(arr);
  softmax_sorted(arr);
  std::size_t last = 0;  // the least likely token at or above the threshold
  for (std::size_t i = 0; i < arr.size && arr.data[i].p >= threshold; ++i) last = i;
  if (last == 0) return;  // fewer than two reach it: nothing to exclude
  arr.data += last;
  arr.size -= last;
}

std::size_t mirostat_select(llama_token_data_array &arr, float tau, float eta, float &mu, std::uint64_t &rng) {
  // The kept few are moved to the front and sorted, not the whole vocabulary.
  llama_token_data *best = std::max_element(arr.data, arr.data + arr.size, [](const auto &a, const auto &b) {
    return a.logit < b.logit || (a.logit == b.logit && a.id > b.id);
  });
  std::swap(arr.data[0], *best);
  const double top = arr.data[0].logit;
  double total = 0;
  for (std::size_t i = 0; i < arr.size; ++i) {
    total += arr.data[i].logit > -INFINITY ? std::exp(static_cast<double>(arr.data[i].logit) - top) : 0.0;
  }
  // Surprise -log2(p) <= mu: p >= 2^-mu, that is logit >= top + ln(total * 2^-mu).
  const double floor = top + std::log(total) - static_cast<double>(mu) * std::log(2.0);
  const auto mid = std::partition(arr.data + 1, arr.data + arr.size,
                                  [&](const llama_token_data &c) { return static_cast<double>(c.logit) >= floor; });
  arr.size = static_cast<std::size_t>(mid - arr.data);
  sort_candidates(arr);
  softmax_sorted(arr);
  const double u = next_unit(rng);
  double acc = 0;
  std::size_t pick = 0;
  for (std::size_t i = 0; i < arr.size; ++i) {
    if (!(arr.data[i].logit > -INFINITY)) continue;
    acc += arr.data[i].p;
    pick = i;
    if (u < acc) break;
  }
  const float surprise = -std::log2(arr.data[pick].p);
  mu -= eta * (surprise - tau);
  return pick;
}

}  // namespace weft::detail
