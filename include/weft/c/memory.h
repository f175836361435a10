// weft/c/memory.h — what an NPC remembers (weft/memory.hpp): a store of
// texts with caller metadata and embedding vectors, searched by cosine
// similarity; carried by a conversation's saved state or saved alone; and
// history compaction (Conversation::compact).
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_MEMORY_H
#define WEFT_C_MEMORY_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

// A weft_memory handle names a shared store: a conversation given it
// (weft_conversation_set_memory) and the handles weft_conversation_memory
// returns name the same entries; freeing a handle drops only that handle.
// Every function may be called from any thread and none waits for a step.

// A new, empty store; *out is the caller's (weft_memory_free).
WEFT_C_API weft_status weft_memory_new(weft_memory **out);
WEFT_C_API weft_status weft_memory_free(weft_memory *memory);

// Adds `text` (NUL-terminated UTF-8) with `metadata` (NUL-terminated, opaque
// to weft; NULL = "") and queues its embedding on `executor` (made with an
// embedder; someone must step it); *out_id is the entry's id (ids grow from
// 1, never reused). The entry is found by searches once its vector arrives.
// WEFT_ERR_INVALID_ARGUMENT as weft_executor_embed (no embedder, no tokens),
// WEFT_ERR_OUT_OF_RANGE for a text longer than embed_n_ctx,
// WEFT_ERR_INCOMPATIBLE when the store's vectors came from another embedder.
WEFT_C_API weft_status weft_memory_add(weft_memory *memory, weft_executor *executor, const char *text,
                                       const char *metadata, uint64_t *out_id);
// Adds an entry with a vector the caller made (n floats, copied).
// WEFT_ERR_INVALID_ARGUMENT for n = 0 or a width other than the store's.
WEFT_C_API weft_status weft_memory_add_vector(weft_memory *memory, const char *text, const char *metadata,
                                              const float *vector, size_t n, uint64_t *out_id);
// Removes an entry (a queued embedding is dropped); *out_removed = 0 when
// there was none with that id (out_removed may be NULL).
WEFT_C_API weft_status weft_memory_remove(weft_memory *memory, uint64_t id, weft_bool *out_removed);
WEFT_C_API weft_status weft_memory_clear(weft_memory *memory);
// Entries; of them, those whose embedding is queued (pending) and those
// without a vector and not queued (missing: failed, or loaded before their
// vector arrived).
WEFT_C_API weft_status weft_memory_size(const weft_memory *memory, size_t *out);
WEFT_C_API weft_status weft_memory_pending(const weft_memory *memory, size_t *out);
WEFT_C_API weft_status weft_memory_missing(const weft_memory *memory, size_t *out);
// Queues the embedding of every missing entry on `executor`; *out_n (may be
// NULL) how many. Fails as weft_memory_add.
WEFT_C_API weft_status weft_memory_embed_missing(weft_memory *memory, weft_executor *executor, size_t *out_n);
// The vectors' width (0 while no entry has one).
WEFT_C_API weft_status weft_memory_dimensions(const weft_memory *memory, uint32_t *out);

// Entry `id`'s text, metadata and vector, each copied as the ABI's buffers
// are (text with a NUL; capacity 0 asks; WEFT_ERR_BUFFER_TOO_SMALL with the
// length needed). The vector is empty (*out_n = 0) until embedded.
// WEFT_ERR_NOT_FOUND for an id not in the store.
WEFT_C_API weft_status weft_memory_get_text(const weft_memory *memory, uint64_t id, char *buf, size_t capacity,
                                            size_t *out_len);
WEFT_C_API weft_status weft_memory_get_metadata(const weft_memory *memory, uint64_t id, char *buf, size_t capacity,
                                                size_t *out_len);
WEFT_C_API weft_status weft_memory_get_vector(const weft_memory *memory, uint64_t id, float *buf, size_t capacity,
                                              size_t *out_n);

// Search results, best first (equal scores: the older entry first): a list
// the caller frees (weft_memory_hits_free). Its texts are copies.
WEFT_C_API weft_status weft_memory_hits_count(const weft_memory_hits *hits, size_t *out);
WEFT_C_API weft_status weft_memory_hits_id(const weft_memory_hits *hits, size_t index, uint64_t *out);
// Cosine similarity to the query, in [-1, 1].
WEFT_C_API weft_status weft_memory_hits_score(const weft_memory_hits *hits, size_t index, float *out);
WEFT_C_API weft_status weft_memory_hits_text(const weft_memory_hits *hits, size_t index, char *buf, size_t capacity,
                                             size_t *out_len);
WEFT_C_API weft_status weft_memory_hits_metadata(const weft_memory_hits *hits, size_t index, char *buf,
                                                 size_t capacity, size_t *out_len);
WEFT_C_API weft_status weft_memory_hits_free(weft_memory_hits *hits);

// The best k entries for `query` (n floats, the store's width) among those
// embedded now. WEFT_ERR_INVALID_ARGUMENT for another width (an empty store
// gives no hits).
WEFT_C_API weft_status weft_memory_search_vector(const weft_memory *memory, const float *query, size_t n, size_t k,
                                                 weft_memory_hits **out);
// Queues `query`'s embedding on `executor` and returns at once; the search
// runs when its hits are read (weft_memory_search_hits). Fails as
// weft_memory_add.
WEFT_C_API weft_status weft_memory_search(const weft_memory *memory, weft_executor *executor, const char *query,
                                          size_t k, weft_memory_search_handle **out);
// *out = 1 once the query is embedded (or its embedding failed).
WEFT_C_API weft_status weft_memory_search_is_ready(const weft_memory_search_handle *search, weft_bool *out);
// Waits until ready or `timeout_ms` passes; someone must step the executor.
WEFT_C_API weft_status weft_memory_search_wait(const weft_memory_search_handle *search, uint32_t timeout_ms,
                                               weft_bool *out_ready);
// Why the query's embedding failed (as weft_embedding_error); WEFT_OK otherwise.
WEFT_C_API weft_status weft_memory_search_error(const weft_memory_search_handle *search, weft_status *out_code,
                                                char *buf, size_t capacity, size_t *out_len);
// The hits among the entries embedded now (none until ready).
WEFT_C_API weft_status weft_memory_search_hits(const weft_memory_search_handle *search, weft_memory_hits **out);
WEFT_C_API weft_status weft_memory_search_free(weft_memory_search_handle *search);

// The store as bytes (weft_bytes, weft/c/state.h): entries, ids and the
// embedder that filled it; queued embeddings are saved as missing entries
// (weft_memory_embed_missing queues them again). Load: WEFT_ERR_CORRUPT for
// damaged bytes, WEFT_ERR_INCOMPATIBLE for another format version.
WEFT_C_API weft_status weft_memory_save(const weft_memory *memory, weft_bytes **out);
WEFT_C_API weft_status weft_memory_load(const uint8_t *data, size_t size, weft_memory **out);

// The conversation's memory: saved with it (weft_conversation_save,
// weft_executor_save_all, parking) and loaded back; forks share it. NULL
// removes it. weft_conversation_memory gives a new handle to the same
// store (the caller frees it), *out = NULL when it has none.
WEFT_C_API weft_status weft_conversation_set_memory(weft_conversation *conversation, const weft_memory *memory);
WEFT_C_API weft_status weft_conversation_memory(const weft_conversation *conversation, weft_memory **out);

// weft_conversation_compact: the history becomes its first keep_first
// tokens, then `summary` (tokenized without BOS), then its last keep_last.
typedef struct weft_compact_params {
  size_t struct_size;
  uint32_t keep_first;  // tokens kept at the start (a system prompt). Default 0
  uint32_t keep_last;   // most recent tokens kept. Default 0
  const char *summary;  // NUL-terminated UTF-8 put between them; NULL = "". Default NULL
} weft_compact_params;

WEFT_C_API weft_status weft_compact_params_init(weft_compact_params *params, size_t struct_size);
// Exactly as a fresh prompt of that history: the first part keeps its
// cells, the rest is queued and decoded by the next steps. Cancels a running
// generation. WEFT_ERR_OUT_OF_RANGE (naming the values) when keep_first +
// keep_last exceed the conversation's tokens or the result exceeds n_ctx;
// WEFT_ERR_INVALID_ARGUMENT when an image lies at or past keep_first.
WEFT_C_API weft_status weft_conversation_compact(weft_conversation *conversation, const weft_compact_params *params);

WEFT_END_DECL

#endif  // WEFT_C_MEMORY_H
