// weft serve: speculative decoding's options (--speculative, --draft-max,
// --draft-always, --draft-model, --draft-ctx, --draft-p-min) as the
// executor's SpeculativeParams and DraftModelParams.
#pragma once

#include <optional>
#include <string>

#include "serve/serve_options.hpp"
#include "weft/executor.hpp"

namespace weft_cli::serve {

struct ServeContext;

// The drafter every request gets unless it opts out: --speculative, else
// model with --draft-model, else none.
weft::Drafter default_drafter(const ServeOptions &o);
// Refuses combinations that cannot work or would leave the draft model
// unused (Errc::invalid_argument naming the flags); before any model loads.
void check_speculative_options(const ServeOptions &o);
// The executor's default drafter (ExecutorParams::speculative).
weft::SpeculativeParams speculative_params(const ServeOptions &o);
// --draft-model loaded (kept in ctx.draft_model) as ExecutorParams::draft_model;
// none without it.
std::optional<weft::DraftModelParams> draft_model_params(ServeContext &ctx);
// The startup line's words for it ("" when nothing drafts).
std::string describe_speculative(const ServeContext &ctx);

}  // namespace weft_cli::serve
