// The test decoder behind exec/test_access.hpp.
#include "exec/test_access.hpp"

#include <llama.h>

namespace weft::detail {
namespace {

class HookDecoder final : public Decoder {
 public:
  int decode(llama_context *ctx, llama_batch &batch) override {
    const int rc = decode_hook ? decode_hook(batch) : 0;
    return rc != 0 ? rc : llama_decode(ctx, batch);
  }
  bool abort_now() override { return abort_hook && abort_hook(); }
  void before_sample() override {
    if (sample_hook) sample_hook();
  }
  DecodeHook decode_hook;
  AbortHook abort_hook;
  std::function<void()> sample_hook;
};

HookDecoder &hooks_of(ExecutorCore &core) {
  if (auto *d = dynamic_cast<HookDecoder *>(core.decoder.get())) return *d;
  core.decoder = std::make_unique<HookDecoder>();
  return static_cast<HookDecoder &>(*core.decoder);
}

}  // namespace

void set_decode_hook(Executor &executor, DecodeHook hook) {
  auto &core = TestAccess::core(executor);
  std::lock_guard step(core.gate.mu);
  std::lock_guard lock(core.mu);
  hooks_of(core).decode_hook = std::move(hook);
}

void set_abort_hook(Executor &executor, AbortHook hook) {
  auto &core = TestAccess::core(executor);
  std::lock_guard step(core.gate.mu);
  std::lock_guard lock(core.mu);
  hooks_of(core).abort_hook = std::move(hook);
}

void set_sample_hook(Executor &executor, std::function<void()> hook) {
  auto &core = TestAccess::core(executor);
  std::lock_guard step(core.gate.mu);
  std::lock_guard lock(core.mu);
  hooks_of(core).sample_hook = std::move(hook);
}

void set_encode_hook(Executor &executor, std::function<void()> hook) {
  auto &core = TestAccess::core(executor);
  std::lock_guard lock(core.mu);
  if (core.media.encoder) core.media.encoder->set_hook(std::move(hook));
}

}  // namespace weft::detail
