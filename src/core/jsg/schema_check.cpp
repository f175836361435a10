// weft's JSON schema checks (schema_check.hpp): the shape of every keyword the
// converter reads, each $ref resolved as the converter resolves it, nesting
// bounded.
#include "core/jsg/schema_check.hpp"

#include <fmt/format.h>

#include <array>
#include <climits>
#include <cstdint>
#include <string_view>

#include "core/internal.hpp"
#include "weft/json_schema.hpp"

namespace weft::detail {
namespace {

using Json = nlohmann::ordered_json;

std::string shown(const Json &v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

[[noreturn]] void refuse(const std::string &path, const std::string &what) {
  fail(Errc::invalid_argument, fmt::format("JSON schema at {}: {}", path, what));
}

// JSON pointer escaping of one key (RFC 6901).
std::string key_of(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// Nesting of arrays and objects, checked before anything recurses through it.
void check_depth(const Json &v, const std::string &path, int depth) {
  if (!v.is_structured()) return;
  if (depth > kJsonSchemaMaxDepth) {
    refuse(path, fmt::format("nesting is deeper than {} levels (kJsonSchemaMaxDepth)", kJsonSchemaMaxDepth));
  }
  if (v.is_object()) {
    for (const auto &[k, x] : v.items()) check_depth(x, path + "/" + key_of(k), depth + 1);
  } else {
    std::size_t i = 0;
    for (const auto &x : v) check_depth(x, fmt::format("{}/{}", path, i++), depth + 1);
  }
}

constexpr std::array<std::string_view, 7> kTypes = {"string", "number", "integer", "boolean", "object", "array", "null"};

class Checker {
 public:
  explicit Checker(const Json &root) : root_(root) {}

  void schema(const Json &s, const std::string &path) {
    if (!s.is_object()) refuse(path, fmt::format("a schema must be an object, not {}", shown(s)));
    if (const auto it = s.find("$ref"); it != s.end()) {
      ref(*it, path + "/$ref");
      return;  // the converter reads nothing else beside a $ref
    }
    if (const auto it = s.find("type"); it != s.end()) type(*it, path + "/type");
    for (const char *k : {"format", "pattern"}) {
      if (const auto it = s.find(k); it != s.end() && !it->is_string())
        refuse(path + "/" + k, fmt::format("{} must be a string, not {}", k, shown(*it)));
    }
    if (const auto it = s.find("enum"); it != s.end() && (!it->is_array() || it->empty()))
      refuse(path + "/enum", fmt::format("enum must be a non-empty array, not {}", shown(*it)));
    if (const auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) refuse(path + "/required", fmt::format("required must be an array, not {}", shown(*it)));
      std::size_t i = 0;
      for (const auto &r : *it) {
        if (!r.is_string())
          refuse(fmt::format("{}/required/{}", path, i), fmt::format("a required name must be a string, not {}", shown(r)));
        ++i;
      }
    }
    bounds(s, path, "minItems", "maxItems");
    bounds(s, path, "minLength", "maxLength");
    numbers(s, path);
    if (const auto it = s.find("properties"); it != s.end()) members(*it, path + "/properties", "properties");
    for (const char *k : {"$defs", "definitions"}) {
      if (const auto it = s.find(k); it != s.end()) members(*it, path + "/" + k, k);
    }
    if (const auto it = s.find("additionalProperties"); it != s.end() && !it->is_boolean())
      schema(*it, path + "/additionalProperties");
    if (const auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) list(*it, path + "/items", "items", /*allow_empty=*/true);
      else schema(*it, path + "/items");
    }
    if (const auto it = s.find("prefixItems"); it != s.end()) list(*it, path + "/prefixItems", "prefixItems", true);
    for (const char *k : {"anyOf", "oneOf", "allOf"}) {
      if (const auto it = s.find(k); it != s.end()) list(*it, path + "/" + k, k, false);
    }
  }

 private:
  const Json &root_;

  void type(const Json &t, const std::string &path) {
    auto one = [&](const Json &x, const std::string &p) {
      if (!x.is_string()) refuse(p, fmt::format("a type must be a string, not {}", shown(x)));
      for (auto k : kTypes)
        if (x.get_ref<const std::string &>() == k) return;
      refuse(p, fmt::format("unknown type '{}' (expected string, number, integer, boolean, object, array or null)",
                            x.get_ref<const std::string &>()));
    };
    if (!t.is_array()) return one(t, path);
    if (t.empty()) refuse(path, "type must not be an empty array");
    std::size_t i = 0;
    for (const auto &x : t) one(x, fmt::format("{}/{}", path, i++));
  }

  void members(const Json &m, const std::string &path, const char *key) {
    if (!m.is_object()) refuse(path, fmt::format("{} must be an object of schemas, not {}", key, shown(m)));
    for (const auto &[k, v] : m.items()) schema(v, path + "/" + key_of(k));
  }

  void list(const Json &a, const std::string &path, const char *key, bool allow_empty) {
    if (!a.is_array() || (!allow_empty && a.empty()))
      refuse(path, fmt::format("{} must be a {}array of schemas, not {}", key, allow_empty ? "" : "non-empty ", shown(a)));
    std::size_t i = 0;
    for (const auto &v : a) schema(v, fmt::format("{}/{}", path, i++));
  }

  static void bounds(const Json &s, const std::string &path, const char *lo_key, const char *hi_key) {
    std::int64_t vals[2] = {0, INT_MAX};
    const char *keys[2] = {lo_key, hi_key};
    for (int i = 0; i < 2; ++i) {
      const auto it = s.find(keys[i]);
      if (it == s.end()) continue;
      if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > INT_MAX)
        refuse(path + "/" + keys[i],
               fmt::format("{} = {} must be an integer in [0, {}]", keys[i], shown(*it), INT_MAX));
      vals[i] = it->get<std::int64_t>();
    }
    if (vals[0] > vals[1]) refuse(path, fmt::format("{} = {} is above {} = {}", lo_key, vals[0], hi_key, vals[1]));
  }

  static void numbers(const Json &s, const std::string &path) {
    for (const char *k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      const auto it = s.find(k);
      if (it != s.end() && !it->is_number()) refuse(path + "/" + k, fmt::format("{} must be a number, not {}", k, shown(*it)));
    }
    // The converter bounds integers (only): it reads each bound as a 64-bit
    // integer, the inclusive one first.
    const auto t = s.find("type");
    if (t == s.end() || *t != "integer") return;
    auto bound = [&](const char *incl, const char *excl, std::int64_t dflt, std::int64_t step) -> std::int64_t {
      if (const auto it = s.find(incl); it != s.end()) return in_range(*it, path + "/" + incl, incl);
      if (const auto it = s.find(excl); it != s.end()) {
        const std::int64_t v = in_range(*it, path + "/" + excl, excl);
        if ((step > 0 && v == INT64_MAX) || (step < 0 && v == INT64_MIN))
          refuse(path + "/" + excl, fmt::format("{} = {} leaves no integer", excl, v));
        return v + step;
      }
      return dflt;
    };
    const std::int64_t lo = bound("minimum", "exclusiveMinimum", INT64_MIN, 1);
    const std::int64_t hi = bound("maximum", "exclusiveMaximum", INT64_MAX, -1);
    if (lo > hi) refuse(path, fmt::format("no integer lies in [{}, {}] (minimum above maximum)", lo, hi));
  }

  static std::int64_t in_range(const Json &v, const std::string &path, const char *key) {
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        refuse(path, fmt::format("{} = {} is outside the 64-bit integers", key, shown(v)));
      return v.get<std::int64_t>();
    }
    const double d = v.get<double>();
    if (!(d >= -9.2e18 && d <= 9.2e18)) refuse(path, fmt::format("{} = {} is outside the 64-bit integers", key, shown(v)));
    return static_cast<std::int64_t>(d);
  }

  // As the converter: "#/a/b" splits on '/', each part an object key or an
  // array index (no ~0 / ~1 unescaping); anything else is not supported.
  void ref(const Json &r, const std::string &path) {
    if (!r.is_string()) refuse(path, fmt::format("$ref must be a string, not {}", shown(r)));
    const auto &ref = r.get_ref<const std::string &>();
    if (ref.rfind("#/", 0) != 0) {
      refuse(path, fmt::format("$ref '{}' is not supported: only references inside the schema (\"#/...\") are; weft "
                               "fetches no remote schema",
                               ref));
    }
    const Json *target = &root_;
    std::string at = "#";
    std::size_t start = 2;
    while (true) {
      const std::size_t end = ref.find('/', start);
      const std::string sel = ref.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (target->is_object() && target->contains(sel)) {
        target = &(*target)[sel];
      } else if (target->is_array() && !sel.empty() && sel.find_first_not_of("0123456789") == std::string::npos &&
                 sel.size() < 10 && std::stoul(sel) < target->size()) {
        target = &(*target)[std::stoul(sel)];
      } else {
        refuse(path, fmt::format("$ref '{}' does not resolve: {} has no '{}'", ref, at, sel));
      }
      at += "/" + sel;
      if (end == std::string::npos) break;
      start = end + 1;
    }
    if (!target->is_object()) refuse(path, fmt::format("$ref '{}' names {}, which is not a schema object", ref, shown(*target)));
  }
};

}  // namespace

void check_json_schema(const Json &schema) {
  check_depth(schema, "#", 1);
  Checker(schema).schema(schema, "#");
}

}  // namespace weft::detail
