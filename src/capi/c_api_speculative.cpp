// The C ABI, speculative decoding: weft_speculative_params read (checked,
// naming the C field), the drafter's name, a generation's drafts.
#include <fmt/format.h>

#include "capi/c_api_internal.hpp"

namespace weft::capi {
namespace {

static_assert(WEFT_DRAFTER_NONE == static_cast<int>(Drafter::none));
static_assert(WEFT_DRAFTER_LOOKUP == static_cast<int>(Drafter::lookup));

const std::initializer_list<std::size_t> kSpeculativeParamsSizes = {sizeof(weft_speculative_params)};

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

}  // namespace

SpeculativeParams speculative_from_c(const weft_speculative_params *in, const char *field) {
  weft_speculative_params p = speculative_defaults();
  read_struct(in, field, p, kSpeculativeParamsSizes);
  if (p.drafter != WEFT_DRAFTER_NONE && p.drafter != WEFT_DRAFTER_LOOKUP) {
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

}  // namespace weft::capi

using namespace weft::capi;

extern "C" {

const char *weft_drafter_name(int32_t drafter) {
  if (drafter != WEFT_DRAFTER_NONE && drafter != WEFT_DRAFTER_LOOKUP) return "unknown";
  return weft::drafter_name(static_cast<weft::Drafter>(drafter));
}

weft_status weft_speculative_params_init(weft_speculative_params *params, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(params, struct_size, "weft_speculative_params", speculative_defaults(), kSpeculativeParamsSizes);
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
