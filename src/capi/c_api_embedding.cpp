// The C ABI: text embeddings (include/weft/c/embedding.h) and the embedder
// fields of weft_executor_params.
#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "capi/c_api_internal.hpp"

namespace weft::capi {
namespace {

static_assert(WEFT_POOLING_MODEL == static_cast<int>(Pooling::model));
static_assert(WEFT_POOLING_MEAN == static_cast<int>(Pooling::mean));
static_assert(WEFT_POOLING_CLS == static_cast<int>(Pooling::cls));
static_assert(WEFT_POOLING_LAST == static_cast<int>(Pooling::last));

std::shared_ptr<Embedding> emb_of(const weft_embedding *e) { return get<Embedding>(e, Kind::embedding); }

weft_embedding *make_embedding(Embedding e) {
  return make_handle<weft_embedding>(Kind::embedding, std::make_shared<Embedding>(std::move(e)));
}

}  // namespace

void embedder_defaults(weft_executor_params &p) {
  const EmbedderParams d;
  p.embedder = 0;
  p.embed_pooling = static_cast<int32_t>(d.pooling);
  p.embedding_model = nullptr;
  p.embed_n_ctx = d.n_ctx;
  p.embed_n_seq_max = d.n_seq_max;
  p.embed_normalize = d.normalize ? 1 : 0;
}

void embedder_from_c(const weft_executor_params &p, ExecutorParams &out) {
  if (p.embedder == 0) {
    if (p.embedding_model != nullptr) {
      fail(WEFT_ERR_INVALID_ARGUMENT,
           "weft_executor_params.embedding_model is set but embedder is 0: set embedder = 1 for embeddings");
    }
    return;
  }
  if (p.embed_pooling < WEFT_POOLING_MODEL || p.embed_pooling > WEFT_POOLING_LAST) {
    fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("weft_executor_params.embed_pooling = {} is not a weft_pooling (0..{})",
                                                p.embed_pooling, static_cast<int>(WEFT_POOLING_LAST)));
  }
  EmbedderParams e;
  if (p.embedding_model != nullptr) e.model = *get<Model>(p.embedding_model, Kind::model);
  e.pooling = static_cast<Pooling>(p.embed_pooling);
  e.n_ctx = p.embed_n_ctx;
  e.n_seq_max = p.embed_n_seq_max;
  e.normalize = p.embed_normalize != 0;
  out.embedder = std::move(e);
}

}  // namespace weft::capi

using namespace weft::capi;

extern "C" {

weft_status weft_executor_embed(weft_executor *executor, const char *const *texts, size_t n_texts,
                                weft_embedding **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto ex = get<weft::Executor>(executor, Kind::executor);
    if (n_texts > 0) need(texts, "texts");
    std::vector<std::string> v;
    v.reserve(n_texts);
    for (std::size_t i = 0; i < n_texts; ++i) {
      const std::string name = fmt::format("texts[{}]", i);
      v.emplace_back(cstr_arg(texts[i], name.c_str()));
    }
    *out = make_embedding(ex->embed(v));
  });
}

weft_status weft_executor_embed_tokens(weft_executor *executor, const weft_token *const *inputs,
                                       const size_t *n_tokens, size_t n_inputs, weft_embedding **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto ex = get<weft::Executor>(executor, Kind::executor);
    if (n_inputs > 0) {
      need(inputs, "inputs");
      need(n_tokens, "n_tokens");
    }
    std::vector<std::vector<weft::Token>> v(n_inputs);
    for (std::size_t i = 0; i < n_inputs; ++i) {
      if (inputs[i] == nullptr && n_tokens[i] > 0) {
        fail(WEFT_ERR_NULL_ARG, fmt::format("inputs[{}] is NULL with n_tokens[{}] = {}", i, i, n_tokens[i]));
      }
      if (n_tokens[i] > 0) v[i].assign(inputs[i], inputs[i] + n_tokens[i]);
    }
    *out = make_embedding(ex->embed_tokens(std::move(v)));
  });
}

weft_status weft_executor_embedding_size(const weft_executor *executor, uint32_t *out) {
  return guarded(__func__, [&] {
    auto ex = get<weft::Executor>(executor, Kind::executor);
    need(out, "out");
    *out = ex->embedding_size();
  });
}

weft_status weft_embedding_free(weft_embedding *embedding) { return free_handle(__func__, embedding, Kind::embedding); }

weft_status weft_embedding_is_done(const weft_embedding *embedding, weft_bool *out) {
  return guarded(__func__, [&] {
    auto e = emb_of(embedding);
    need(out, "out");
    *out = e->done() ? 1 : 0;
  });
}

weft_status weft_embedding_wait(const weft_embedding *embedding, uint32_t timeout_ms, weft_bool *out_done) {
  return guarded(__func__, [&] {
    auto e = emb_of(embedding);
    need(out_done, "out_done");
    *out_done = e->wait_for(std::chrono::milliseconds(timeout_ms)) ? 1 : 0;
  });
}

weft_status weft_embedding_error(const weft_embedding *embedding, weft_status *out_code, char *buf, size_t capacity,
                                 size_t *out_len) {
  return guarded(__func__, [&] { copy_error_out(emb_of(embedding)->error(), out_code, buf, capacity, out_len); });
}

weft_status weft_embedding_size(const weft_embedding *embedding, size_t *out) {
  return guarded(__func__, [&] {
    auto e = emb_of(embedding);
    need(out, "out");
    *out = e->size();
  });
}

weft_status weft_embedding_n_done(const weft_embedding *embedding, size_t *out) {
  return guarded(__func__, [&] {
    auto e = emb_of(embedding);
    need(out, "out");
    *out = e->n_done();
  });
}

weft_status weft_embedding_n_tokens(const weft_embedding *embedding, size_t index, size_t *out) {
  return guarded(__func__, [&] {
    auto e = emb_of(embedding);
    need(out, "out");
    *out = e->n_tokens(index);
  });
}

weft_status weft_embedding_n_embd(const weft_embedding *embedding, uint32_t *out) {
  return guarded(__func__, [&] {
    auto e = emb_of(embedding);
    need(out, "out");
    *out = e->n_embd();
  });
}

weft_status weft_embedding_vector(const weft_embedding *embedding, size_t index, float *buf, size_t capacity,
                                  size_t *out_n) {
  return guarded(__func__, [&] {
    auto e = emb_of(embedding);
    need(out_n, "out_n");
    if (index >= e->size()) {
      fail(WEFT_ERR_OUT_OF_RANGE, fmt::format("index {} is past the embedding's {} inputs", index, e->size()));
    }
    const std::vector<float> v = e->vector(index);
    copy_array_out<float>(v, buf, capacity, out_n);
  });
}

weft_status weft_embedding_cancel(weft_embedding *embedding) {
  return guarded(__func__, [&] { emb_of(embedding)->cancel(); });
}

weft_status weft_cosine_similarity(const float *a, size_t n_a, const float *b, size_t n_b, float *out) {
  return guarded(__func__, [&] {
    if (n_a > 0) need(a, "a");
    if (n_b > 0) need(b, "b");
    need(out, "out");
    *out = weft::cosine_similarity(std::span<const float>(a, n_a), std::span<const float>(b, n_b));
  });
}

}  // extern "C"
