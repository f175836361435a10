// FlashAttention::automatic on the CPU: both kernels timed at the
// executor's shape. Which one wins depends on the CPU and the shape: on an
// AMD EPYC flash attention doubles the speed of 16 conversations in a
// unified cache (the plain kernel attends over every conversation's cells,
// masked, while the flash kernel skips masked ones), and on an AMX Xeon it
// made one deep conversation's prompt 9x slower. So it is measured.
#include "exec/attention_probe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "core/model_impl.hpp"
#include "exec/kv_type.hpp"
#include "kv/scratch_kv.hpp"
#include "weft/cache.hpp"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Both kernels' attention cost grows linearly with the cells, so the
// winner at 4096 cells is the winner at more; the cap keeps the probe short
// (64 conversations of small on 2 cores: about 2.5 s).
constexpr std::uint32_t kProbeCells = 4096;  // most cells a probe fills
constexpr std::uint32_t kProbeDepth = 256;   // most cells per conversation
constexpr std::uint32_t kProbeChunk = 32;
constexpr int kRounds = 3;
// Two rounds suffice when both put one kernel ahead by this much.
constexpr double kClearMargin = 1.15;
// A kernel's slowest round over its fastest beyond this: the machine was
// busy (another process, spinning threads); such a result is used but not
// kept on disk, so a quiet moment decides for good.
constexpr double kSteadySpread = 1.5;
double steady_spread = kSteadySpread;  // tests change it (set_attention_probe_spread)
constexpr const char *kCacheFile = "attention-probe.txt";

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string cpu_name() {
#ifdef __linux__
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 1);
  }
#endif
  return "cpu";
}

// Everything the timings depend on: the model, the shape, the threads and
// cache type, this CPU and how ggml was built for it.
std::string probe_key(const Model &model, const ExecutorParams &p, const ProbeShape &s, int threads) {
  const std::string all = fmt::format(
      "{:016x}|{}x{}+{}|t{}|ub{}|kv{}|{}|{}|{}", model.fingerprint(), s.seqs, s.depth, s.chunk, threads,
      p.n_ubatch == 0 ? p.n_batch : p.n_ubatch, static_cast<int>(p.kv_type), cpu_name(),
      std::thread::hardware_concurrency(), llama_print_system_info());
  return fmt::format("{:016x}", fnv1a(all));
}

std::string cache_dir(const ExecutorParams &p) { return p.tuning_cache_dir ? *p.tuning_cache_dir : default_cache_dir(); }

using Timings = std::pair<double, double>;  // flash_ms, plain_ms

// This process's results; the lock also makes two executors created at
// once probe one after the other (each probe would slow the other's).
std::mutex probes_mu;
std::map<std::string, Timings> probes;

std::map<std::string, Timings> read_cache(const std::string &file) {
  std::map<std::string, Timings> out;
  std::vector<std::uint8_t> bytes;
  try {
    bytes = read_file(file, 1 << 20);
  } catch (const Error &) {
    return out;  // none yet, or unreadable: measured again
  }
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  std::string key;
  double f = 0, pl = 0;
  while (in >> key >> f >> pl) {
    if (f > 0 && pl > 0) out[key] = {f, pl};
  }
  return out;
}

void write_cache(const std::string &dir, const std::string &key, Timings t) {
  const std::string file = dir + "/" + kCacheFile;
  try {
    std::error_code ec;
    std::filesystem::create_directories(u8_path(dir), ec);
    auto all = read_cache(file);  // another process may have added some
    all[key] = t;
    std::string text;
    for (const auto &[k, v] : all) text += fmt::format("{} {:.4f} {:.4f}\n", k, v.first, v.second);
    write_file_atomic(file, {reinterpret_cast<const std::uint8_t *>(text.data()), text.size()});
  } catch (const Error &e) {
    log_warning(fmt::format("attention probe: could not remember the result in {}: {}", file, e.what()));
  }
}

struct Scratch {
  llama_context *ctx = nullptr;
  llama_batch batch{};
  explicit Scratch(std::int32_t n) : batch(llama_batch_init(n, 0, 1)) {}
  ~Scratch() {
    llama_batch_free(batch);
    if (ctx != nullptr) llama_free(ctx);
  }
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
};

void fill_batch(llama_batch &b, const std::vector<Token> &tokens, std::uint32_t pos0, bool one_seq_each) {
  b.n_tokens = static_cast<std::int32_t>(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    b.token[i] = tokens[i];
    b.pos[i] = static_cast<llama_pos>(one_seq_each ? pos0 : pos0 + i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = one_seq_each ? static_cast<llama_seq_id>(i) : 0;
    b.logits[i] = one_seq_each || i + 1 == tokens.size();
  }
}

// One scratch context with the executor's cache type and threads, its
// `seqs` sequences filled to `depth` (the first decoded, the others copies
// of its KV data in cells of their own, as separate conversations hold).
// Null (with the reason in `why`) if llama.cpp refuses.
std::unique_ptr<Scratch> scratch(const Model &model, const ExecutorParams &p, const ProbeShape &s, int threads,
                                 bool flash, std::string &why) {
  const std::uint32_t n_batch = std::max({s.depth, s.seqs, s.chunk, 1u});
  auto sc = std::make_unique<Scratch>(static_cast<std::int32_t>(n_batch));
  auto cp = llama_context_default_params();
  cp.n_ctx = s.seqs * (s.depth + 1) + s.chunk + 16;
  cp.n_batch = n_batch;
  cp.n_ubatch = std::min(n_batch, p.n_ubatch == 0 ? p.n_batch : p.n_ubatch);
  cp.n_seq_max = s.seqs;
  cp.kv_unified = true;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.type_k = cp.type_v = to_ggml(p.kv_type);  // not quantised: those are left to llama.cpp
  cp.flash_attn_type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.no_perf = true;
  take_llama_error();
  sc->ctx = llama_init_from_model(model.impl()->model, cp);
  if (sc->ctx == nullptr) {
    why = fmt::format("no scratch context of {} cells: {}", cp.n_ctx, take_llama_error());
    return nullptr;
  }
  std::mt19937 rng(7);
  std::vector<Token> prompt(s.depth);
  for (auto &t : prompt) t = static_cast<Token>(rng() % static_cast<unsigned>(model.n_vocab()));
  fill_batch(sc->batch, prompt, 0, false);
  if (const int rc = llama_decode(sc->ctx, sc->batch); rc != 0) {
    why = fmt::format("llama_decode returned {} filling the scratch context", rc);
    return nullptr;
  }
  ScratchKv scratch(sc->ctx);
  const std::vector<std::uint8_t> kv = scratch.save(0);
  for (std::uint32_t q = 1; q < s.seqs; ++q) {
    if (kv.empty() || !scratch.load(static_cast<int>(q), kv, static_cast<std::int32_t>(s.depth))) {
      why = fmt::format("could not copy the probe's KV data into sequence {}", q);
      return nullptr;
    }
  }
  return sc;
}

// One generation step and one prompt chunk on `sc`, in milliseconds; the
// cells they add are removed again. Negative if a decode failed.
double time_round(Scratch &sc, const ProbeShape &s, std::mt19937 &rng, int n_vocab) {
  ScratchKv kv(sc.ctx);
  double ms = 0;
  for (const bool gen : {true, false}) {
    std::vector<Token> tokens(gen ? s.seqs : s.chunk);
    for (auto &t : tokens) t = static_cast<Token>(rng() % static_cast<unsigned>(n_vocab));
    fill_batch(sc.batch, tokens, s.depth, gen);
    const auto t0 = Clock::now();
    if (llama_decode(sc.ctx, sc.batch) != 0) return -1;
    ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    kv.remove_from(static_cast<std::int32_t>(s.depth));
  }
  return ms;
}

// Fastest round of each kernel, the rounds interleaved so that a noisy
// moment on a shared machine hits both. `steady`: every round of each
// kernel within kSteadySpread of its fastest.
bool measure(const Model &model, const ExecutorParams &p, const ProbeShape &s, int threads, Timings &out,
             bool &steady, std::string &why) {
  auto on = scratch(model, p, s, threads, true, why);
  if (!on) return false;
  auto off = scratch(model, p, s, threads, false, why);
  if (!off) return false;
  std::mt19937 rng(11);
  double best_on = 1e300, best_off = 1e300, worst_on = 0, worst_off = 0;
  int clear = 0;  // rounds in a row with the same clear winner
  int winner = 0;
  for (int r = 0; r < kRounds && clear < 2; ++r) {
    const double a = time_round(*on, s, rng, model.n_vocab());
    const double b = time_round(*off, s, rng, model.n_vocab());
    if (a < 0 || b < 0) {
      why = "a probe decode failed";
      return false;
    }
    best_on = std::min(best_on, a);
    best_off = std::min(best_off, b);
    worst_on = std::max(worst_on, a);
    worst_off = std::max(worst_off, b);
    const int w = a * kClearMargin < b ? 1 : b * kClearMargin < a ? -1 : 0;
    clear = w != 0 && (clear == 0 || w == winner) ? clear + 1 : 0;
    winner = w;
  }
  out = {best_on, best_off};
  steady = worst_on <= best_on * steady_spread && worst_off <= best_off * steady_spread;
  return true;
}

}  // namespace

ProbeShape probe_shape(const ExecutorParams &p) {
  ProbeShape s;
  s.seqs = std::max(1u, p.n_seq_max);
  s.chunk = std::min(kProbeChunk, std::max(1u, p.n_batch));
  const std::uint32_t cells = std::min(p.n_ctx, kProbeCells);
  const std::uint32_t room = cells > s.seqs + s.chunk ? cells - s.seqs - s.chunk : 0;
  s.depth = std::clamp(room / s.seqs, 1u, kProbeDepth);
  return s;
}

AttentionChoice choose_attention(const Model &model, const ExecutorParams &p, int threads) {
  AttentionChoice c;
  switch (p.flash_attn) {
    case FlashAttention::enabled:
      c.type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
      c.reported = FlashAttention::enabled;
      return c;
    case FlashAttention::disabled:
      c.type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
      c.reported = FlashAttention::disabled;
      return c;
    case FlashAttention::automatic: break;
  }
  // A quantised cache runs with flash attention only: the variable cannot turn it off.
  const char *env = kv_quantised(p.kv_type) ? nullptr : std::getenv("WEFT_FLASH_ATTN");
  if (env != nullptr && *env != '\0') {
    const std::string v(env);
    if (v == "on" || v == "off") {
      c.type = v == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
      c.reported = v == "on" ? FlashAttention::enabled : FlashAttention::disabled;
      c.source = AttentionSource::environment;
      return c;
    }
    if (v != "auto") log_warning(fmt::format("WEFT_FLASH_ATTN = '{}' is not on, off or auto: ignored", v));
  }
  if (model.impl()->on_gpu || kv_quantised(p.kv_type)) {
    c.type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    c.reported = FlashAttention::automatic;
    c.source = model.impl()->on_gpu ? AttentionSource::gpu : AttentionSource::kv_type;
    return c;
  }
  c.shape = probe_shape(p);
  const std::string key = probe_key(model, p, c.shape, threads);
  std::lock_guard lock(probes_mu);
  Timings t{};
  const std::string dir = cache_dir(p);
  if (auto it = probes.find(key); it != probes.end()) {
    t = it->second;
    c.source = AttentionSource::remembered;
  } else if (auto disk = dir.empty() ? std::map<std::string, Timings>{} : read_cache(dir + "/" + kCacheFile);
             disk.count(key) != 0) {
    t = probes[key] = disk[key];
    c.source = AttentionSource::remembered;
  } else {
    std::string why;
    bool steady = false;
    if (!measure(model, p, c.shape, threads, t, steady, why)) {
      log_warning(fmt::format("attention probe ({} conversations x {} cells): {}; flash attention stays off",
                              c.shape.seqs, c.shape.depth, why));
      c.source = AttentionSource::fallback;
      return c;
    }
    probes[key] = t;
    c.source = AttentionSource::measured;
    if (!steady) {
      log_warning(fmt::format("attention probe ({} conversations x {} cells): rounds varied beyond {}x (a busy "
                              "machine); using {:.2f} ms with flash attention vs {:.2f} ms without, not kept on disk",
                              c.shape.seqs, c.shape.depth, steady_spread, t.first, t.second));
    } else if (!dir.empty()) {
      write_cache(dir, key, t);
    }
  }
  c.flash_ms = t.first;
  c.plain_ms = t.second;
  const bool flash = flash_attention_chosen(t.first, t.second);
  c.type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  c.reported = flash ? FlashAttention::enabled : FlashAttention::disabled;
  return c;
}

void forget_attention_probes() {
  std::lock_guard lock(probes_mu);
  probes.clear();
}

void set_attention_probe_spread(double spread) {
  std::lock_guard lock(probes_mu);
  steady_spread = spread > 0 ? spread : kSteadySpread;
}

}  // namespace weft::detail
