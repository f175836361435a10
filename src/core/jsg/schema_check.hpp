// weft's checks of a JSON schema before llama.cpp's converter sees it: each
// refusal names the JSON pointer of the place ("#/properties/a/items"), which
// the converter's own messages lack, and nothing it would misread (a keyword
// of the wrong type, which it reads unchecked) reaches it. Internal; compiled
// into weft_jsg beside the converter (its nlohmann is llama.cpp's vendored
// one, the converter's).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace weft::detail {

// Throws Error(Errc::invalid_argument, "JSON schema at <pointer>: <what>").
void check_json_schema(const nlohmann::ordered_json &schema);

}  // namespace weft::detail
