// weft/json_schema.hpp — JSON Schema to a GBNF grammar.
//
// SamplerParams::json_schema constrains a conversation's sampling to JSON that
// matches a schema; json_schema_to_grammar() is the conversion it runs, for a
// caller that wants to see or extend the grammar. The converter is llama.cpp's
// own (common/json-schema-to-grammar.cpp), compiled into libweft from the
// llama.cpp source tree weft is built against; it supports what that
// converter supports: type (one or a list), properties, required,
// additionalProperties, items / prefixItems with minItems / maxItems, enum,
// const, anyOf / oneOf / allOf, local $ref ("#/$defs/...", "#/definitions/..."),
// string minLength / maxLength / pattern / format (date, time, date-time,
// uuid), integer minimum / maximum / exclusiveMinimum / exclusiveMaximum.
// Keywords it does not know are ignored (as the converter does), and a
// `pattern` it cannot express becomes "any string" with a warning on stderr
// (llama.cpp's behaviour).
//
// Thread-safety: callable from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "weft/export.hpp"

namespace weft {

// How many converted schemas json_schema_to_grammar() keeps (keyed by the
// schema's exact text, least recently used dropped first). A hit costs a
// hash of the text and a copy of the grammar.
inline constexpr std::size_t kJsonSchemaCacheEntries = 64;
// The deepest nesting of arrays and objects a schema may have (the converter
// recurses once per level).
inline constexpr int kJsonSchemaMaxDepth = 64;

// The GBNF grammar (start rule "root") that accepts exactly the JSON text the
// converter derives from `schema`, a JSON Schema document. Each successful
// conversion is cached (kJsonSchemaCacheEntries).
//
// Throws Errc::invalid_argument for text that is not JSON (the parser's line
// and column), and for a schema the converter cannot take, naming the JSON
// pointer of the offending place where one exists ("at #/properties/items:
// maxItems = -1 must be a non-negative integer"): a schema that is not an
// object, a keyword of the wrong type, min above max, an unknown type name, a
// $ref that is not local or does not resolve, nesting deeper than
// kJsonSchemaMaxDepth, or anything the converter itself refuses (its message
// quoted). Also Errc::invalid_argument when this weft was built without
// llama.cpp's source tree (json_schema_supported() is then false).
WEFT_API std::string json_schema_to_grammar(std::string_view schema);

// False when this weft was built without the converter (no llama.cpp source
// tree at build time); json_schema_to_grammar() then always throws.
WEFT_API bool json_schema_supported() noexcept;

}  // namespace weft
