// The C ABI: memory (include/weft/c/memory.h): weft::Memory stores, their
// searches and hits, saving them, a conversation's memory, and compaction.
#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "capi/c_api_internal.hpp"

namespace weft::capi {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Hits = std::vector<MemoryHit>;

std::shared_ptr<Memory> mem_of(const weft_memory *m) { return get<Memory>(m, Kind::memory); }
std::shared_ptr<Hits> hits_of(const weft_memory_hits *h) { return get<Hits>(h, Kind::memory_hits); }
std::shared_ptr<MemorySearch> search_of(const weft_memory_search_handle *s) {
  return get<MemorySearch>(s, Kind::memory_search);
}

weft_memory *make_memory(Memory m) { return make_handle<weft_memory>(Kind::memory, std::make_shared<Memory>(std::move(m))); }
weft_memory_hits *make_hits(Hits h) {
  return make_handle<weft_memory_hits>(Kind::memory_hits, std::make_shared<Hits>(std::move(h)));
}

const MemoryHit &hit_at(const Hits &h, std::size_t index) {
  if (index >= h.size()) fail(WEFT_ERR_OUT_OF_RANGE, fmt::format("index {} is past the list's {} hits", index, h.size()));
  return h[index];
}

MemoryEntry entry_of(const Memory &m, std::uint64_t id) {
  auto e = m.get(id);
  if (!e) fail(WEFT_ERR_NOT_FOUND, fmt::format("no entry with id {} in the memory", id));
  return std::move(*e);
}

const std::initializer_list<std::size_t> kCompactParamsSizes = {sizeof(weft_compact_params)};

weft_compact_params compact_defaults() {
  const CompactParams d;
  weft_compact_params p{};
  p.struct_size = sizeof p;
  p.keep_first = d.keep_first;
  p.keep_last = d.keep_last;
  p.summary = nullptr;
  return p;
}

}  // namespace
}  // namespace weft::capi

using namespace weft::capi;

extern "C" {

weft_status weft_memory_new(weft_memory **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    *out = make_memory(weft::Memory());
  });
}

weft_status weft_memory_free(weft_memory *memory) { return free_handle(__func__, memory, Kind::memory); }

weft_status weft_memory_add(weft_memory *memory, weft_executor *executor, const char *text, const char *metadata,
                            uint64_t *out_id) {
  return guarded(__func__, [&] {
    auto m = mem_of(memory);
    auto ex = get<weft::Executor>(executor, Kind::executor);
    need(out_id, "out_id");
    std::string t(cstr_arg(text, "text"));
    std::string md(cstr_arg(metadata, "metadata", true));
    *out_id = m->add(*ex, std::move(t), std::move(md));
  });
}

weft_status weft_memory_add_vector(weft_memory *memory, const char *text, const char *metadata, const float *vector,
                                   size_t n, uint64_t *out_id) {
  return guarded(__func__, [&] {
    auto m = mem_of(memory);
    need(out_id, "out_id");
    std::string t(cstr_arg(text, "text"));
    std::string md(cstr_arg(metadata, "metadata", true));
    if (n > 0) need(vector, "vector");
    std::vector<float> v;
    if (n > 0) v.assign(vector, vector + n);
    *out_id = m->add(std::move(t), std::move(v), std::move(md));
  });
}

weft_status weft_memory_remove(weft_memory *memory, uint64_t id, weft_bool *out_removed) {
  return guarded(__func__, [&] {
    const bool removed = mem_of(memory)->remove(id);
    if (out_removed != nullptr) *out_removed = removed ? 1 : 0;
  });
}

weft_status weft_memory_clear(weft_memory *memory) {
  return guarded(__func__, [&] { mem_of(memory)->clear(); });
}

weft_status weft_memory_size(const weft_memory *memory, size_t *out) {
  return guarded(__func__, [&] {
    auto m = mem_of(memory);
    need(out, "out");
    *out = m->size();
  });
}

weft_status weft_memory_pending(const weft_memory *memory, size_t *out) {
  return guarded(__func__, [&] {
    auto m = mem_of(memory);
    need(out, "out");
    *out = m->pending();
  });
}

weft_status weft_memory_missing(const weft_memory *memory, size_t *out) {
  return guarded(__func__, [&] {
    auto m = mem_of(memory);
    need(out, "out");
    *out = m->missing();
  });
}

weft_status weft_memory_embed_missing(weft_memory *memory, weft_executor *executor, size_t *out_n) {
  return guarded(__func__, [&] {
    auto m = mem_of(memory);
    auto ex = get<weft::Executor>(executor, Kind::executor);
    const std::size_t n = m->embed_missing(*ex);
    if (out_n != nullptr) *out_n = n;
  });
}

weft_status weft_memory_dimensions(const weft_memory *memory, uint32_t *out) {
  return guarded(__func__, [&] {
    auto m = mem_of(memory);
    need(out, "out");
    *out = m->dimensions();
  });
}

weft_status weft_memory_get_text(const weft_memory *memory, uint64_t id, char *buf, size_t capacity,
                                 size_t *out_len) {
  return guarded(__func__, [&] {
    auto m = mem_of(memory);
    need(out_len, "out_len");
    copy_text_out(entry_of(*m, id).text, buf, capacity, out_len);
  });
}

weft_status weft_memory_get_metadata(const weft_memory *memory, uint64_t id, char *buf, size_t capacity,
                                     size_t *out_len) {
  return guarded(__func__, [&] {
    auto m = mem_of(memory);
    need(out_len, "out_len");
    copy_text_out(entry_of(*m, id).metadata, buf, capacity, out_len);
  });
}

weft_status weft_memory_get_vector(const weft_memory *memory, uint64_t id, float *buf, size_t capacity,
                                   size_t *out_n) {
  return guarded(__func__, [&] {
    auto m = mem_of(memory);
    need(out_n, "out_n");
    const weft::MemoryEntry e = entry_of(*m, id);
    copy_array_out<float>(e.vector, buf, capacity, out_n);
  });
}

weft_status weft_memory_hits_count(const weft_memory_hits *hits, size_t *out) {
  return guarded(__func__, [&] {
    auto h = hits_of(hits);
    need(out, "out");
    *out = h->size();
  });
}

weft_status weft_memory_hits_id(const weft_memory_hits *hits, size_t index, uint64_t *out) {
  return guarded(__func__, [&] {
    auto h = hits_of(hits);
    need(out, "out");
    *out = hit_at(*h, index).id;
  });
}

weft_status weft_memory_hits_score(const weft_memory_hits *hits, size_t index, float *out) {
  return guarded(__func__, [&] {
    auto h = hits_of(hits);
    need(out, "out");
    *out = hit_at(*h, index).score;
  });
}

weft_status weft_memory_hits_text(const weft_memory_hits *hits, size_t index, char *buf, size_t capacity,
                                  size_t *out_len) {
  return guarded(__func__, [&] {
    auto h = hits_of(hits);
    need(out_len, "out_len");
    copy_text_out(hit_at(*h, index).text, buf, capacity, out_len);
  });
}

weft_status weft_memory_hits_metadata(const weft_memory_hits *hits, size_t index, char *buf, size_t capacity,
                                      size_t *out_len) {
  return guarded(__func__, [&] {
    auto h = hits_of(hits);
    need(out_len, "out_len");
    copy_text_out(hit_at(*h, index).metadata, buf, capacity, out_len);
  });
}

weft_status weft_memory_hits_free(weft_memory_hits *hits) { return free_handle(__func__, hits, Kind::memory_hits); }

weft_status weft_memory_search_vector(const weft_memory *memory, const float *query, size_t n, size_t k,
                                      weft_memory_hits **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto m = mem_of(memory);
    if (n > 0) need(query, "query");
    *out = make_hits(m->search(std::span<const float>(query, n), k));
  });
}

weft_status weft_memory_search(const weft_memory *memory, weft_executor *executor, const char *query, size_t k,
                               weft_memory_search_handle **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto m = mem_of(memory);
    auto ex = get<weft::Executor>(executor, Kind::executor);
    const std::string q(cstr_arg(query, "query"));
    *out = make_handle<weft_memory_search_handle>(Kind::memory_search,
                                                  std::make_shared<weft::MemorySearch>(m->search(*ex, q, k)));
  });
}

weft_status weft_memory_search_is_ready(const weft_memory_search_handle *search, weft_bool *out) {
  return guarded(__func__, [&] {
    auto s = search_of(search);
    need(out, "out");
    *out = s->ready() ? 1 : 0;
  });
}

weft_status weft_memory_search_wait(const weft_memory_search_handle *search, uint32_t timeout_ms,
                                    weft_bool *out_ready) {
  return guarded(__func__, [&] {
    auto s = search_of(search);
    need(out_ready, "out_ready");
    *out_ready = s->wait_for(std::chrono::milliseconds(timeout_ms)) ? 1 : 0;
  });
}

weft_status weft_memory_search_error(const weft_memory_search_handle *search, weft_status *out_code, char *buf,
                                     size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] { copy_error_out(search_of(search)->error(), out_code, buf, capacity, out_len); });
}

weft_status weft_memory_search_hits(const weft_memory_search_handle *search, weft_memory_hits **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    *out = make_hits(search_of(search)->hits());
  });
}

weft_status weft_memory_search_free(weft_memory_search_handle *search) {
  return free_handle(__func__, search, Kind::memory_search);
}

weft_status weft_memory_save(const weft_memory *memory, weft_bytes **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto m = mem_of(memory);
    *out = make_handle<weft_bytes>(Kind::bytes, std::make_shared<Bytes>(m->save()));
  });
}

weft_status weft_memory_load(const uint8_t *data, size_t size, weft_memory **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    *out = make_memory(weft::Memory::load(bytes_arg(data, size)));
  });
}

weft_status weft_conversation_set_memory(weft_conversation *conversation, const weft_memory *memory) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    if (memory == nullptr) {
      c->set_memory(std::nullopt);
    } else {
      c->set_memory(*mem_of(memory));
    }
  });
}

weft_status weft_conversation_memory(const weft_conversation *conversation, weft_memory **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto c = conv_of(conversation);
    auto m = c->memory();
    if (m) *out = make_memory(std::move(*m));
  });
}

weft_status weft_compact_params_init(weft_compact_params *params, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(params, struct_size, "weft_compact_params", compact_defaults(), kCompactParamsSizes);
  });
}

weft_status weft_conversation_compact(weft_conversation *conversation, const weft_compact_params *params) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    need(params, "params");
    weft_compact_params p = compact_defaults();
    read_struct(params, "weft_compact_params", p, kCompactParamsSizes);
    weft::CompactParams cp;
    cp.keep_first = p.keep_first;
    cp.keep_last = p.keep_last;
    cp.summary = std::string(cstr_arg(p.summary, "weft_compact_params.summary", true));
    c->compact(cp);
  });
}

}  // extern "C"
