// For weft's own tests only: reaching the internals behind an Executor, and
// putting a decoder in front of llama_decode. Built into the test programs,
// not the library.
#pragma once

#include <functional>
#include <memory>

#include "core/internal.hpp"
#include "exec/executor_core.hpp"

namespace weft::detail {

struct TestAccess {
  static ExecutorCore &core(const Executor &e) { return live_core(e.core_); }
  static bool moved_from(const Executor &e) { return e.core_ == nullptr; }
};

// Called with each micro-batch before llama_decode; a non-zero return is
// taken as llama_decode's, without decoding.
using DecodeHook = std::function<int(const llama_batch &batch)>;
// Consulted during llama_decode; true aborts the micro-batch in flight (as a
// passed deadline would).
using AbortHook = std::function<bool()>;

// Each installs (once) a decoder that calls the hooks in front of
// llama_decode, and sets its hook (empty: none). Call with no step running.
void set_decode_hook(Executor &executor, DecodeHook hook);
void set_abort_hook(Executor &executor, AbortHook hook);
// Runs on the stepping thread before each sample, with no executor lock held.
void set_sample_hook(Executor &executor, std::function<void()> hook);
// Runs on the executor's encoder thread before each image is encoded (the
// executor needs a projector).
void set_encode_hook(Executor &executor, std::function<void()> hook);

}  // namespace weft::detail
