// The C ABI, speculative decoding: weft_speculative_params and
// weft_draft_model_params read (checked, naming the C field), the drafter's
// name, a generation's drafts.
#include <fmt/format.h>

#include "capi/c_api_internal.hpp"

namespace weft::capi {
namespace {

static_assert(WEFT_DRAFTER_NONE == static_cast<int>(Drafter::none));
static_assert(WEFT_DRAFTER_LOOKUP == static_cast<int>(Drafter::lookup));
static_assert(WEFT_DRAFTER_MODEL == static_cast<int>(Drafter::model));

const std::initializer_list<std::size_t> kSpeculativeParamsSizes = {sizeof(weft_speculative_params)};
const std::initializer_list<std::size_t> kDraftModelParamsSizes = {sizeof(weft_draft_model_params)};
// DraftModel's own limit is also llama.cpp's sequence cap; 256 is the ABI's.
constexpr std::uint32_t kMaxDraftSeqs = 256;

bool is_drafter(int32_t d) { return d == WEFT_DRAFTER_NONE || d == WEFT_DRAFTER_LOOKUP || d == WEFT_DRAFTER_MODEL; }

weft_speculative_params speculative_defaults() {
  const SpeculativeParams d;
  weft_speculative_params p{};
  p.struct_size = sizeof p;
  p.drafter = static_cast<int32_t>(d.drafter);
  p.max_draft = d.max_draft;
  p.ngram_max = d.ngram_max;
  p.ngram_min = d.ngram_min;
  p.adaptive = d.adaptive ? 1 : 0;
  return p;
}

// DraftModelParams' defaults, written out: it cannot be made without a model.
weft_draft_model_params draft_model_defaults() {
  weft_draft_model_params p{};
  p.struct_size = sizeof p;
  p.model = nullptr;
  p.n_ctx = 4096;
  p.n_seq_max = 16;
  p.p_min = 0.5f;
  return p;
}

}  // namespace

SpeculativeParams speculative_from_c(const weft_speculative_params *in, const char *field) {
  weft_speculative_params p = speculative_defaults();
  read_struct(in, field, p, kSpeculativeParamsSizes);
  if (!is_drafter(p.drafter)) {
    fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("{}.drafter = {} is not a weft_drafter", field, p.drafter));
  }
  if (p.max_draft < 1 || p.max_draft > SpeculativeParams::kMaxDraft) {
    fail(WEFT_ERR_OUT_OF_RANGE,
         fmt::format("{}.max_draft = {} is outside [1, {}]", field, p.max_draft, SpeculativeParams::kMaxDraft));
  }
  if (p.ngram_min < 1 || p.ngram_max > SpeculativeParams::kMaxNgram || p.ngram_min > p.ngram_max) {
    fail(WEFT_ERR_OUT_OF_RANGE, fmt::format("{}.ngram_min = {} and ngram_max = {} must satisfy 1 <= min <= max <= {}",
                                            field, p.ngram_min, p.ngram_max, SpeculativeParams::kMaxNgram));
  }
  SpeculativeParams out;
  out.drafter = static_cast<Drafter>(p.drafter);
  out.max_draft = p.max_draft;
  out.ngram_max = p.ngram_max;
  out.ngram_min = p.ngram_min;
  out.adaptive = p.adaptive != 0;
  return out;
}

DraftModelParams draft_model_from_c(const weft_draft_model_params *in, const char *field) {
  weft_draft_model_params p = draft_model_defaults();
  read_struct(in, field, p, kDraftModelParamsSizes);
  const std::string model_field = fmt::format("{}.model", field);
  need(p.model, model_field.c_str());
  DraftModelParams out{.model = *get<Model>(p.model, Kind::model)};
  if (p.n_seq_max < 1 || p.n_seq_max > kMaxDraftSeqs) {
    fail(WEFT_ERR_OUT_OF_RANGE,
         fmt::format("{}.n_seq_max = {} is outside [1, {}]", field, p.n_seq_max, kMaxDraftSeqs));
  }
  // The upper bound is the draft model's, checked with it by the executor.
  if (p.n_ctx < 64) fail(WEFT_ERR_OUT_OF_RANGE, fmt::format("{}.n_ctx = {} is outside [64, n_ctx_train * n_seq_max]",
                                                            field, p.n_ctx));
  if (!(p.p_min >= 0.0f && p.p_min <= 1.0f)) {  // NaN too
    fail(WEFT_ERR_OUT_OF_RANGE, fmt::format("{}.p_min = {} is outside [0, 1]", field, p.p_min));
  }
  out.n_ctx = p.n_ctx;
  out.n_seq_max = p.n_seq_max;
  out.p_min = p.p_min;
  return out;
}

}  // namespace weft::capi

using namespace weft::capi;

extern "C" {

const char *weft_drafter_name(int32_t drafter) {
  if (!is_drafter(drafter)) return "unknown";
  return weft::drafter_name(static_cast<weft::Drafter>(drafter));
}

weft_status weft_speculative_params_init(weft_speculative_params *params, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(params, struct_size, "weft_speculative_params", speculative_defaults(), kSpeculativeParamsSizes);
  });
}

weft_status weft_draft_model_params_init(weft_draft_model_params *params, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(params, struct_size, "weft_draft_model_params", draft_model_defaults(), kDraftModelParamsSizes);
  });
}

weft_status weft_generation_drafts(const weft_generation *generation, uint32_t *out_drafted, uint32_t *out_accepted) {
  return guarded(__func__, [&] {
    const auto r = get<weft::Generation>(generation, Kind::generation)->result();
    if (out_drafted != nullptr) *out_drafted = r.drafted;
    if (out_accepted != nullptr) *out_accepted = r.accepted;
  });
}

}  // extern "C"
