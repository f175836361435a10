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
  // A second, smaller model with the same vocabulary drafts greedily in a
  // context of its own (weft_executor_params.draft_model; without one a
  // generation asking for it is WEFT_ERR_INVALID_ARGUMENT).
  WEFT_DRAFTER_MODEL = 2,
} weft_drafter;

// "none", "lookup", "model"; "unknown" for any other value.
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

// weft::DraftModelParams: the second model behind WEFT_DRAFTER_MODEL, set
// by weft_executor_params.draft_model (read by weft_executor_create, not
// kept). The executor makes a llama.cpp context of it (its own threads and
// attention kernel), freed with the executor. A value out of range is
// WEFT_ERR_OUT_OF_RANGE naming the field, its value and the limit.
typedef struct weft_draft_model_params {
  size_t struct_size;
  // The draft model, borrowed: the executor keeps its own reference, so the
  // handle may be freed after weft_executor_create. Required (NULL is
  // WEFT_ERR_NULL_ARG). Its vocabulary must be the executor model's, token
  // for token, and its memory plain attention: WEFT_ERR_INVALID_ARGUMENT
  // otherwise. Default NULL
  const weft_model *model;
  // Cells of the draft context, shared by the drafting conversations, in
  // [64, the draft model's n_ctx_train * n_seq_max]. Default 4096
  uint32_t n_ctx;
  // Conversations whose tokens the draft context keeps at once, [1, 256];
  // more take turns (least recently used first). Default 16
  uint32_t n_seq_max;
  // A draft ends before a token the draft model gives less than this
  // probability, [0, 1]; 0 drafts max_draft tokens whatever the confidence.
  // Default 0.5
  float p_min;
} weft_draft_model_params;

WEFT_C_API weft_status weft_draft_model_params_init(weft_draft_model_params *params, size_t struct_size);

WEFT_END_DECL

#endif  // WEFT_C_SPECULATIVE_H
