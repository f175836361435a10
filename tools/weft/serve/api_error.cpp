// weft serve: errors in OpenAI's shape.
#include "serve/api_error.hpp"

#include <fmt/format.h>

namespace weft_cli::serve {

ApiError bad_param(std::string_view param, const std::string &message, std::string code) {
  return ApiError(400, "invalid_request_error", std::move(code), message, std::string(param));
}

ApiError from_weft(const weft::Error &e, std::string param) {
  using weft::Errc;
  const std::string code = weft::errc_name(e.code());
  switch (e.code()) {
    case Errc::invalid_argument:
    case Errc::out_of_range:
    case Errc::corrupt:
    case Errc::incompatible:
      return ApiError(400, "invalid_request_error", code, e.what(), std::move(param));
    case Errc::not_found:
    case Errc::disposed:
      return ApiError(404, "not_found_error", code, e.what(), std::move(param));
    case Errc::cancelled:
      return ApiError(503, "server_error", code, e.what(), std::move(param));
    default:
      return ApiError(500, "server_error", code, e.what(), std::move(param));
  }
}

Json error_json(const ApiError &e) {
  Json err = {{"message", e.what()}, {"type", e.type}};
  err["param"] = e.param.empty() ? Json(nullptr) : Json(e.param);
  err["code"] = e.code.empty() ? Json(nullptr) : Json(e.code);
  return Json{{"error", err}};
}

void send_json(httplib::Response &res, const Json &body, int status) {
  res.status = status;
  // Invalid UTF-8 from a model's pieces is replaced, never thrown on.
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response &res, const ApiError &e) {
  send_json(res, error_json(e), e.status);
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
}

Json parse_body(const httplib::Request &req) {
  Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded())
    throw ApiError(400, "invalid_request_error", "invalid_json",
                   fmt::format("the request body is not valid JSON ({} bytes)", req.body.size()));
  if (!body.is_object())
    throw ApiError(400, "invalid_request_error", "invalid_json",
                   fmt::format("the request body must be a JSON object, not {}", body.type_name()));
  return body;
}

Handler guarded(Handler h) {
  return [h = std::move(h)](const httplib::Request &req, httplib::Response &res) {
    try {
      h(req, res);
    } catch (const ApiError &e) {
      send_error(res, e);
    } catch (const weft::Error &e) {
      send_error(res, from_weft(e));
    } catch (const Json::exception &e) {
      send_error(res, ApiError(400, "invalid_request_error", "invalid_type", e.what()));
    } catch (const std::exception &e) {
      send_error(res, ApiError(500, "server_error", "internal", e.what()));
    }
  };
}

}  // namespace weft_cli::serve
