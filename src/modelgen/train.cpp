// weft::train_npc_model: trains the `npc` preset on weft's own llama
// training graph (train_graph.hpp: ggml + ggml-opt, every tensor trained),
// with weft's own corpus, window order and learning-rate schedule, and writes
// it as the same llama-architecture GGUF the random presets use.
#include <ggml-opt.h>
#include <gguf.h>
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
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
#include "modelgen/train_graph.hpp"
#include "weft/train.hpp"

namespace weft {
namespace {

// Bumped whenever the corpus grammar or the trainer changes what a given
// TrainParams produces, so cached models are not reused across versions.
// 2: the fitted vocabulary (npc_vocab.hpp) by default.
// 3: 6 epochs by default (the key holds the epochs too; bumped for clarity).
// 4: weft's own training graph (every tensor trains), small-scale init.
// 5: the hand-written backward pass (same gradients, other rounding).
constexpr int kTrainerVersion = 5;

struct ModelFree {
  void operator()(llama_model *m) const { llama_model_free(m); }
};

// Removes a scratch file on every exit path.
struct ScratchFile {
  std::string path;
  ~ScratchFile() { detail::remove_file_quietly(path); }
};

// Warm-up then cosine decay; ggml-opt asks once per optimizer step.
struct Schedule {
  const TrainParams *p;
  std::int64_t total_steps = 1;
  std::int64_t step = 0;

  float lr_at(std::int64_t s) const {
    if (s < p->warmup_steps) return p->lr * static_cast<float>(s + 1) / static_cast<float>(p->warmup_steps);
    const double t = std::min(1.0, double(s - p->warmup_steps) / double(std::max<std::int64_t>(1, total_steps - p->warmup_steps)));
    return p->lr_min + (p->lr - p->lr_min) * static_cast<float>(0.5 * (1.0 + std::cos(std::numbers::pi * t)));
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
  if (p.preset != ModelPreset::npc && p.preset != ModelPreset::npc_draft) {
    bad(fmt::format("TrainParams.preset = {} (expected npc or npc-draft)", preset_name(p.preset)));
  }
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
  const bool divisor = p.n_batch >= 1 && p.n_batch <= p.n_ctx && p.n_ctx % p.n_batch == 0;
  const bool whole = p.n_batch >= p.n_ctx && p.n_batch % p.n_ctx == 0 && p.n_batch / p.n_ctx <= 64;
  if (!divisor && !whole) {
    bad(fmt::format("TrainParams.n_batch = {} (expected a divisor of n_ctx = {}, or 1 .. 64 whole windows of it)",
                    p.n_batch, p.n_ctx));
  }
  if (p.epochs < 1 || p.epochs > 1000) bad(fmt::format("TrainParams.epochs = {} (expected 1 .. 1000)", p.epochs));
  if (!(p.lr > 0 && p.lr <= 1)) bad(fmt::format("TrainParams.lr = {} (expected in (0, 1])", p.lr));
  if (!(p.lr_min > 0 && p.lr_min <= p.lr)) bad(fmt::format("TrainParams.lr_min = {} (expected in (0, lr])", p.lr_min));
  if (p.warmup_steps < 1) bad(fmt::format("TrainParams.warmup_steps = {} (expected >= 1)", p.warmup_steps));
  if (!(p.weight_decay >= 0 && p.weight_decay <= 1)) {
    bad(fmt::format("TrainParams.weight_decay = {} (expected 0 .. 1)", p.weight_decay));
  }
  if (!(p.init_std_embd >= 0 && p.init_std_embd <= 10 && p.init_std_kv >= 0 && p.init_std_kv <= 10)) {
    bad(fmt::format("TrainParams.init_std_embd = {}, init_std_kv = {} (expected 0 .. 10)", p.init_std_embd,
                    p.init_std_kv));
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

std::pair<double, double> loss_accuracy(const detail::NpcTally &t) { return {t.loss(), t.accuracy()}; }

// The inputs and next-token labels of `count` windows, one after another.
void gather(const std::vector<std::vector<llama_token>> &w, const std::size_t *idx, std::size_t count, int n_ctx,
            std::vector<std::int32_t> &tokens, std::vector<std::int32_t> &labels) {
  tokens.resize(count * static_cast<std::size_t>(n_ctx));
  labels.resize(tokens.size());
  for (std::size_t i = 0; i < count; ++i) {
    const auto &src = w[idx[i]];
    std::copy(src.begin(), src.begin() + n_ctx, tokens.begin() + static_cast<std::ptrdiff_t>(i * n_ctx));
    std::copy(src.begin() + 1, src.end(), labels.begin() + static_cast<std::ptrdiff_t>(i * n_ctx));
  }
}

// Forward passes only over the held-out windows (whole steps of n_seq).
std::pair<double, double> evaluate(detail::NpcGraph &graph, const std::vector<std::vector<llama_token>> &w, int n_ctx,
                                   std::size_t n_seq) {
  std::vector<std::size_t> order(w.size());
  std::iota(order.begin(), order.end(), 0);
  detail::NpcTally eval;
  std::vector<std::int32_t> tokens, labels;
  for (std::size_t first = 0; first + n_seq <= w.size(); first += n_seq) {
    gather(w, order.data() + first, n_seq, n_ctx, tokens, labels);
    graph.forward(tokens.data(), labels.data(), &eval);
  }
  return loss_accuracy(eval);
}

// Writes the trained weights (in `data`, laid out as the initial GGUF `g`)
// with weft's provenance keys, atomically.
void write_final(gguf_context *g, ggml_context *data, const TrainParams &p, const std::string &key) {
  const char *preset = preset_name(p.preset);
  gguf_set_val_str(g, "general.name", fmt::format("weft-{}-seed{}", preset, p.seed).c_str());
  gguf_set_val_str(g, "weft.preset", preset);
  gguf_set_val_u64(g, "weft.seed", p.seed);
  gguf_set_val_u64(g, "weft.corpus_seed", p.corpus.seed);
  gguf_set_val_str(g, "weft.train_key", key.c_str());

  detail::TempFile file(p.out);
  detail::write_gguf_meta(file, g);
  for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
    const ggml_tensor *t = ggml_get_tensor(data, gguf_get_tensor_name(g, i));
    if (t == nullptr) detail::fail(Errc::io, fmt::format("the trained model lost tensor {}", i));
    detail::write_gguf_tensor(file, g, t->data, ggml_nbytes(t));
  }
  file.commit();
}

}  // namespace

TrainParams npc_train_params(ModelPreset preset) {
  TrainParams t;
  t.preset = preset;
  if (preset == ModelPreset::npc) return t;
  if (preset != ModelPreset::npc_draft) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("npc_train_params({}): not a trained preset (expected npc or npc-draft)",
                             preset_name(preset)));
  }
  // Several times cheaper per token than npc, with npc's 32-wide heads; two
  // layers, because copying a name or price from the header takes a head
  // that reads another head's output.
  t.n_layer = 2;
  t.n_embd = 64;
  t.n_head = 2;
  t.n_ff = 192;
  return t;
}

std::string npc_model_key(const TrainParams &p) {
  std::string spec =
      fmt::format("v{} corpus={}:{} seed={} shape={}x{}x{}x{} ctx={}/{} epochs={} lr={}:{}:{} wd={} eval={}",
                  kTrainerVersion, p.corpus.seed, p.corpus.target_bytes, p.seed, p.n_layer, p.n_embd, p.n_head,
                  p.n_ff, p.n_ctx, p.n_batch, p.epochs, p.lr, p.lr_min, p.warmup_steps, p.weight_decay,
                  p.eval_share);
  // Default init scales add nothing, so default keys stay as they were.
  if (p.init_std_embd != 0 || p.init_std_kv != 0) spec += fmt::format(" init={}:{}", p.init_std_embd, p.init_std_kv);
  // The draft preset names itself, so its file never stands in for an npc
  // trained to the same shape; npc keys stay as they were.
  if (p.preset != ModelPreset::npc) spec += fmt::format(" preset={}", preset_name(p.preset));
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

  // Initial weights go through the same writer as the random presets; the
  // trained ones are written back into the same GGUF layout.
  ScratchFile init{fmt::format("{}.init.{}.gguf", p.out, ::getpid())};
  std::error_code ec_ignored;
  ModelShape shape{p.n_layer, p.n_embd, p.n_head, p.n_head, p.n_ff, p.n_ctx, false, WeightType::f32};
  // Every tensor trains, so all start at the preset's small scale (std 0.02;
  // init_std_embd / init_std_kv override it for token_embd and attn_k/attn_v).
  detail::write_random_model({.shape = shape,
                              .type = WeightType::f32,
                              .preset = preset_name(p.preset),
                              .seed = p.seed,
                              .out = init.path,
                              .vocab = p.vocab,
                              .fitted_vocab = p.vocab.empty(),
                              .on_progress = {},
                              .std_embd = p.init_std_embd,
                              .std_kv = p.init_std_kv});

  ggml_context *data_ctx = nullptr;
  gguf_init_params gp{/*no_alloc=*/false, &data_ctx};
  detail::GgufPtr g(gguf_init_from_file(init.path.c_str(), gp));
  detail::GgmlPtr data(data_ctx);
  if (!g) detail::fail(Errc::io, fmt::format("could not read back the initial npc model '{}'", init.path));
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.vocab_only = true;  // the tokenizer; the weights live in `data`
  std::unique_ptr<llama_model, ModelFree> model(llama_model_load_from_file(init.path.c_str(), mp));
  if (!model) detail::fail(Errc::io, fmt::format("could not load the initial npc model: {}", detail::take_llama_error()));
  // The weights now live in memory: drop the file at once, so a run killed
  // during the minutes of training leaves nothing next to `out`.
  std::filesystem::remove(detail::u8_path(init.path), ec_ignored);
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
  // Sequences of n_ctx tokens, n_batch / n_ctx of them per optimizer step; a
  // smaller n_batch trains on sequences of n_batch tokens (less context).
  const int seq_len = std::min(p.n_ctx, p.n_batch);
  const std::size_t n_seq = static_cast<std::size_t>(p.n_batch / seq_len);
  const auto train_w = windows(train_stream, seq_len);
  const auto eval_w = windows(eval_stream, seq_len);
  if (train_w.size() < n_seq || eval_w.size() < n_seq) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("CorpusParams.target_bytes = {} gives {} training and {} held-out windows of {} tokens; "
                             "need at least {} of each", p.corpus.target_bytes, train_w.size(), eval_w.size(), seq_len,
                             n_seq));
  }
  const std::size_t steps_per_epoch = train_w.size() / n_seq;
  report.train_tokens = static_cast<std::int64_t>(steps_per_epoch) * p.n_batch;
  report.eval_tokens = static_cast<std::int64_t>(eval_w.size() / n_seq) * p.n_batch;

  const int threads = p.n_threads > 0 ? p.n_threads : std::max(1u, std::thread::hardware_concurrency());
  Schedule schedule{&p, static_cast<std::int64_t>(steps_per_epoch) * p.epochs, 0};
  detail::NpcGraph graph(g.get(), data.get(),
                         {.n_ctx = seq_len, .n_seq = static_cast<int>(n_seq), .n_threads = threads,
                          .get_opt_pars = &Schedule::call, .get_opt_pars_ud = &schedule});

  std::tie(report.eval_loss_before, report.eval_accuracy_before) = evaluate(graph, eval_w, seq_len, n_seq);

  // Progress and cancellation every 4 windows or so; weft's own shuffled
  // order every epoch.
  const std::size_t steps_per_report = std::max<std::size_t>(1, 4 / n_seq);
  detail::SplitMix64 rng{p.seed ^ 0x747261696e6f7264ull};
  std::vector<std::size_t> order(train_w.size());
  std::vector<std::int32_t> tokens, labels;
  const double total_steps = double(steps_per_epoch) * p.epochs;
  for (int epoch = 0; epoch < p.epochs; ++epoch) {
    std::iota(order.begin(), order.end(), 0);
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next() % i]);
    detail::NpcTally train;
    for (std::size_t step = 0; step < steps_per_epoch; ++step) {
      if (step % steps_per_report == 0 && p.cancel && p.cancel()) {
        detail::fail(Errc::cancelled, "training the npc model was cancelled");
      }
      gather(train_w, order.data() + step * n_seq, n_seq, seq_len, tokens, labels);
      graph.train_step(tokens.data(), labels.data(), &train);
      const bool last = step + 1 == steps_per_epoch;
      if (p.on_progress && ((step + 1) % steps_per_report == 0 || last)) {
        TrainProgress pr;
        pr.epoch = epoch;
        pr.epochs = p.epochs;
        pr.fraction = last && epoch + 1 == p.epochs ? 1.0 : (double(epoch) * double(steps_per_epoch) + double(step + 1)) / total_steps;
        std::tie(pr.train_loss, pr.train_accuracy) = loss_accuracy(train);
        p.on_progress(pr);
      }
    }
    std::tie(report.train_loss, report.train_accuracy) = loss_accuracy(train);
  }
  report.optimizer_steps = schedule.step;
  std::tie(report.eval_loss, report.eval_accuracy) = evaluate(graph, eval_w, seq_len, n_seq);

  graph.store(data.get());
  write_final(g.get(), data.get(), p, npc_model_key(p));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace weft
