// weft/c/speculative.h — speculative decoding (weft::SpeculativeParams):
// a generation drafts the tokens it expects next and the step verifies them
// in its own llama_decode; the tokens are those the model samples without
// drafts (docs/EXECUTOR.md, "Speculative decoding").
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_SPECULATIVE_H
#define WEFT_C_SPECULATIVE_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

// weft::Drafter: where a generation's drafts come from.
typedef enum weft_drafter {
  WEFT_DRAFTER_NONE = 0,    // every token a decode of its own
  WEFT_DRAFTER_LOOKUP = 1,  // the continuation of the latest earlier match of the conversation's last tokens
} weft_drafter;

// "none", "lookup"; "unknown" for any other value.
WEFT_C_API const char *weft_drafter_name(int32_t drafter);

// Set by weft_generate_params.speculative (one generation) or
// weft_executor_params.speculative (the default of generations that set
// none). Out-of-range fields are WEFT_ERR_OUT_OF_RANGE, a drafter outside
// weft_drafter WEFT_ERR_INVALID_ARGUMENT, each naming the field and value.
typedef struct weft_speculative_params {
  size_t struct_size;
  int32_t drafter;     // a weft_drafter. Default WEFT_DRAFTER_NONE
  uint32_t max_draft;  // most draft tokens one step verifies, [1, 32]. Default 8
  // WEFT_DRAFTER_LOOKUP: the longest and shortest run of last tokens
  // searched for, 1 <= ngram_min <= ngram_max <= 8. Default 3 and 2.
  uint32_t ngram_max;
  uint32_t ngram_min;
  // Draft only as many tokens as the cost model predicts to raise tokens per
  // second (weighed by this generation's recent acceptance); 0: every draft
  // token the budgets and cells allow. Default 1.
  weft_bool adaptive;
} weft_speculative_params;

WEFT_C_API weft_status weft_speculative_params_init(weft_speculative_params *params, size_t struct_size);

WEFT_END_DECL

#endif  // WEFT_C_SPECULATIVE_H
