// mtmd keeps its own log callbacks (clip's g_logger_state and mtmd-helper's),
// separate from llama.cpp's llama_log_set. Rather than a second router, they
// forward to llama.cpp's current callback: weft installs its router there
// (core/log.cpp), so one sink, one line buffer per thread, one set of levels.
#include <llama.h>
#include <mtmd-helper.h>
#include <mtmd.h>

#include <mutex>

#include "core/internal.hpp"
#include "core/mtmd_log.hpp"

namespace weft::detail {
namespace {

void forward_to_llama(ggml_log_level level, const char *text, void *) {
  ggml_log_callback callback = nullptr;
  void *user_data = nullptr;
  llama_log_get(&callback, &user_data);
  if (callback != nullptr) callback(level, text, user_data);
}

}  // namespace

void ensure_mtmd_log() {
  static std::once_flag once;
  std::call_once(once, [] {
    ensure_backend();
    mtmd_helper_log_set(forward_to_llama, nullptr);  // also sets mtmd_log_set
  });
}

}  // namespace weft::detail
