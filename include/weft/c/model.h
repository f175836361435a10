// weft/c/model.h — a loaded GGUF file, immutable and shared by executors
// and threads; its tokenizer and metadata.
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_MODEL_H
#define WEFT_C_MODEL_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

// Called on the loading thread with progress in [0, 1]; return 0 to cancel.
typedef int32_t (*weft_progress_callback)(float progress, void *user_data);

typedef struct weft_model_params {
  size_t struct_size;
  const char *path;                    // NUL-terminated UTF-8 path of a GGUF file. Required.
  weft_progress_callback on_progress;  // default NULL; called during weft_model_load only
  void *progress_user_data;
  int32_t n_gpu_layers;                // layers to offload to a GPU backend; -1 = all. Default 0
  weft_bool use_mmap;                  // map the file instead of reading it. Default 1
  weft_bool vocab_only;                // tokenizer only, no weights. Default 0
  // Added in 0.6 (a struct_size without them reads as the defaults):
  // ggml-rpc-server peers holding the layers, "host:port,host:port"
  // (ModelParams::rpc; docs/DEPLOYING.md). Default NULL: none. Borrowed for
  // the call.
  const char *rpc;
  int32_t rpc_timeout_ms;              // bound on reaching each peer. Default 5000
  // Added in 0.7: bound on any one answer from an RPC peer (a peer silent
  // past it fails the model's decodes with WEFT_ERR_BACKEND). Default 60000.
  int64_t rpc_reply_timeout_ms;
} weft_model_params;

WEFT_C_API weft_status weft_model_params_init(weft_model_params *params, size_t struct_size);

// Loads a model. WEFT_ERR_NOT_FOUND (no such file), WEFT_ERR_INVALID_ARGUMENT
// (a directory, a malformed rpc list), WEFT_ERR_CORRUPT (not a GGUF llama.cpp
// can read), WEFT_ERR_CANCELLED (on_progress returned 0), WEFT_ERR_IO (an RPC
// peer unreachable or lost while loading), WEFT_ERR_INCOMPATIBLE (an RPC peer
// of another protocol), WEFT_ERR_BACKEND (a model over an RPC peer that failed
// is still loaded). A peer that fails later fails the decodes of executors on
// this model with WEFT_ERR_BACKEND; free the model and load it again.
WEFT_C_API weft_status weft_model_load(const weft_model_params *params, weft_model **out);
WEFT_C_API weft_status weft_model_free(weft_model *model);

// The CPU code this library runs (weft/backend.hpp): "native" (built for the
// build machine), "fixed" (an ISA chosen at build time), or the variant a
// portable build loaded, best for this CPU or named by $WEFT_CPU_VARIANT
// ("zen4", "haswell", "x64", ...). Loads the backend if no model was loaded
// yet. *out_variant: static storage, valid until the process exits.
// *out_runtime_dispatch (may be NULL): 1 for a portable build's choice.
// Errors: WEFT_ERR_NOT_FOUND (no variant beside the library, or not the one
// named), WEFT_ERR_INCOMPATIBLE (the named variant needs instructions this
// CPU lacks) — the same that weft_model_load then returns.
WEFT_C_API weft_status weft_cpu_variant(const char **out_variant, weft_bool *out_runtime_dispatch);

// weft::Model::Memory.
typedef enum weft_model_memory {
  WEFT_MODEL_MEMORY_PLAIN = 0,           // attention: cut anywhere, exactly
  WEFT_MODEL_MEMORY_SLIDING_WINDOW = 1,  // exact while the window's cells are kept, else decoded again
  WEFT_MODEL_MEMORY_RECURRENT = 2,       // one state: a cut inside it is decoded again from the start
  WEFT_MODEL_MEMORY_HYBRID = 3,          // a recurrent state beside attention: as recurrent
} weft_model_memory;

typedef struct weft_model_info {
  size_t struct_size;
  uint64_t n_params;
  uint64_t size_bytes;
  uint64_t fingerprint;  // equal files give equal fingerprints
  int32_t n_vocab;
  int32_t n_ctx_train;
  int32_t n_embd;
  int32_t n_layer;
  weft_token bos;  // -1 when the vocabulary has none
  weft_token eos;  // -1 when the vocabulary has none
  // Added with model families (a smaller struct_size gets the fields
  // before these): how the model's memory keeps a conversation (a
  // weft_model_memory), which decides what a rewind or a fork of a prefix
  // costs (docs/EXECUTOR.md, "Model families"), and a sliding-window
  // model's window in tokens (0 otherwise).
  int32_t memory;
  int32_t sliding_window;
  // Added with tool formats: how the model's chat template writes a tool
  // call, a weft_tool_format (never AUTO; HERMES when it shows none).
  int32_t tool_format;
} weft_model_info;

// Fills `out` (set out->struct_size first).
WEFT_C_API weft_status weft_model_get_info(const weft_model *model, weft_model_info *out);
WEFT_C_API weft_status weft_model_n_vocab(const weft_model *model, int32_t *out);

// Flags for weft_model_tokenize and weft_conversation_prompt_text.
#define WEFT_TEXT_ADD_BOS 0x1u        // prepend BOS (set it on a conversation's first prompt)
#define WEFT_TEXT_PARSE_SPECIAL 0x2u  // parse "<s>"-style text into control tokens
// Flags for weft_model_detokenize and weft_model_token_piece.
#define WEFT_DETOK_REMOVE_SPECIAL 0x1u  // drop BOS/EOS (detokenize only)
#define WEFT_DETOK_RENDER_SPECIAL 0x2u  // render control tokens as their text

// Text -> tokens into `tokens[capacity]`; *out_n = the token count.
WEFT_C_API weft_status weft_model_tokenize(const weft_model *model, const char *text, size_t len, uint32_t flags,
                                           weft_token *tokens, size_t capacity, size_t *out_n);
// Tokens -> UTF-8 text into `buf[capacity]` (NUL-terminated); *out_len
// excludes the NUL. WEFT_ERR_OUT_OF_RANGE for an id outside the vocabulary.
WEFT_C_API weft_status weft_model_detokenize(const weft_model *model, const weft_token *tokens, size_t n_tokens,
                                             uint32_t flags, char *buf, size_t capacity, size_t *out_len);
// The bytes of one token (NUL-terminated), which may be a partial UTF-8
// sequence: join pieces before decoding them.
WEFT_C_API weft_status weft_model_token_piece(const weft_model *model, weft_token token, uint32_t flags, char *buf,
                                              size_t capacity, size_t *out_len);
// *out = 1 for end-of-generation tokens (EOS, EOT, ...).
WEFT_C_API weft_status weft_model_is_eog(const weft_model *model, weft_token token, weft_bool *out);
// llama.cpp's one-line description ("llama ?B all F32").
WEFT_C_API weft_status weft_model_description(const weft_model *model, char *buf, size_t capacity, size_t *out_len);
// A metadata value by NUL-terminated key ("general.name"); "" when absent.
WEFT_C_API weft_status weft_model_meta(const weft_model *model, const char *key, char *buf, size_t capacity,
                                       size_t *out_len);

WEFT_END_DECL

#endif  // WEFT_C_MODEL_H
