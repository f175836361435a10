// weft::train_npc_model: trains the `npc` preset with llama.cpp's public
// training API (llama_opt_init / llama_opt_epoch), as llama.cpp's
// examples/training/finetune.cpp does, with weft's own corpus, window order
// and learning-rate schedule.
#include <ggml-opt.h>
#include <gguf.h>
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "modelgen/model_writer.hpp"
#include "modelgen/splitmix.hpp"
#include "weft/train.hpp"

namespace weft {
namespace {

// Bumped whenever the corpus grammar or the trainer changes what a given
// TrainParams produces, so cached models are not reused across versions.
// 2: the fitted vocabulary (npc_vocab.hpp) by default.
// 3: 6 epochs by default (the key holds the epochs too; bumped for clarity).
constexpr int kTrainerVersion = 3;

struct ModelFree {
  void operator()(llama_model *m) const { llama_model_free(m); }
};
struct ContextFree {
  void operator()(llama_context *c) const { llama_free(c); }
};
struct DatasetFree {
  void operator()(ggml_opt_dataset *d) const { ggml_opt_dataset_free(d); }
};
struct ResultFree {
  void operator()(ggml_opt_result *r) const { ggml_opt_result_free(r); }
};
using DatasetPtr = std::unique_ptr<ggml_opt_dataset, DatasetFree>;
using ResultPtr = std::unique_ptr<ggml_opt_result, ResultFree>;

// Removes a scratch file on every exit path.
struct ScratchFile {
  std::string path;
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

// Warm-up then cosine decay; ggml-opt asks once per optimizer step.
struct Schedule {
  const TrainParams *p;
  std::int64_t total_steps = 1;
  std::int64_t step = 0;

  float lr_at(std::int64_t s) const {
    if (s < p->warmup_steps) return p->lr * static_cast<float>(s + 1) / static_cast<float>(p->warmup_steps);
    const double t = std::min(1.0, double(s - p->warmup_steps) / double(std::max<std::int64_t>(1, total_steps - p->warmup_steps)));
    return p->lr_min + (p->lr - p->lr_min) * static_cast<float>(0.5 * (1.0 + std::cos(M_PI * t)));
  }
  static ggml_opt_optimizer_params call(void *ud) {
    auto *self = static_cast<Schedule *>(ud);
    ggml_opt_optimizer_params r = ggml_opt_get_default_optimizer_params(nullptr);
    r.adamw.alpha = self->lr_at(self->step++);
    r.adamw.wd = self->p->weight_decay;
    return r;
  }
};

void check_params(const TrainParams &p) {
  auto bad = [](const std::string &what) { detail::fail(Errc::invalid_argument, what); };
  if (p.out.empty()) bad("TrainParams.out is empty");
  if (p.n_layer < 1 || p.n_layer > 64) bad(fmt::format("TrainParams.n_layer = {} (expected 1 .. 64)", p.n_layer));
  if (p.n_head < 1 || p.n_embd < 8 || p.n_embd > 4096 || p.n_embd % p.n_head != 0 || (p.n_embd / p.n_head) % 2 != 0) {
    bad(fmt::format("TrainParams.n_embd = {} with n_head = {} (expected 8 .. 4096, divisible by n_head into an even "
                    "head size)", p.n_embd, p.n_head));
  }
  if (p.n_ff < 1 || p.n_ff > 16384) bad(fmt::format("TrainParams.n_ff = {} (expected 1 .. 16384)", p.n_ff));
  if (p.n_ctx < 256 || p.n_ctx > 8192 || p.n_ctx % 256 != 0) {
    bad(fmt::format("TrainParams.n_ctx = {} (expected a multiple of 256 in 256 .. 8192)", p.n_ctx));
  }
  if (p.n_batch < 1 || p.n_ctx % p.n_batch != 0) {
    bad(fmt::format("TrainParams.n_batch = {} (expected a divisor of n_ctx = {})", p.n_batch, p.n_ctx));
  }
  if (p.epochs < 1 || p.epochs > 1000) bad(fmt::format("TrainParams.epochs = {} (expected 1 .. 1000)", p.epochs));
  if (!(p.lr > 0 && p.lr <= 1)) bad(fmt::format("TrainParams.lr = {} (expected in (0, 1])", p.lr));
  if (!(p.lr_min > 0 && p.lr_min <= p.lr)) bad(fmt::format("TrainParams.lr_min = {} (expected in (0, lr])", p.lr_min));
  if (p.warmup_steps < 1) bad(fmt::format("TrainParams.warmup_steps = {} (expected >= 1)", p.warmup_steps));
  if (!(p.weight_decay >= 0 && p.weight_decay <= 1)) {
    bad(fmt::format("TrainParams.weight_decay = {} (expected 0 .. 1)", p.weight_decay));
  }
  if (!(p.eval_share > 0 && p.eval_share <= 0.5f)) {
    bad(fmt::format("TrainParams.eval_share = {} (expected in (0, 0.5])", p.eval_share));
  }
  if (p.n_threads < 0) bad(fmt::format("TrainParams.n_threads = {} (expected >= 0)", p.n_threads));
}

// Windows of n_ctx + 1 tokens (input and its shift by one), stride n_ctx.
std::vector<std::vector<llama_token>> windows(const std::vector<llama_token> &stream, int n_ctx) {
  std::vector<std::vector<llama_token>> w;
  for (std::size_t i = 0; i + n_ctx + 1 <= stream.size(); i += n_ctx) {
    w.emplace_back(stream.begin() + i, stream.begin() + i + n_ctx + 1);
  }
  return w;
}

DatasetPtr make_dataset(const std::vector<std::vector<llama_token>> &w, const std::vector<std::size_t> &order,
                        std::size_t first, std::size_t count, int n_ctx) {
  DatasetPtr ds(ggml_opt_dataset_init(GGML_TYPE_I32, GGML_TYPE_I32, n_ctx, n_ctx, static_cast<int64_t>(count), 1));
  auto *data = static_cast<llama_token *>(ggml_opt_dataset_data(ds.get())->data);
  auto *labels = static_cast<llama_token *>(ggml_opt_dataset_labels(ds.get())->data);
  for (std::size_t i = 0; i < count; ++i) {
    const auto &src = w[order[first + i]];
    std::copy(src.begin(), src.begin() + n_ctx, data + i * n_ctx);
    std::copy(src.begin() + 1, src.end(), labels + i * n_ctx);
  }
  return ds;
}

std::pair<double, double> loss_accuracy(ggml_opt_result *r) {
  double loss = 0, acc = 0, unc = 0;
  ggml_opt_result_loss(r, &loss, &unc);
  ggml_opt_result_accuracy(r, &acc, &unc);
  return {loss, acc};
}

// Forward passes only over the held-out windows.
std::pair<double, double> evaluate(llama_context *ctx, const std::vector<std::vector<llama_token>> &w, int n_ctx) {
  std::vector<std::size_t> order(w.size());
  std::iota(order.begin(), order.end(), 0);
  DatasetPtr ds = make_dataset(w, order, 0, w.size(), n_ctx);
  ResultPtr train(ggml_opt_result_init()), eval(ggml_opt_result_init());
  llama_opt_epoch(ctx, ds.get(), train.get(), eval.get(), /*idata_split=*/0, nullptr, nullptr);
  return loss_accuracy(eval.get());
}

// Rewrites llama.cpp's saved GGUF with weft's provenance keys, atomically.
void write_final(const std::string &saved, const TrainParams &p, const std::string &key) {
  ggml_context *data_ctx = nullptr;
  gguf_init_params gp{/*no_alloc=*/false, &data_ctx};
  detail::GgufPtr g(gguf_init_from_file(saved.c_str(), gp));
  detail::GgmlPtr data(data_ctx);
  if (!g) detail::fail(Errc::io, fmt::format("could not read back the trained model '{}'", saved));
  gguf_set_val_str(g.get(), "general.name", fmt::format("weft-npc-seed{}", p.seed).c_str());
  gguf_set_val_str(g.get(), "weft.preset", "npc");
  gguf_set_val_u64(g.get(), "weft.seed", p.seed);
  gguf_set_val_u64(g.get(), "weft.corpus_seed", p.corpus.seed);
  gguf_set_val_str(g.get(), "weft.train_key", key.c_str());

  detail::TempFile file(p.out);
  detail::write_gguf_meta(file, g.get());
  for (int64_t i = 0; i < gguf_get_n_tensors(g.get()); ++i) {
    const ggml_tensor *t = ggml_get_tensor(data.get(), gguf_get_tensor_name(g.get(), i));
    if (t == nullptr) detail::fail(Errc::io, fmt::format("trained model '{}' lost tensor {}", saved, i));
    detail::write_gguf_tensor(file, g.get(), t->data, ggml_nbytes(t));
  }
  file.commit();
}

}  // namespace

std::string npc_model_key(const TrainParams &p) {
  const std::string spec =
      fmt::format("v{} corpus={}:{} seed={} shape={}x{}x{}x{} ctx={}/{} epochs={} lr={}:{}:{} wd={} eval={}",
                  kTrainerVersion, p.corpus.seed, p.corpus.target_bytes, p.seed, p.n_layer, p.n_embd, p.n_head,
                  p.n_ff, p.n_ctx, p.n_batch, p.epochs, p.lr, p.lr_min, p.warmup_steps, p.weight_decay,
                  p.eval_share);
  // The default vocabulary adds nothing, so default keys stay as they were.
  const std::string keyed = p.vocab.empty() ? spec : spec + " vocab=" + p.vocab;
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : keyed) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

TrainReport train_npc_model(const TrainParams &p) {
  const auto t0 = std::chrono::steady_clock::now();
  check_params(p);
  detail::ensure_backend();
  TrainReport report;

  const auto dialogues = make_npc_dialogues(p.corpus);
  const std::size_t n_eval = std::max<std::size_t>(
      1, static_cast<std::size_t>(std::ceil(double(dialogues.size()) * double(p.eval_share))));
  if (dialogues.size() < n_eval + 1) {
    detail::fail(Errc::invalid_argument, fmt::format("CorpusParams.target_bytes = {} gives {} dialogues, too few to "
                                                     "hold out {} for evaluation", p.corpus.target_bytes,
                                                     dialogues.size(), n_eval));
  }

  // Initial weights go through the same writer as the random presets.
  ScratchFile init{fmt::format("{}.init.{}.gguf", p.out, ::getpid())};
  std::error_code ec_ignored;
  ModelShape shape{p.n_layer, p.n_embd, p.n_head, p.n_head, p.n_ff, p.n_ctx, false, WeightType::f32};
  // llama.cpp's training leaves token_embd frozen, and the KV cache cuts the
  // gradient to attn_k/attn_v: those stay at their initial values, so they
  // start at unit scale (random features that neither vanish nor need to grow).
  detail::write_random_model({.shape = shape,
                              .type = WeightType::f32,
                              .preset = "npc",
                              .seed = p.seed,
                              .out = init.path,
                              .vocab = p.vocab,
                              .fitted_vocab = p.vocab.empty(),
                              .on_progress = {},
                              .std_embd = 1.0f,
                              .std_kv = 1.0f / std::sqrt(static_cast<float>(p.n_embd))});

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.load_mode = LLAMA_LOAD_MODE_NONE;  // training writes the weights in place
  std::unique_ptr<llama_model, ModelFree> model(llama_model_load_from_file(init.path.c_str(), mp));
  if (!model) detail::fail(Errc::io, fmt::format("could not load the initial npc model: {}", detail::take_llama_error()));
  // The weights now live in memory: drop the file at once, so a run killed
  // during the minutes of training leaves nothing next to `out`.
  std::filesystem::remove(init.path, ec_ignored);
  const llama_vocab *vocab = llama_model_get_vocab(model.get());

  // One token stream per split; every dialogue starts with BOS, as a prompt does.
  std::vector<llama_token> train_stream, eval_stream;
  std::vector<llama_token> buf;
  for (std::size_t i = 0; i < dialogues.size(); ++i) {
    const auto &d = dialogues[i];
    buf.resize(d.size() + 2);
    const int32_t n = llama_tokenize(vocab, d.data(), static_cast<int32_t>(d.size()), buf.data(),
                                     static_cast<int32_t>(buf.size()), /*add_special=*/true, /*parse_special=*/false);
    if (n < 0) detail::fail(Errc::backend, "llama_tokenize refused a corpus dialogue");
    auto &dst = i + n_eval < dialogues.size() ? train_stream : eval_stream;
    dst.insert(dst.end(), buf.begin(), buf.begin() + n);
  }
  const auto train_w = windows(train_stream, p.n_ctx);
  const auto eval_w = windows(eval_stream, p.n_ctx);
  if (train_w.empty() || eval_w.empty()) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("CorpusParams.target_bytes = {} gives {} training and {} held-out windows of {} tokens; "
                             "need at least one of each", p.corpus.target_bytes, train_w.size(), eval_w.size(), p.n_ctx));
  }
  report.train_tokens = static_cast<std::int64_t>(train_w.size()) * p.n_ctx;
  report.eval_tokens = static_cast<std::int64_t>(eval_w.size()) * p.n_ctx;

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(p.n_ctx);
  cp.n_batch = static_cast<uint32_t>(p.n_batch);
  cp.n_ubatch = static_cast<uint32_t>(p.n_batch);
  cp.n_seq_max = 1;
  const int threads = p.n_threads > 0 ? p.n_threads : std::max(1u, std::thread::hardware_concurrency());
  cp.n_threads = cp.n_threads_batch = threads;
  cp.type_k = cp.type_v = GGML_TYPE_F32;  // OUT_PROD has no f16 backward
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;  // FLASH_ATTN_EXT has no backward pass
  std::unique_ptr<llama_context, ContextFree> ctx(llama_init_from_model(model.get(), cp));
  if (!ctx) detail::fail(Errc::backend, fmt::format("could not create a training context: {}", detail::take_llama_error()));

  const std::int64_t steps_per_window = p.n_ctx / p.n_batch;
  Schedule schedule{&p, static_cast<std::int64_t>(train_w.size()) * steps_per_window * p.epochs, 0};
  llama_opt_params op{};
  op.n_ctx_train = static_cast<uint32_t>(p.n_ctx);
  op.param_filter = llama_opt_param_filter_all;
  op.param_filter_ud = nullptr;
  op.get_opt_pars = &Schedule::call;
  op.get_opt_pars_ud = &schedule;
  op.optimizer_type = GGML_OPT_OPTIMIZER_TYPE_ADAMW;
  llama_opt_init(ctx.get(), model.get(), op);

  std::tie(report.eval_loss_before, report.eval_accuracy_before) = evaluate(ctx.get(), eval_w, p.n_ctx);

  // Small chunks of windows per llama_opt_epoch call: progress and
  // cancellation between them, and weft's own shuffled order every epoch.
  constexpr std::size_t kChunk = 4;
  detail::SplitMix64 rng{p.seed ^ 0x747261696e6f7264ull};
  std::vector<std::size_t> order(train_w.size());
  const double total_windows = double(train_w.size()) * p.epochs;
  for (int epoch = 0; epoch < p.epochs; ++epoch) {
    std::iota(order.begin(), order.end(), 0);
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next() % i]);
    ResultPtr train(ggml_opt_result_init()), eval(ggml_opt_result_init());
    for (std::size_t first = 0; first < order.size(); first += kChunk) {
      if (p.cancel && p.cancel()) detail::fail(Errc::cancelled, "training the npc model was cancelled");
      const std::size_t count = std::min(kChunk, order.size() - first);
      DatasetPtr ds = make_dataset(train_w, order, first, count, p.n_ctx);
      llama_opt_epoch(ctx.get(), ds.get(), train.get(), eval.get(), static_cast<int64_t>(count), nullptr, nullptr);
      if (p.on_progress) {
        TrainProgress pr;
        pr.epoch = epoch;
        pr.epochs = p.epochs;
        pr.fraction = (double(epoch) * double(order.size()) + double(first + count)) / total_windows;
        std::tie(pr.train_loss, pr.train_accuracy) = loss_accuracy(train.get());
        p.on_progress(pr);
      }
    }
    std::tie(report.train_loss, report.train_accuracy) = loss_accuracy(train.get());
  }
  report.optimizer_steps = schedule.step;
  std::tie(report.eval_loss, report.eval_accuracy) = evaluate(ctx.get(), eval_w, p.n_ctx);

  ScratchFile saved{fmt::format("{}.trained.{}.gguf", p.out, ::getpid())};
  llama_model_save_to_file(model.get(), saved.path.c_str());
  write_final(saved.path, p, npc_model_key(p));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace weft
