// SamplerParams::json_schema through the executor: at temperature 1 on the
// tiny model, over 40 seeds and bounded schemas (so every grammar is finite),
// every generation ends with end-of-generation and its text parses as JSON
// (nlohmann, not llama.cpp) that a checker of the schema's keywords accepts;
// a conversation forked mid-generation, and one saved and loaded
// mid-generation, keep the constraint.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "reference.hpp"
#include "weft/executor.hpp"

namespace {

using Json = nlohmann::json;
using weft_test::random_tokens;
using weft_test::run_until_idle;

std::size_t code_points(const std::string &s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The keywords the schemas below use; "" when `v` satisfies `s`, else why not.
std::string violation(const Json &v, const Json &s) {
  if (s.contains("anyOf")) {
    for (const auto &alt : s["anyOf"])
      if (violation(v, alt).empty()) return {};
    return "no anyOf alternative fits " + v.dump();
  }
  if (s.contains("const") && v != s["const"]) return v.dump() + " is not the const " + s["const"].dump();
  if (s.contains("enum")) {
    bool in = false;
    for (const auto &e : s["enum"]) in = in || e == v;
    if (!in) return v.dump() + " is not in the enum";
  }
  const std::string type = s.value("type", "");
  if (type == "object") {
    if (!v.is_object()) return v.dump() + " is not an object";
    for (const auto &r : s.value("required", Json::array()))
      if (!v.contains(r.get<std::string>())) return "missing required " + r.dump();
    for (const auto &[k, x] : v.items()) {
      if (!s["properties"].contains(k)) return "property " + k + " is not in the schema";
      if (auto why = violation(x, s["properties"][k]); !why.empty()) return k + ": " + why;
    }
  } else if (type == "array") {
    if (!v.is_array()) return v.dump() + " is not an array";
    if (v.size() < s.value("minItems", 0u) || v.size() > s.value("maxItems", 1000u))
      return v.dump() + " has a length outside the bounds";
    for (const auto &x : v)
      if (auto why = violation(x, s["items"]); !why.empty()) return why;
  } else if (type == "string") {
    if (!v.is_string()) return v.dump() + " is not a string";
    const auto n = code_points(v.get<std::string>());
    if (n < s.value("minLength", 0u) || n > s.value("maxLength", 1000u)) return v.dump() + " has a length outside the bounds";
  } else if (type == "integer") {
    if (!v.is_number_integer()) return v.dump() + " is not an integer";
    if (v.get<long long>() < s.value("minimum", -(1LL << 62)) || v.get<long long>() > s.value("maximum", 1LL << 62))
      return v.dump() + " is outside the bounds";
  } else if (type == "boolean") {
    if (!v.is_boolean()) return v.dump() + " is not a boolean";
  } else if (type == "null") {
    if (!v.is_null()) return v.dump() + " is not null";
  }
  return {};
}

// llama.cpp's grammars see code points, decoded leniently (llama-grammar.cpp
// decode_utf8: the lead byte gives the length, overlong forms accepted), so a
// token whose bytes are an overlong form (E0 94 97 for U+0517, among the tiny
// model's byte tokens) passes a string's `char` rule while strict UTF-8
// parsers refuse it. This re-encodes the code points the grammar saw; the
// number of texts it changed is printed.
std::string as_grammar_saw(const std::string &text) {
  static const int kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const int n = kLen[b >> 4];
    std::uint32_t cp = b & (n == 1 ? 0xFFu : n == 2 ? 0x1Fu : n == 3 ? 0x0Fu : 0x07u);
    std::size_t j = i + 1;
    for (int k = 1; k < n && j < text.size() && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80; ++k, ++j)
      cp = (cp << 6) | (static_cast<unsigned char>(text[j]) & 0x3F);
    i = j;
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

int g_reencoded = 0;

// Whether `raw` is JSON that fits `schema`; the reason when not.
::testing::AssertionResult fits(const std::string &raw, const std::string &schema) {
  const std::string text = as_grammar_saw(raw);
  g_reencoded += text != raw;
  Json v;
  try {
    v = Json::parse(text);
  } catch (const Json::exception &e) {
    return ::testing::AssertionFailure() << "not JSON (" << e.what() << "): '" << text << "'";
  }
  if (auto why = violation(v, Json::parse(schema)); !why.empty())
    return ::testing::AssertionFailure() << why << " in '" << text << "'";
  return ::testing::AssertionSuccess();
}

// Bounded: every string, array and number has a maximum length.
const std::vector<std::string> kSchemas = {
    R"({"type": "object", "properties": {"mood": {"enum": ["calm", "angry", "sly"]},
        "name": {"type": "string", "maxLength": 8}, "level": {"type": "integer", "minimum": 1, "maximum": 20},
        "armed": {"type": "boolean"}}, "required": ["mood", "name", "level", "armed"], "additionalProperties": false})",
    R"({"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 5}, "minItems": 1, "maxItems": 3})",
    R"({"type": "object", "properties": {"action": {"const": "give"},
        "items": {"type": "array", "items": {"enum": ["sword", "bread", "coin"]}, "maxItems": 2},
        "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 6}]}},
        "required": ["action", "items"], "additionalProperties": false})",
};

weft::ExecutorParams params() { return {.n_ctx = 2048, .n_batch = 64, .n_seq_max = 8, .n_threads = 2}; }

TEST(JsonSchemaGeneration, RandomGenerationsEndAndFitTheirSchema) {
  const auto &m = weft_test::tiny();
  constexpr unsigned kSeeds = 40, kPerExecutor = 8;
  for (unsigned first = 1; first <= kSeeds; first += kPerExecutor) {
    weft::Executor ex(m, params());
    std::vector<weft::Conversation> convs;
    std::vector<weft::Generation> gens;
    for (unsigned seed = first; seed < first + kPerExecutor; ++seed) {
      std::mt19937 rng(seed);
      convs.push_back(ex.create());
      convs.back().prompt(random_tokens(rng, m, 3 + static_cast<int>(rng() % 10), true));
      gens.push_back(convs.back().generate(
          {.max_tokens = 400,
           .sampler = weft::SamplerParams{.temperature = 1.0f, .seed = seed, .json_schema = kSchemas[seed % kSchemas.size()]}}));
    }
    run_until_idle(ex);
    for (unsigned i = 0; i < kPerExecutor; ++i) {
      const unsigned seed = first + i;
      const auto r = gens[i].result();
      EXPECT_EQ(r.reason, weft::FinishReason::end_of_generation) << "seed " << seed << ": " << r.text;
      EXPECT_TRUE(fits(r.text, kSchemas[seed % kSchemas.size()])) << "seed " << seed;
    }
  }
  std::printf("%u generations fit their schema (%d of them re-encoded from overlong UTF-8)\n", kSeeds, g_reencoded);
}

// The conversation's own sampler (so its grammar position travels with a fork
// or a save) generates; mid-way a fork continues it, and a save is loaded
// and continues it: parent, child and loaded copy each end in schema-valid JSON.
TEST(JsonSchemaGeneration, ForkAndLoadMidGenerationKeepTheConstraint) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 4; ++seed) {
    const std::string &schema = kSchemas[seed % kSchemas.size()];
    std::mt19937 rng(seed);
    weft::Executor ex(m, params());
    auto c = ex.create();
    c.set_sampler({.temperature = 1.0f, .seed = seed, .json_schema = schema});
    c.prompt(random_tokens(rng, m, 6, true));
    auto g = c.generate({.max_tokens = 400});
    for (int i = 0; i < 4; ++i) ex.step();
    ASSERT_FALSE(g.done()) << "seed " << seed << ": finished before the fork: " << g.text();
    const std::string before = g.text();
    ASSERT_FALSE(before.empty());
    auto child = c.fork();
    const auto saved = c.save();
    ASSERT_GT(saved.size(), 12u);
    EXPECT_EQ(saved[8], 7) << "a sampler with a json_schema is state version 7 (docs/STATE_FORMAT.md)";
    auto loaded = ex.load(saved);
    const auto loaded_gen = loaded.generation();  // the running one, present until it finishes
    ASSERT_TRUE(loaded_gen.has_value());
    auto child_gen = child.generate({.max_tokens = 400});
    run_until_idle(ex);
    for (const auto &[what, r] : {std::pair{"parent", g.result()}, std::pair{"loaded", loaded_gen->result()}}) {
      EXPECT_EQ(r.reason, weft::FinishReason::end_of_generation) << what << " seed " << seed << ": " << r.text;
      EXPECT_EQ(r.text.substr(0, before.size()), before) << what;
      EXPECT_TRUE(fits(r.text, schema)) << what << " seed " << seed;
    }
    // The child's generation starts where the parent's stood at the fork.
    const auto rc = child_gen.result();
    EXPECT_EQ(rc.reason, weft::FinishReason::end_of_generation) << "child seed " << seed << ": " << rc.text;
    EXPECT_TRUE(fits(before + rc.text, schema)) << "child seed " << seed << " ('" << before << "' + '" << rc.text << "')";
  }
}

}  // namespace
