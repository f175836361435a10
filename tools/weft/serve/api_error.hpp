// weft serve: errors on the wire, in OpenAI's shape
// ({"error": {"message", "type", "param", "code"}}) with the HTTP status
// that goes with them. Handlers throw ApiError; one wrapper turns it (and
// weft::Error, JSON and any other exception) into the response.
#pragma once

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "weft/error.hpp"

namespace weft_cli::serve {

using Json = nlohmann::json;

class ApiError : public std::runtime_error {
 public:
  ApiError(int status_, std::string type_, std::string code_, const std::string &message, std::string param_ = {})
      : std::runtime_error(message), status(status_), type(std::move(type_)), code(std::move(code_)),
        param(std::move(param_)) {}
  int status;
  std::string type;   // invalid_request_error, not_found_error, rate_limit_error, server_error, ...
  std::string code;   // a short machine code ("model_not_found", "context_length_exceeded")
  std::string param;  // the request field at fault, or empty
  int retry_after_s = 0;  // > 0: sent as Retry-After
};

// 400 invalid_request_error naming the field.
ApiError bad_param(std::string_view param, const std::string &message, std::string code = "invalid_value");
// A weft::Error as the status its code means (invalid_argument/out_of_range
// 400, not_found 404, corrupt/incompatible 400, disposed 404, others 500).
ApiError from_weft(const weft::Error &e, std::string param = {});

Json error_json(const ApiError &e);
void send_error(httplib::Response &res, const ApiError &e);
void send_json(httplib::Response &res, const Json &body, int status = 200);

// Parses the request body as a JSON object, or throws 400 (malformed, not
// an object).
Json parse_body(const httplib::Request &req);

using Handler = std::function<void(const httplib::Request &, httplib::Response &)>;
// Runs `h`, turning every exception into an error response; never throws.
Handler guarded(Handler h);

}  // namespace weft_cli::serve
