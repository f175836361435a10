// Decoder: what the run stage calls to decode one micro-batch.
//
// llama_decode by default; tests put another in front of it (to fail a batch,
// abort one in flight, or hold a step inside its decode or before a sample)
// through tests/exec/test_access.hpp, which is not part of the library.
// Called on the stepping thread with no executor lock held; abort_now() is
// called on a ggml thread during a decode.
#pragma once

struct llama_batch;
struct llama_context;

namespace weft::detail {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // llama_decode's contract: 0 done; 1 no room in the cache; 2 aborted;
  // -1 invalid batch; < -1 fatal. On 1 and 2 the cache may keep the
  // micro-batches llama.cpp finished before it stopped (the run stage rolls
  // them back).
  virtual int decode(llama_context *ctx, llama_batch &batch) = 0;
  // Whether to abort the decode in flight (besides the step's deadline).
  virtual bool abort_now() { return false; }
  // Before each sample of the step's sampling phase.
  virtual void before_sample() {}
};

class LlamaDecoder final : public Decoder {
 public:
  int decode(llama_context *ctx, llama_batch &batch) override;
};

}  // namespace weft::detail
