// weft serve: speculative decoding's options as executor parameters.
#include "serve/speculative.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "serve/serve_context.hpp"

namespace weft_cli::serve {

weft::Drafter default_drafter(const ServeOptions &o) {
  if (o.speculative) return *o.speculative;
  return o.draft_model.empty() ? weft::Drafter::none : weft::Drafter::model;
}

void check_speculative_options(const ServeOptions &o) {
  const auto drafter = default_drafter(o);
  if (drafter == weft::Drafter::model && o.draft_model.empty())
    throw weft::Error(weft::Errc::invalid_argument, "--speculative model needs --draft-model PATH");
  // A request can only opt out, never pick a drafter: a draft model that is
  // not the default would never draft.
  if (!o.draft_model.empty() && drafter != weft::Drafter::model)
    throw weft::Error(weft::Errc::invalid_argument,
                      fmt::format("--draft-model with --speculative {}: the draft model would never draft (leave "
                                  "--speculative out, or say model)",
                                  weft::drafter_name(drafter)));
  if (o.draft_model.empty() && (o.draft_ctx != 0 || o.draft_p_min))
    throw weft::Error(weft::Errc::invalid_argument, "--draft-ctx and --draft-p-min need --draft-model PATH");
}

weft::SpeculativeParams speculative_params(const ServeOptions &o) {
  weft::SpeculativeParams p;
  p.drafter = default_drafter(o);
  p.max_draft = o.draft_max;
  p.adaptive = !o.draft_always;
  return p;
}

std::optional<weft::DraftModelParams> draft_model_params(ServeContext &ctx) {
  const auto &o = ctx.opt;
  if (o.draft_model.empty()) return std::nullopt;
  weft::DraftModelParams p{.model = weft::Model::load({.path = o.draft_model})};
  ctx.draft_model = p.model;
  // A draft sequence per slot, so every resident conversation can draft.
  p.n_seq_max = std::clamp<std::uint32_t>(o.parallel, 1, 256);
  // Default: --ctx, as far as the draft model's trained context allows.
  const auto train = static_cast<std::uint64_t>(std::max(1, p.model.n_ctx_train())) * p.n_seq_max;
  p.n_ctx = o.draft_ctx != 0 ? o.draft_ctx
                             : static_cast<std::uint32_t>(std::min(std::max<std::uint64_t>(o.ctx, 64), train));
  if (p.n_ctx > train)
    throw weft::Error(weft::Errc::invalid_argument,
                      fmt::format("--draft-ctx {} is above the draft model's n_ctx_train ({}) x --parallel {}",
                                  p.n_ctx, p.model.n_ctx_train(), p.n_seq_max));
  if (o.draft_p_min) p.p_min = *o.draft_p_min;
  ctx.draft_ctx = p.n_ctx;
  ctx.draft_p_min = p.p_min;
  return p;
}

std::string describe_speculative(const ServeContext &ctx) {
  const auto &o = ctx.opt;
  const auto drafter = default_drafter(o);
  if (drafter == weft::Drafter::none) return "";
  std::string what = weft::drafter_name(drafter);
  if (ctx.draft_model) {
    what += fmt::format(" ({}, {}; {} cells, p_min {})", std::filesystem::path(o.draft_model).stem().string(),
                        ctx.draft_model->description(), ctx.draft_ctx,
                        ctx.draft_p_min);
  }
  return fmt::format("speculative decoding {}, at most {} draft tokens a step ({})", what, o.draft_max,
                     o.draft_always ? "always" : "adaptive");
}

}  // namespace weft_cli::serve
