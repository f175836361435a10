// weft/c/adapter.h — LoRA adapters and control vectors, loaded once per
// model and chosen per conversation (each its own set and scales).
//
// Part of weft.h (include that one; the rules it states apply here). The
// C++ side is weft/adapter.hpp (Model::load_adapter,
// Conversation::set_adapters); a step decodes conversations of different
// settings in separate llama_decode calls (docs/EXECUTOR.md, "Adapters").
#ifndef WEFT_C_ADAPTER_H
#define WEFT_C_ADAPTER_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

// weft_adapter (common.h): a loaded adapter, immutable, shared by any
// number of conversations and threads. Released with weft_adapter_free. It
// keeps its model's weights alive, so the model's handle (and its
// executors) may be freed before it.

typedef enum weft_adapter_kind {
  WEFT_ADAPTER_LORA = 0,            // low-rank deltas to weight matrices (GGUF, adapter.type "lora")
  WEFT_ADAPTER_CONTROL_VECTOR = 1,  // a direction added to each layer's output (llama.cpp's cvec GGUF)
} weft_adapter_kind;

// "lora", "control_vector"; "unknown" for other values. Static storage.
WEFT_C_API const char *weft_adapter_kind_name(int32_t kind);

// Loads a LoRA adapter (GGUF, general.type "adapter") or a control vector
// (llama.cpp's cvec GGUF: direction.<layer> tensors) for `model`; the kind
// is read from the file. `path` is NUL-terminated, passed to the OS as
// bytes. Each call loads the file again (a new adapter). Never waits for a
// step. WEFT_ERR_NOT_FOUND (no such file), WEFT_ERR_CORRUPT (not a GGUF, or
// a direction tensor that is not 1-D f32), WEFT_ERR_INVALID_ARGUMENT (empty
// path, a directory, neither kind, or made for another model: another
// architecture, width, layer count or tensor shapes).
WEFT_C_API weft_status weft_model_load_adapter(const weft_model *model, const char *path, weft_adapter **out);
WEFT_C_API weft_status weft_adapter_free(weft_adapter *adapter);

// *out = a weft_adapter_kind.
WEFT_C_API weft_status weft_adapter_get_kind(const weft_adapter *adapter, int32_t *out);
// general.name when the file has one, else the file name (NUL-terminated).
WEFT_C_API weft_status weft_adapter_name(const weft_adapter *adapter, char *buf, size_t capacity, size_t *out_len);
// The path it was loaded from (NUL-terminated).
WEFT_C_API weft_status weft_adapter_path(const weft_adapter *adapter, char *buf, size_t capacity, size_t *out_len);
// 64-bit identity of the file's contents (as weft_model_info.fingerprint):
// saved states name adapters by it, so a conversation saved under an
// adapter loads under any load of the same file.
WEFT_C_API weft_status weft_adapter_fingerprint(const weft_adapter *adapter, uint64_t *out);
// Control vectors: the highest layer that has a direction (layers run 1 ..
// n_layer - 1; layer 0 never has one, as in llama.cpp). 0 for a LoRA.
WEFT_C_API weft_status weft_adapter_n_layers(const weft_adapter *adapter, int32_t *out);

// One adapter of a conversation's setting, with how strongly it applies.
//
// Passed in arrays: every element carries struct_size (weft_adapter_use_init
// sets it), and the library takes the array's element size from the first
// element's, so an older caller's smaller struct keeps working when fields
// are appended. All elements of one array must have the same struct_size
// (WEFT_ERR_STRUCT_SIZE otherwise, naming the index).
typedef struct weft_adapter_use {
  size_t struct_size;
  // Required; loaded for the executor's model (the same weft_model load,
  // not another load of the same file). Borrowed by
  // weft_conversation_set_adapters (the conversation keeps its own
  // reference); a new handle, the caller's to free, from
  // weft_conversation_adapters.
  weft_adapter *adapter;
  // Finite. LoRA: llama.cpp's scale for the adapter's delta (alpha / rank
  // applied on top, as llama.cpp does); control vector: the direction's
  // multiplier. 0 is as if absent. Default 1.
  float scale;
  // Control vectors only: the layers it is added to, both inclusive, within
  // [1, n_layer - 1]; -1 = from layer 1 / to the last layer. Must stay -1
  // for a LoRA. Default -1, -1 (every layer).
  int32_t layer_start;
  int32_t layer_end;
} weft_adapter_use;

// Defaults: adapter NULL, scale 1, layer_start = layer_end = -1.
WEFT_C_API weft_status weft_adapter_use_init(weft_adapter_use *use, size_t struct_size);

// The adapters the conversation's tokens decode under from now on (input
// already queued but not decoded included); n = 0 (uses may then be NULL)
// goes back to the base model. What was decoded before keeps the KV its own
// setting gave. A fork inherits the setting; save/load carry it by adapter
// fingerprint (weft_executor_load of such a state fails with
// WEFT_ERR_NOT_FOUND unless an adapter of that file is loaded for the
// executor's model and still alive: keep its handle until then). Never
// waits for a step.
// WEFT_ERR_NULL_ARG (uses NULL with n > 0, an element's adapter NULL),
// WEFT_ERR_INVALID_HANDLE (an element's adapter freed or of another type),
// WEFT_ERR_STRUCT_SIZE, WEFT_ERR_INVALID_ARGUMENT (an adapter loaded for
// another model, a scale that is not finite, a layer range outside
// [1, n_layer - 1] or set on a LoRA, an adapter listed twice),
// WEFT_ERR_DISPOSED; the setting is then unchanged.
WEFT_C_API weft_status weft_conversation_set_adapters(weft_conversation *conversation, const weft_adapter_use *uses,
                                                      size_t n);
// The setting as last set, in its order, into `uses[capacity]`; *out_n = its
// length (0 = the base model). Set uses[0].struct_size (weft_adapter_use_init
// on each element does): every element is written with that size. Layer
// ranges come resolved (-1 becomes the layer; a LoRA's stay -1). Each
// element's `adapter` is a new handle (not the one given to set_adapters;
// compare fingerprints) that the caller frees with weft_adapter_free. On
// WEFT_ERR_BUFFER_TOO_SMALL (capacity 0 asks for the count) nothing is
// written and no handle is made.
WEFT_C_API weft_status weft_conversation_adapters(const weft_conversation *conversation, weft_adapter_use *uses,
                                                  size_t capacity, size_t *out_n);

WEFT_END_DECL

#endif  // WEFT_C_ADAPTER_H
