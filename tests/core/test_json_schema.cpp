// weft::json_schema_to_grammar: each schema of a corpus gives exactly the
// grammar of llama.cpp's *Python* converter (examples/json_schema_to_grammar.py,
// an independent implementation of the same rules) run on the same schema;
// refusals are typed and say where; the cache serves repeats.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "common.hpp"
#include "weft/executor.hpp"
#include "weft/json_schema.hpp"

namespace {

using weft::Errc;
using weft_test::throws_weft;

// What the Python converter prints for `schema`, or nullopt-like "" with
// `why` set when it cannot run.
std::string python_grammar(const std::string &schema, const std::filesystem::path &dir, int i, std::string &why) {
  const auto in = dir / ("schema" + std::to_string(i) + ".json");
  const auto out = dir / ("grammar" + std::to_string(i) + ".gbnf");
  std::ofstream(in) << schema;
  const std::string cmd = std::string("python3 '") + WEFT_LLAMA_SRC + "/examples/json_schema_to_grammar.py' '" +
                          in.string() + "' > '" + out.string() + "' 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    why = "python3 failed: " + std::string(weft_test::read_file(out).data(), weft_test::read_file(out).size());
    return {};
  }
  const auto bytes = weft_test::read_file(out);
  return {bytes.begin(), bytes.end()};
}

// ~20 schemas over the keywords the converter supports.
const std::array<const char *, 22> kCorpus = {
    R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name"]})",
    R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "number"}, "c": {"type": "null"}},
        "required": ["a", "b", "c"], "additionalProperties": false})",
    R"({"type": "object", "properties": {"npc": {"type": "object", "properties": {"mood": {"type": "string"},
        "pos": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"]}}, "required": ["mood"]}}})",
    R"({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3})",
    R"({"type": "array", "items": {"type": "integer"}, "minItems": 2})",
    R"({"type": "array", "items": {"type": "boolean"}, "maxItems": 1})",
    R"({"enum": ["calm", "angry", "sly", 3, null, true]})",
    R"({"type": "object", "properties": {"kind": {"const": "sell"}, "item": {"enum": ["sword", "bread"]}}})",
    R"({"type": "string", "format": "date"})",
    R"({"type": "string", "format": "date-time"})",
    R"({"type": "string", "format": "uuid"})",
    R"({"type": "string", "pattern": "^[A-Z][a-z]{1,8}(-[0-9]+)?$"})",
    R"({"type": "string", "minLength": 2, "maxLength": 12})",
    R"({"type": "integer", "minimum": -5, "maximum": 250})",
    R"({"type": "integer", "exclusiveMinimum": 0})",
    R"({"oneOf": [{"type": "string"}, {"type": "integer", "minimum": 1}]})",
    R"({"anyOf": [{"type": "object", "properties": {"give": {"type": "string"}}, "required": ["give"]},
        {"type": "object", "properties": {"say": {"type": "string"}}, "required": ["say"]}]})",
    R"({"$defs": {"item": {"type": "object", "properties": {"name": {"type": "string"}, "price": {"type": "integer",
        "minimum": 0}}, "required": ["name", "price"]}}, "type": "array", "items": {"$ref": "#/$defs/item"}})",
    R"({"definitions": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
        "next": {"anyOf": [{"$ref": "#/definitions/node"}, {"type": "null"}]}}}},
        "type": "object", "properties": {"head": {"$ref": "#/definitions/node"}}})",
    R"({"type": "object", "additionalProperties": {"type": "integer"}})",
    R"({"type": "object", "properties": {"id": {"type": "string"}}, "additionalProperties": true})",
    R"({"type": ["string", "null"]})",
};

TEST(JsonSchema, CorpusMatchesLlamaCppsPythonConverter) {
  if (std::system("python3 -c 'import sys' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is not installed: no independent converter to compare with "
                    "(scripts/setup-debian.sh installs it)";
  }
  const auto dir = weft_test::temp_dir("json-schema");
  for (std::size_t i = 0; i < kCorpus.size(); ++i) {
    std::string why;
    const std::string expected = python_grammar(kCorpus[i], dir, static_cast<int>(i), why);
    ASSERT_TRUE(why.empty()) << "schema " << i << ": " << why;
    ASSERT_FALSE(expected.empty()) << "schema " << i;
    EXPECT_EQ(weft::json_schema_to_grammar(kCorpus[i]), expected) << "schema " << i << ": " << kCorpus[i];
  }
  std::filesystem::remove_all(dir);
}

TEST(JsonSchema, RefusalsAreTypedAndSayWhere) {
  auto refused = [](const char *schema, const std::string &needle) {
    return throws_weft([&] { weft::json_schema_to_grammar(schema); }, Errc::invalid_argument, needle);
  };
  EXPECT_TRUE(refused(R"({"type": "object", "properties": {)", "JSON schema is not JSON: parse error at line 1, column 35"));
  EXPECT_TRUE(refused(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}, "$defs": {}})",
                      "JSON schema at #/properties/a/$ref: $ref '#/$defs/nope' does not resolve: #/$defs has no 'nope'"));
  EXPECT_TRUE(refused(R"({"$ref": "https://example.com/s.json"})",
                      "JSON schema at #/$ref: $ref 'https://example.com/s.json' is not supported"));
  EXPECT_TRUE(refused(R"({"type": "array", "items": {"type": "string"}, "minItems": 4, "maxItems": 2})",
                      "JSON schema at #: minItems = 4 is above maxItems = 2"));
  EXPECT_TRUE(refused(R"({"properties": {"n": {"type": "array", "maxItems": -1}}})",
                      "JSON schema at #/properties/n/maxItems: maxItems = -1 must be an integer in [0, 2147483647]"));
  EXPECT_TRUE(refused(R"({"properties": {"n": {"type": "strin"}}})",
                      "JSON schema at #/properties/n/type: unknown type 'strin'"));
  EXPECT_TRUE(refused(R"({"anyOf": [{"type": "string"}, 7]})", "JSON schema at #/anyOf/1: a schema must be an object, not 7"));
  EXPECT_TRUE(refused(R"({"type": "string", "format": 5})", "JSON schema at #/format: format must be a string, not 5"));
  EXPECT_TRUE(refused(R"({"type": "integer", "minimum": 10, "exclusiveMaximum": 10})",
                      "JSON schema at #: no integer lies in [10, 9]"));
  EXPECT_TRUE(refused(R"(["type"])", "JSON schema at #: a schema must be an object"));
  // The converter's own refusal, quoted: a pattern that is not a regex.
  EXPECT_TRUE(refused(R"({"type": "string", "pattern": "^(ab$"})",
                      "JSON schema refused by llama.cpp's converter: JSON schema conversion failed: Invalid pattern "
                      "^(ab$: unbalanced parentheses"));
  std::string deep;
  for (int i = 0; i < 70; ++i) deep += R"({"type": "array", "items": )";
  deep += "{}";
  for (int i = 0; i < 70; ++i) deep += "}";
  EXPECT_TRUE(refused(deep.c_str(), "nesting is deeper than 64 levels (kJsonSchemaMaxDepth)"));
}

TEST(JsonSchema, SamplerParamsTakeOneOfGrammarAndSchema) {
  const weft::SamplerParams both{.grammar = "root ::= \"x\"", .json_schema = R"({"type": "integer"})"};
  weft::Executor ex(weft_test::tiny(), {.n_ctx = 256, .n_batch = 64, .n_seq_max = 1});
  auto conv = ex.create();
  EXPECT_TRUE(throws_weft([&] { conv.set_sampler(both); }, Errc::invalid_argument,
                          "SamplerParams.grammar and SamplerParams.json_schema are both set"));
  EXPECT_TRUE(throws_weft([&] { conv.set_sampler({.json_schema = R"({"type": "strin"})"}); }, Errc::invalid_argument,
                          "SamplerParams.json_schema: JSON schema at #/type: unknown type 'strin'"));
}

TEST(JsonSchema, SamplerTextsFitASavedState) {
  // A sampler text a saved state cannot hold is refused when set, not when
  // a later load fails.
  weft::Executor ex(weft_test::tiny(), {.n_ctx = 256, .n_batch = 64, .n_seq_max = 1});
  auto conv = ex.create();
  const std::string huge((1u << 20) + 1, ' ');
  EXPECT_TRUE(throws_weft([&] { conv.set_sampler({.json_schema = huge}); }, Errc::out_of_range,
                          "SamplerParams.json_schema is 1048577 bytes; at most 1048576 are taken"));
  EXPECT_TRUE(throws_weft([&] { conv.set_sampler({.grammar = huge}); }, Errc::out_of_range,
                          "SamplerParams.grammar is 1048577 bytes; at most 1048576 are taken"));
  // At the limit a schema is taken, and its conversation saves and loads.
  std::string padded = R"({"type": "integer"})";
  padded.resize(1u << 20, ' ');
  conv.set_sampler({.temperature = 0.5f, .json_schema = padded});
  conv.prompt("The number:");
  auto gen = conv.generate({.max_tokens = 4});
  while (!gen.done()) ex.step();
  const auto bytes = conv.save();
  auto back = ex.load(bytes);
  EXPECT_EQ(back.tokens(), conv.tokens());
}

TEST(JsonSchema, RepeatsComeFromTheCache) {
  // A schema of its own, so no earlier test has converted it.
  const std::string schema = R"({"type": "object", "properties": {"cache_probe": {"type": "string", "maxLength": 7},
      "n": {"type": "integer", "minimum": 3, "maximum": 977}}, "required": ["cache_probe", "n"]})";
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const std::string first = weft::json_schema_to_grammar(schema);
  const auto t1 = Clock::now();
  std::string again;
  for (int i = 0; i < 100; ++i) again = weft::json_schema_to_grammar(schema);
  const auto t2 = Clock::now();
  EXPECT_EQ(again, first);
  const double convert_us = std::chrono::duration<double, std::micro>(t1 - t0).count();
  const double hit_us = std::chrono::duration<double, std::micro>(t2 - t1).count() / 100;
  std::printf("json_schema_to_grammar: %.0f us to convert, %.2f us per cache hit\n", convert_us, hit_us);
  EXPECT_LT(hit_us * 5, convert_us) << "a repeat should not convert again";
  // More distinct schemas than the cache holds: all still convert (evicting, never failing).
  for (std::size_t i = 0; i < weft::kJsonSchemaCacheEntries + 8; ++i)
    EXPECT_FALSE(weft::json_schema_to_grammar(R"({"const": )" + std::to_string(i) + "}").empty());
  EXPECT_EQ(weft::json_schema_to_grammar(schema), first);
}

}  // namespace
