// The adapter tests' fixture (test_adapters*.cpp): a deeper random model,
// two LoRAs and a control vector made for it, and raw llama.cpp decoding the
// same tokens under the same setting as the reference.
#pragma once

#include <gguf.h>
#include <gtest/gtest.h>
#include <llama.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "common.hpp"
#include "core/model_impl.hpp"
#include "modelgen/model_writer.hpp"
#include "reference.hpp"
#include "weft/make_adapter.hpp"

namespace adapter_test {

namespace fs = std::filesystem;
using weft::AdapterKind;
using weft::Token;

constexpr int kLayers = 4;  // deeper than tiny, so control-vector layer ranges matter

struct Files {
  fs::path dir, model, a, b, c;
};

inline const Files &files() {
  static const Files made = [] {
    Files f;
    f.dir = weft_test::temp_dir("adapters");
    f.model = f.dir / "deep.gguf";
    weft::detail::write_random_model({.shape = {kLayers, 64, 4, 2, 256, 1024, false, weft::WeightType::f32},
                                      .type = weft::WeightType::f32,
                                      .preset = "adapter-exec-test",
                                      .seed = 11,
                                      .out = f.model.string()});
    auto make = [&](const char *name, AdapterKind kind, std::uint64_t seed) {
      const auto out = f.dir / name;
      weft::make_adapter({.base = f.model.string(), .out = out.string(), .kind = kind, .seed = seed});
      return out;
    };
    f.a = make("a.gguf", AdapterKind::lora, 1);
    f.b = make("b.gguf", AdapterKind::lora, 2);
    f.c = make("c.gguf", AdapterKind::control_vector, 3);
    return f;
  }();
  return made;
}

inline const weft::Model &deep() {
  static const weft::Model m = weft::Model::load({.path = files().model.string()});
  return m;
}

// --- The independent path: raw llama.cpp, its own adapter loads ---

struct RefUse {
  fs::path path;
  float scale = 1;
  int l0 = -1, l1 = -1;
};
using RefSetting = std::vector<RefUse>;
struct RefPart {
  std::uint32_t until;  // positions before this one (and after the last part's) use `setting`
  RefSetting setting;
};

inline llama_adapter_lora *ref_lora(const fs::path &p) {
  static std::map<fs::path, llama_adapter_lora *> loaded;  // freed with the model
  auto &l = loaded[p];
  if (l == nullptr) l = llama_adapter_lora_init(deep().impl()->model, p.c_str());
  EXPECT_NE(l, nullptr);
  return l;
}

// direction.<layer> tensors, read with gguf directly (not weft's loader).
inline std::vector<float> ref_cvec(const fs::path &p) {
  ggml_context *data = nullptr;
  gguf_context *g = gguf_init_from_file(p.c_str(), {false, &data});
  EXPECT_NE(g, nullptr);
  std::vector<float> out(64 * (kLayers - 1), 0.0f);
  for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
    const std::string name = gguf_get_tensor_name(g, i);
    const int layer = std::stoi(name.substr(name.find('.') + 1));
    const auto *t = ggml_get_tensor(data, name.c_str());
    for (int j = 0; j < 64; ++j) out[(layer - 1) * 64 + j] += static_cast<const float *>(t->data)[j];
  }
  gguf_free(g);
  ggml_free(data);
  return out;
}

inline void ref_apply(llama_context *ctx, const RefSetting &s) {
  std::vector<llama_adapter_lora *> loras;
  std::vector<float> scales;
  std::vector<float> cvec;
  int l0 = -1, l1 = -1;
  for (const RefUse &u : s) {
    if (u.path == files().c) {
      const auto dir = ref_cvec(u.path);
      if (cvec.empty()) cvec.assign(dir.size(), 0.0f);
      const int a = u.l0 < 0 ? 1 : u.l0, b = u.l1 < 0 ? kLayers - 1 : u.l1;
      for (int l = a; l <= b; ++l) {
        for (int j = 0; j < 64; ++j) cvec[(l - 1) * 64 + j] += u.scale * dir[(l - 1) * 64 + j];
      }
      l0 = l0 < 0 ? a : std::min(l0, a);
      l1 = std::max(l1, b);
    } else {
      loras.push_back(ref_lora(u.path));
      scales.push_back(u.scale);
    }
  }
  ASSERT_EQ(llama_set_adapters_lora(ctx, loras.empty() ? nullptr : loras.data(), loras.size(),
                                    scales.empty() ? nullptr : scales.data()),
            0);
  ASSERT_EQ(llama_set_adapter_cvec(ctx, cvec.empty() ? nullptr : cvec.data(), cvec.size(), 64, l0, l1), 0);
}

// Last-token logits of `tokens` decoded alone, each part under its setting.
inline std::vector<float> ref_logits(const std::vector<Token> &tokens, const std::vector<RefPart> &parts, int chunk = 32) {
  auto p = weft_test::reference_context_params();
  p.n_ctx = 1024;
  p.n_batch = p.n_ubatch = 32;
  p.n_seq_max = 1;
  p.n_threads = p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(deep().impl()->model, p);
  EXPECT_NE(ctx, nullptr);
  llama_batch batch = llama_batch_init(32, 0, 1);
  std::size_t pos = 0;
  for (std::size_t k = 0; k < parts.size() && pos < tokens.size(); ++k) {
    const std::size_t until = k + 1 == parts.size() ? tokens.size() : std::min<std::size_t>(parts[k].until, tokens.size());
    ref_apply(ctx, parts[k].setting);
    while (pos < until) {
      batch.n_tokens = 0;
      for (; pos < until && batch.n_tokens < chunk; ++pos) {
        const int i = batch.n_tokens++;
        batch.token[i] = tokens[pos];
        batch.pos[i] = static_cast<llama_pos>(pos);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = pos + 1 == tokens.size();
      }
      EXPECT_EQ(llama_decode(ctx, batch), 0);
    }
  }
  const float *l = llama_get_logits_ith(ctx, -1);
  std::vector<float> out(l, l + deep().n_vocab());
  llama_batch_free(batch);
  llama_free(ctx);
  return out;
}

// llama.cpp's own noise under a setting: sequences decoded beside others in
// batches of every shape vs. each alone, all under the setting, as
// weft_test::batch_noise_floor measures it for the base model. A LoRA adds
// matmuls whose rounding depends on the batch shape too.
inline double setting_floor(const RefSetting &s) {
  return weft_test::measure_batch_noise(
      deep(), 8, [&](llama_context *ctx) { ref_apply(ctx, s); },
      [&](const std::vector<Token> &t) { return ref_logits(t, {{UINT32_MAX, s}}); });
}

// Seconds each, and every test process needs some: cached next to the test
// models by the model's fingerprint and the setting (the files are the same
// bytes in every process: seeded).
inline double cached_floor(const RefSetting &s) {
  std::string key = fmt::format("{:016x}", deep().fingerprint()) + weft_test::reference_kernel_key();
  for (const RefUse &u : s) key += fmt::format(";{}:{}:{}:{}", u.path.filename().string(), u.scale, u.l0, u.l1);
  return weft_test::cached_measurement("adapter-floors.txt", key, [&] { return setting_floor(s); });
}

// 8x the larger floor, as logits_tolerance does for the base model.
inline double tolerance(const std::vector<RefPart> &parts) {
  // (Not weft_test::batch_noise_floor: its cache holds the tiny model's.)
  double tol = 8.0 * cached_floor({});
  for (const RefPart &p : parts) tol = std::max(tol, 8.0 * cached_floor(p.setting));
  return tol;
}

// --- The same settings through weft ---

struct Settings {
  weft::Adapter a, b, c;
  std::vector<RefSetting> ref;
  std::vector<std::vector<weft::AdapterUse>> uses;
};

inline Settings settings(const weft::Model &m) {
  Settings s{m.load_adapter(files().a), m.load_adapter(files().b), m.load_adapter(files().c), {}, {}};
  const auto &f = files();
  auto add = [&](RefSetting r, std::vector<weft::AdapterUse> u) {
    s.ref.push_back(std::move(r));
    s.uses.push_back(std::move(u));
  };
  add({}, {});
  add({{f.a}}, {{s.a}});
  add({{f.b, 0.7f}}, {{s.b, 0.7f}});
  add({{f.a, 0.5f}, {f.b, 1.5f}}, {{s.b, 1.5f}, {s.a, 0.5f}});  // order does not matter
  add({{f.c}}, {{s.c}});
  add({{f.c, 2.0f, 2, 3}}, {{s.c, 2.0f, 2, 3}});
  add({{f.a}, {f.c, 1.0f, 1, 2}}, {{s.a}, {s.c, 1.0f, 1, 2}});
  return s;
}

inline weft::ExecutorParams params(std::uint32_t n_seq_max = 8) {
  weft::ExecutorParams p;
  p.n_ctx = 2048;
  p.n_batch = 64;
  p.n_seq_max = n_seq_max;
  p.n_threads = 2;
  return p;
}

// A conversation and what the reference must decode for it.
struct Tracked {
  weft::Conversation conv;
  std::vector<RefPart> parts;
  void set(const Settings &s, std::size_t k) {
    conv.set_adapters(s.uses[k]);
    const std::uint32_t n = conv.n_tokens();
    if (!parts.empty() && parts.back().until > n) parts.back().until = n;
    if (!parts.empty() && parts.back().until == 0) parts.pop_back();
    if (!parts.empty()) parts.back().until = n;
    parts.push_back({UINT32_MAX, s.ref[k]});
  }
  ::testing::AssertionResult matches() const {
    const double tol = tolerance(parts);
    const auto got = conv.logits();
    const auto want = ref_logits(conv.tokens(), parts);
    const double e = weft_test::nmse(got, want);
    if (e <= tol) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "conversation " << conv.id() << ": nmse " << e << " > " << tol;
  }
};


}  // namespace adapter_test
