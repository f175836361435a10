// Sampler: a llama.cpp sampler chain over caller-held logits, with weft's
// own fast paths for greedy and top-k.
#include "core/sampling.hpp"

#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/internal.hpp"
#include "core/logit_bias.hpp"
#include "core/logit_scan.hpp"
#include "core/top_k.hpp"
#include "core/model_impl.hpp"
#include "weft/json_schema.hpp"

namespace weft::detail {
namespace {

// llama.cpp throws C++ exceptions from inside its C API (bad_alloc, grammar
// stack errors); they become typed errors here.
template <class Fn>
void guarded(const char *what, Fn &&fn) {
  try {
    fn();
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    fail(Errc::backend, fmt::format("llama.cpp failed in {}: {}", what, e.what()));
  }
}

}  // namespace

void Sampler::Free::operator()(llama_sampler *s) const noexcept { llama_sampler_free(s); }

Sampler::Sampler(const Model &model, const SamplerParams &params, std::int32_t n_ctx) : model_(model), params_(params) {
  validate(params_);
  ensure_backend();
  const Model::Impl &m = *model_.impl();
  check_logit_bias_vocab(params_.logit_bias, m.n_vocab);

  if (!params_.grammar.empty() || !params_.json_schema.empty()) {
    const bool from_schema = !params_.json_schema.empty();
    std::string schema_grammar;
    if (from_schema) {
      try {
        schema_grammar = json_schema_to_grammar(params_.json_schema);
      } catch (const Error &e) {
        fail(e.code(), fmt::format("SamplerParams.json_schema: {}", e.what()));
      }
    }
    const std::string &text = from_schema ? schema_grammar : params_.grammar;
    const char *root = from_schema ? "root" : params_.grammar_root.c_str();
    take_llama_error();
    llama_sampler *g = nullptr;
    guarded("grammar parsing", [&] { g = llama_sampler_init_grammar(m.vocab, text.c_str(), root); });
    if (g == nullptr) {
      // llama.cpp prints the parser's detail to stderr itself; its log carries the summary.
      const std::string why = take_llama_error();
      fail(Errc::invalid_argument, fmt::format("SamplerParams.{} (root '{}') was refused by llama.cpp: {}",
                                               from_schema ? "json_schema's grammar" : "grammar", root,
                                               why.empty() ? "no reason given" : why));
    }
    grammar_.reset(g);
  }

  const std::int32_t whole = n_ctx > 0 ? n_ctx : model_.n_ctx_train();
  const std::int32_t last_n = params_.penalty_last_n == -1 ? whole : params_.penalty_last_n;
  const std::int32_t dry_n = params_.dry_penalty_last_n == -1 ? whole : params_.dry_penalty_last_n;
  plan_ = plan_chain(params_, dry_n);
  llama_sampler *temp = nullptr;
  chain_.reset(build_chain(m.vocab, m.n_vocab, params_, plan_, last_n, dry_n, &temp));
  temp_.reset(temp);
  bans_ = BannedStrings(params_.banned_strings);
  rng_ = 0x6a09e667f3bcc909ull ^ (static_cast<std::uint64_t>(params_.seed) * 0x9e3779b97f4a7c15ull);
  mu_ = 2.0f * params_.mirostat_tau;
  journal_keep_ = grammar_ ? 0 : static_cast<std::size_t>(std::max({0, last_n, plan_.dry ? dry_n : 0}));
  // Mirrors llama_sampler_penalties::is_disabled(): apply() and accept() then do nothing.
  const bool penalties_off = !plan_.dry && (last_n == 0 || (params_.repeat_penalty == 1.0f &&
                                                            params_.frequency_penalty == 0.0f &&
                                                            params_.presence_penalty == 0.0f));
  fast_greedy_ = plan_.greedy && penalties_off;
  fast_top_k_ = !plan_.greedy && !plan_.mirostat && penalties_off && params_.top_k > 0 &&
                params_.top_k <= kTopKFastMax;
}

Sampler::State Sampler::state() const {
  State s{rng_, journal_, std::nullopt};
  if (plan_.mirostat) s.mirostat_mu = mu_;
  if (!bans_.empty()) s.ban_tail = bans_.tail();
  return s;
}

void Sampler::journal_push(std::int32_t entry) {
  if (!grammar_ && journal_keep_ == 0) return;  // nothing would read it
  journal_.push_back(entry);
  // Trim in chunks so the amortised cost stays O(1) per token.
  if (journal_keep_ != 0 && journal_.size() > 2 * journal_keep_) {
    journal_.erase(journal_.begin(), journal_.end() - static_cast<std::ptrdiff_t>(journal_keep_));
  }
}

Sampler Sampler::restore(const Model &model, const SamplerParams &params, std::int32_t n_ctx, const State &state) {
  Sampler s(model, params, n_ctx);
  try {
    for (std::int32_t e : state.journal) {
      if (e >= 0) {
        s.accept(e);
      } else {
        const Token t = -(e + 1);
        s.accept_prompt(std::span<const Token>(&t, 1));
      }
    }
  } catch (const Error &err) {
    fail(Errc::corrupt, fmt::format("sampler state does not replay: {}", err.what()));
  }
  s.rng_ = state.rng;
  if (state.mirostat_mu) s.mu_ = *state.mirostat_mu;
  if (state.ban_tail) s.bans_.set_tail(*state.ban_tail);
  return s;
}

Sampler::Sampler(Model model, SamplerParams params, Ptr grammar, Ptr chain, Ptr temp)
    : model_(std::move(model)),
      params_(std::move(params)),
      grammar_(std::move(grammar)),
      chain_(std::move(chain)),
      temp_(std::move(temp)) {}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler &&) noexcept = default;
Sampler &Sampler::operator=(Sampler &&) noexcept = default;

Sampler Sampler::clone() const {
  Ptr grammar;
  Ptr chain;
  Ptr temp;
  guarded("sampler clone", [&] {
    if (grammar_) grammar.reset(checked(llama_sampler_clone(grammar_.get()), "grammar clone"));
    chain.reset(checked(llama_sampler_clone(chain_.get()), "chain clone"));
    if (temp_) temp.reset(checked(llama_sampler_clone(temp_.get()), "temp clone"));
  });
  Sampler out(model_, params_, std::move(grammar), std::move(chain), std::move(temp));
  out.plan_ = plan_;
  out.mu_ = mu_;
  out.bans_ = bans_;
  out.rng_ = rng_;
  out.journal_ = journal_;
  out.journal_keep_ = journal_keep_;
  out.fast_greedy_ = fast_greedy_;
  out.fast_top_k_ = fast_top_k_;
  return out;
}

void Sampler::check_size(std::span<const float> logits) const {
  const auto n_vocab = static_cast<std::size_t>(model_.n_vocab());
  if (logits.size() != n_vocab) {
    fail(Errc::invalid_argument,
         fmt::format("logits has {} entries, but the vocabulary has {} tokens", logits.size(), n_vocab));
  }
}

Token Sampler::sample(std::span<const float> logits, bool ban_eog) {
  logits = apply_logit_bias(logits, params_.logit_bias, biased_);  // the paths below see it as the logits
  if (!grammar_ && bans_.empty()) return sample_free(logits, ban_eog);
  // As llama.cpp's common sampler: a pick made as if there were no grammar,
  // kept when the grammar allows it (one token checked, where masking the
  // vocabulary costs milliseconds); else the draw again over the masked
  // vocabulary, from the same RNG position and mirostat state.
  const std::uint64_t rng0 = rng_;
  const float mu0 = mu_;
  try {
    if (const Token t = sample_free(logits, ban_eog); allowed(t)) return t;
  } catch (const Error &) {
    // The masked draw names what is wrong, if anything still is.
  }
  rng_ = rng0;
  mu_ = mu0;
  if (!bans_.empty()) logits = mask_banned(logits);
  if (!grammar_) return sample_free(logits, ban_eog);
  if (const Token t = sample_masked(logits, ban_eog); t >= 0) return t;
  return chain_draw(logits, ban_eog, true);
}

void Sampler::apply_chain(llama_token_data_array &arr) {
  guarded("sampling", [&] { llama_sampler_apply(chain_.get(), &arr); });
}

bool Sampler::allowed(Token token) {
  if (!bans_.empty() && bans_.completes(model_.impl()->pieces()[static_cast<std::size_t>(token)])) return false;
  return !grammar_ || grammar_allows(token);
}

std::span<const float> Sampler::mask_banned(std::span<const float> logits) {
  check_size(logits);
  logits = bans_.mask(logits, model_.impl()->pieces(), banned_);
  if (std::none_of(logits.begin(), logits.end(), [](float v) { return v > -INFINITY; })) {
    fail(Errc::invalid_argument, "SamplerParams.banned_strings leave no token to sample after this text");
  }
  return logits;
}

Token Sampler::sample_free(std::span<const float> logits, bool ban_eog) {
  const auto &eog = model_.impl()->eog;
  ban_eog = ban_eog && !eog.empty();
  if (fast_top_k_) {
    if (const Token t = sample_top_k(logits, ban_eog); t >= 0) return t;
  }
  if (!fast_greedy_) return chain_draw(logits, ban_eog, false);
  const Token t = sample_argmax(logits);
  if (!ban_eog || std::find(eog.begin(), eog.end(), t) == eog.end()) return t;
  // The argmax is an end token: the best of the rest, from a masked copy
  // (rare, so the common case copies nothing).
  masked_.assign(logits.begin(), logits.end());
  for (const std::int32_t e : eog) masked_[static_cast<std::size_t>(e)] = -INFINITY;
  return sample_argmax(masked_);
}


Token Sampler::sample_argmax(std::span<const float> logits) const {
  check_size(logits);
  const float *p = logits.data();
  const std::size_t n = logits.size();
  // Pass 1: the maximum and whether any entry is NaN.
  bool nan = false;
  const float max_logit = max_of(p, n, nan);
  // The same errors, in the same order, as the chain path.
  if (nan) {
    for (std::size_t j = 0; j < n; ++j) {
      if (std::isnan(p[j])) fail(Errc::invalid_argument, fmt::format("logits[{}] is NaN", j));
    }
  }
  if (max_logit == -INFINITY) fail(Errc::invalid_argument, "every logit is -inf: no token can be sampled");
  // Pass 2: the first entry equal to the maximum, which is what llama.cpp's
  // greedy stage picks (it moves only on a strictly greater logit; -0 == +0).
  return static_cast<Token>(find_first(p, n, max_logit));
}

Token Sampler::sample_top_k(std::span<const float> logits, bool ban_eog) {
  logits = apply_logit_bias(logits, params_.logit_bias, biased_);
  check_size(logits);
  const float *p = logits.data();
  const std::size_t n = logits.size();
  const auto &eog = model_.impl()->eog;
  const std::size_t k = std::min(static_cast<std::size_t>(params_.top_k), n);
  // A first threshold: split the logits into k + e chunks (e: the end
  // tokens banned); of their maxima, at most e are banned, so at least k
  // distinct admissible logits are >= the (e+1)-th smallest maximum. The
  // scan below then looks at little besides the answer, in whatever order
  // the logits come (a running threshold alone rises slowly when they grow
  // with the token id).
  const std::size_t e = ban_eog ? eog.size() : 0;
  float thr = -INFINITY;
  bool nan = false;
  if ((k + e) * 64 <= n) {
    thread_local std::vector<float> maxima;
    maxima.resize(k + e);
    const std::size_t len = n / maxima.size();
    for (std::size_t c = 0; c < maxima.size(); ++c) {
      maxima[c] = max_of(p + c * len, c + 1 == maxima.size() ? n - c * len : len, nan);
    }
    if (nan) return -1;
    std::nth_element(maxima.begin(), maxima.begin() + static_cast<std::ptrdiff_t>(e), maxima.end());
    thr = maxima[e];
  }
  thread_local std::vector<llama_token_data> buf;
  TopK top(buf, k, thr);
  // v >= thr is false for a NaN too: the chain path names it.
  const auto offer = [&](std::size_t j) {
    if (p[j] >= thr && !(ban_eog && std::find(eog.begin(), eog.end(), static_cast<Token>(j)) != eog.end())) {
      thr = top.add(j, p[j]);
    }
  };
  // A block of 16 with nothing at or above thr (nearly all, once thr has
  // risen) costs one vector compare; in the others, only the entries that
  // reached it are looked at.
  std::size_t i = 0;
#if defined(__SSE2__)
  __m128i bad = _mm_setzero_si128();
  for (; i + 16 <= n; i += 16) {
    const __m128 a = _mm_loadu_ps(p + i), b = _mm_loadu_ps(p + i + 4);
    const __m128 c = _mm_loadu_ps(p + i + 8), d = _mm_loadu_ps(p + i + 12);
    bad = _mm_or_si128(bad, _mm_castps_si128(_mm_or_ps(_mm_or_ps(_mm_cmpunord_ps(a, a), _mm_cmpunord_ps(b, b)),
                                                       _mm_or_ps(_mm_cmpunord_ps(c, c), _mm_cmpunord_ps(d, d)))));
    const __m128 t = _mm_set1_ps(thr);
    unsigned hit = static_cast<unsigned>(_mm_movemask_ps(_mm_cmpge_ps(a, t))) |
                   static_cast<unsigned>(_mm_movemask_ps(_mm_cmpge_ps(b, t))) << 4 |
                   static_cast<unsigned>(_mm_movemask_ps(_mm_cmpge_ps(c, t))) << 8 |
                   static_cast<unsigned>(_mm_movemask_ps(_mm_cmpge_ps(d, t))) << 12;
    for (; hit != 0; hit &= hit - 1) offer(i + static_cast<std::size_t>(__builtin_ctz(hit)));
  }
  nan = _mm_movemask_epi8(bad) != 0;
#endif
  for (; i < n; ++i) {
    nan |= p[i] != p[i];
    offer(i);
  }
  // The full chain decides (and names the errors) unless the top k and
  // their order are unique.
  if (nan || !top.finish()) return -1;
  llama_token_data_array arr{buf.data(), buf.size(), -1, true};
  apply_chain(arr);
  return finish(arr);
}

Token Sampler::sample_chain(std::span<const float> logits, bool ban_eog) {
  logits = apply_logit_bias(logits, params_.logit_bias, biased_);
  if (!bans_.empty()) logits = mask_banned(logits);
  return chain_draw(logits, ban_eog, grammar_ != nullptr);
}

Token Sampler::chain_draw(std::span<const float> logits, bool ban_eog, bool masked) {
  check_size(logits);
  // One candidate array per thread, shared by every sampler on it (384 KB
  // for 32,000 tokens), rather than one per sampler: 64 conversations at a
  // temperature would otherwise hold 24 MB of scratch.
  thread_local std::vector<llama_token_data> candidates;
  candidates.resize(logits.size());
  // The checks in one vector pass (a NaN is looked for again only when
  // there is one), then the candidates: stores only.
  bool nan = false;
  const float max_logit = max_of(logits.data(), logits.size(), nan);
  const float *p = logits.data();
  llama_token_data *d = candidates.data();
  for (std::size_t i = 0, n = candidates.size(); i < n; ++i) d[i] = {static_cast<llama_token>(i), p[i], 0.0f};
  if (nan) {
    const auto at = std::find_if(logits.begin(), logits.end(), [](float l) { return std::isnan(l); });
    fail(Errc::invalid_argument, fmt::format("logits[{}] is NaN", at - logits.begin()));
  }
  bool finite = max_logit > -INFINITY;
  if (ban_eog && finite) {
    for (const std::int32_t e : model_.impl()->eog) d[e].logit = -INFINITY;
    // Something finite left? (The first candidate usually answers.)
    finite = std::any_of(candidates.begin(), candidates.end(),
                         [](const llama_token_data &c) { return c.logit > -INFINITY; });
  }
  if (!finite) fail(Errc::invalid_argument, "every logit is -inf: no token can be sampled");

  llama_token_data_array arr{candidates.data(), candidates.size(), -1, false};
  if (masked) {
    guarded("grammar apply", [&] { llama_sampler_apply(grammar_.get(), &arr); });
    bool any = false;
    for (std::size_t i = 0; i < arr.size && !any; ++i) any = arr.data[i].logit > -INFINITY;
    if (!any) {
      fail(Errc::invalid_argument, "grammar admits no token with a finite logit at this point");
    }
  }
  apply_chain(arr);
  return finish(arr);
}

Token Sampler::finish(llama_token_data_array &arr) {
  if (plan_.xtc) apply_xtc(arr, params_.xtc_probability, params_.xtc_threshold, rng_);
  if (temp_) guarded("sampling", [&] { llama_sampler_apply(temp_.get(), &arr); });
  if (plan_.mirostat) {
    arr.selected = static_cast<int64_t>(mirostat_select(arr, params_.mirostat_tau, params_.mirostat_eta, mu_, rng_));
    if (!(arr.data[arr.selected].logit > -INFINITY)) fail(Errc::invalid_argument, "no token is admissible");
    return arr.data[arr.selected].id;
  }
  return draw(arr);
}

Token Sampler::draw(llama_token_data_array &arr) {
  if (params_.temperature != 0.0f) {
    // Softmax over what the stages left, then one draw.
    float top = -INFINITY;
    for (std::size_t i = 0; i < arr.size; ++i) top = std::max(top, arr.data[i].logit);
    double total = 0;
    for (std::size_t i = 0; i < arr.size; ++i) {
      total += arr.data[i].logit > -INFINITY ? std::exp(static_cast<double>(arr.data[i].logit - top)) : 0.0;
    }
    const double u = next_unit(rng_) * total;
    double acc = 0;
    arr.selected = -1;
    for (std::size_t i = 0; i < arr.size; ++i) {
      if (!(arr.data[i].logit > -INFINITY)) continue;
      acc += std::exp(static_cast<double>(arr.data[i].logit - top));
      arr.selected = static_cast<int64_t>(i);
      if (u < acc) break;
    }
  }
  if (arr.selected < 0 || static_cast<std::size_t>(arr.selected) >= arr.size) {
    fail(Errc::backend, fmt::format("llama.cpp selected candidate {} of {}", arr.selected, arr.size));
  }
  const llama_token_data &picked = arr.data[arr.selected];
  // Overflow in a stage (e.g. logits / a tiny temperature) can leave no finite choice.
  if (!(picked.logit > -INFINITY)) {
    fail(Errc::invalid_argument, fmt::format("sampling chose token {} with logit {}: no token is admissible",
                                             picked.id, picked.logit));
  }
  return picked.id;
}

bool Sampler::grammar_allows(Token token) {
  llama_token_data one{token, 0.0f, 0.0f};
  llama_token_data_array arr{&one, 1, -1, false};
  guarded("grammar check", [&] { llama_sampler_apply(grammar_.get(), &arr); });
  return arr.data[0].logit > -INFINITY;
}

void Sampler::accept(Token token) {
  model_.check_token(token);
  if (grammar_) {
    // llama.cpp aborts on a disallowed end-of-generation token and corrupts its stacks on any
    // other disallowed token, so ask the grammar first.
    if (!grammar_allows(token)) {
      fail(Errc::invalid_argument, fmt::format("token {} ('{}') is not allowed by the grammar at this point", token,
                                               model_.token_piece(token)));
    }
    guarded("grammar accept", [&] { llama_sampler_accept(grammar_.get(), token); });
  }
  guarded("sampler accept", [&] { llama_sampler_accept(chain_.get(), token); });
  if (!bans_.empty()) bans_.accept(model_.impl()->pieces()[static_cast<std::size_t>(token)]);
  journal_push(token);
}

void Sampler::accept_prompt(std::span<const Token> tokens) {
  for (Token t : tokens) model_.check_token(t);
  llama_sampler *penalties = llama_sampler_chain_get(chain_.get(), 0);
  llama_sampler *dry = plan_.dry ? llama_sampler_chain_get(chain_.get(), 1) : nullptr;
  guarded("penalty accept", [&] {
    for (Token t : tokens) {
      llama_sampler_accept(penalties, t);
      if (dry != nullptr) llama_sampler_accept(dry, t);
    }
  });
  for (Token t : tokens) journal_push(-(t + 1));
}

}  // namespace weft::detail
