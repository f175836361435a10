// weft serve: images and audio in requests.
#include "serve/media_input.hpp"

#include <fmt/format.h>

#include <chrono>

#include "serve/media_decode.hpp"

namespace weft_cli::serve {

namespace {

bool is_media_part(const Json &part) {
  if (!part.is_object()) return false;
  const auto t = part.find("type");
  return t != part.end() && t->is_string() && (*t == "image_url" || *t == "input_audio");
}

// The projector a part needs, or a 400 saying why there is none.
void require_projector(const weft::Projector &projector, bool audio, const std::string &param) {
  const char *what = audio ? "an audio clip" : "an image";
  if (!projector)
    throw bad_param(param,
                    fmt::format("'{}' is {}, and this server has no projector: start it with --mmproj PATH (the "
                                "model's mmproj GGUF) to take images and audio",
                                param, what),
                    "unsupported_content");
  if (audio ? !projector.audio() : !projector.vision())
    throw bad_param(param,
                    fmt::format("'{}' is {}, and this server's projector (--mmproj) takes {} only", param, what,
                                audio ? "images" : "audio"),
                    "unsupported_content");
}

// An http:// URL's bytes, bounded in size and time (--allow-remote-media).
std::vector<std::uint8_t> fetch_http(const std::string &url, const MediaLimits &limits, const std::string &param) {
  const std::string rest = url.substr(7);  // after "http://"
  const auto slash = rest.find('/');
  const std::string host = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (host.empty()) throw bad_param(param, fmt::format("'{}': the URL names no host", param), "invalid_image_url");
  httplib::Client cli("http://" + host);
  cli.set_connection_timeout(limits.fetch_timeout_s, 0);
  cli.set_read_timeout(limits.fetch_timeout_s, 0);
  cli.set_follow_location(false);  // a redirect could lead anywhere, https:// included
  std::vector<std::uint8_t> body;
  bool too_large = false, too_slow = false;
  // The read timeout bounds each wait; this bounds the whole transfer.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limits.fetch_timeout_s);
  auto res = cli.Get(path, [&](const char *data, std::size_t n) {
    too_large = body.size() + n > limits.max_bytes;
    too_slow = std::chrono::steady_clock::now() > deadline;
    if (too_large || too_slow) return false;  // httplib drops the connection
    body.insert(body.end(), data, data + n);
    return true;
  });
  if (too_large)
    throw bad_param(param,
                    fmt::format("'{}': {} is over {} bytes; this server takes at most {} per image (--max-media-bytes)",
                                param, url.substr(0, 200), limits.max_bytes, limits.max_bytes),
                    "media_too_large");
  if (!res || too_slow)
    throw bad_param(param,
                    fmt::format("'{}': fetching {} failed: {}", param, url.substr(0, 200),
                                too_slow ? fmt::format("it took over {} s", limits.fetch_timeout_s)
                                         : httplib::to_string(res.error())),
                    "media_fetch_failed");
  if (res->status != 200)
    throw bad_param(param, fmt::format("'{}': fetching {} answered HTTP {}", param, url.substr(0, 200), res->status),
                    "media_fetch_failed");
  return body;
}

std::vector<std::uint8_t> image_bytes(const std::string &url, const MediaLimits &limits, const std::string &param) {
  if (url.starts_with("data:")) {
    // data:image/png;base64,....
    const auto comma = url.find(',');
    const std::string head = url.substr(5, comma == std::string::npos ? 0 : comma - 5);
    if (comma == std::string::npos || !head.starts_with("image/") || !head.ends_with(";base64"))
      throw bad_param(param,
                      fmt::format("'{}': a data URL must be data:image/TYPE;base64,DATA, not '{}...'", param,
                                  url.substr(0, std::min<std::size_t>(40, comma))),
                      "invalid_image_url");
    return base64_decode(std::string_view(url).substr(comma + 1), limits.max_bytes, param);
  }
  if (url.starts_with("https://"))
    throw bad_param(param,
                    fmt::format("'{}': https:// image URLs are not fetched: weft serve keeps no TLS client (TLS "
                                "stays with the proxy in front, and there are no client certificates here); send "
                                "the image as a data: URL",
                                param),
                    "unsupported_url_scheme");
  if (url.starts_with("http://")) {
    if (!limits.allow_remote)
      throw bad_param(param,
                      fmt::format("'{}': this server does not fetch image URLs (start it with --allow-remote-media "
                                  "for http://); send the image as a data: URL",
                                  param),
                      "remote_media_disabled");
    return fetch_http(url, limits, param);
  }
  throw bad_param(param,
                  fmt::format("'{}': the URL must be a data:image/...;base64, URL (or http:// with "
                              "--allow-remote-media), not '{}'",
                              param, url.substr(0, 40)),
                  "invalid_image_url");
}

PromptMedia read_image(const Json &part, const weft::Projector &projector, const MediaLimits &limits,
                       const std::string &param) {
  const auto iu = part.find("image_url");
  if (iu == part.end() || !iu->is_object() || !iu->contains("url") || !(*iu)["url"].is_string())
    throw bad_param(param, fmt::format("'{}' must be {{\"type\": \"image_url\", \"image_url\": {{\"url\": ...}}}}", param),
                    "invalid_type");
  require_projector(projector, false, param);
  const auto bytes = image_bytes((*iu)["url"].get<std::string>(), limits, param);
  try {
    return PromptMedia{.image = projector.prepare(bytes), .audio = {}};
  } catch (const weft::Error &e) {
    throw bad_param(param, fmt::format("'{}': the image does not decode: {}", param, e.what()), "invalid_image");
  }
}

PromptMedia read_audio(const Json &part, const weft::Projector &projector, const MediaLimits &limits,
                       const std::string &param) {
  const auto ia = part.find("input_audio");
  if (ia == part.end() || !ia->is_object() || !ia->contains("data") || !(*ia)["data"].is_string())
    throw bad_param(param,
                    fmt::format("'{}' must be {{\"type\": \"input_audio\", \"input_audio\": {{\"data\": base64, "
                                "\"format\": \"wav\"}}}}",
                                param),
                    "invalid_type");
  const std::string format = ia->contains("format") && (*ia)["format"].is_string() ? (*ia)["format"].get<std::string>()
                                                                                    : "";
  require_projector(projector, true, param);
  if (format != "wav")
    throw bad_param(param,
                    fmt::format("'{}': audio format '{}' is not decoded here; send \"wav\" (PCM or float32, mono or "
                                "more channels) at {} Hz",
                                param, format.substr(0, 20), projector.audio_sample_rate()),
                    "unsupported_audio_format");
  const auto bytes = base64_decode((*ia)["data"].get<std::string>(), limits.max_bytes, param);
  return PromptMedia{.image = {}, .audio = decode_wav(bytes, projector.audio_sample_rate(), param)};
}

}  // namespace

PromptInput PromptInput::of_tokens(std::vector<weft::Token> tokens) {
  PromptInput p;
  if (!tokens.empty()) p.parts.push_back(Part{.tokens = std::move(tokens), .media = {}});
  return p;
}

bool PromptInput::has_media() const {
  for (const auto &p : parts)
    if (p.tokens.empty()) return true;
  return false;
}

std::uint32_t PromptInput::known_positions() const {
  std::size_t n = 0;
  for (const auto &p : parts) n += p.tokens.empty() ? p.media.image.n_tokens() : p.tokens.size();
  return static_cast<std::uint32_t>(std::min<std::size_t>(n, UINT32_MAX));
}

PromptInput make_prompt(const weft::Model &model, std::string_view text, std::vector<PromptMedia> media,
                        const weft::PromptOptions &options, const std::string &param) {
  const weft::TokenizeOptions first{.add_bos = options.add_bos, .parse_special = options.parse_special};
  // Without media the text is one piece: a literal marker in it is just text.
  if (media.empty()) return PromptInput::of_tokens(model.tokenize(text, first));
  const std::string_view marker = weft::media_marker();
  std::size_t markers = 0;
  for (auto at = text.find(marker); at != std::string_view::npos; at = text.find(marker, at + 1)) ++markers;
  if (markers != media.size())
    throw bad_param(param, fmt::format("the prompt holds {} media markers ({}) for {} images and audio clips (a chat "
                                       "template that drops or repeats content?)",
                                       markers, marker, media.size()));
  PromptInput out;
  std::size_t from = 0;
  for (std::size_t i = 0; i <= media.size(); ++i) {
    const std::size_t at = text.find(marker, from);
    const auto piece = text.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from);
    auto tokens = model.tokenize(piece, {.add_bos = options.add_bos && i == 0, .parse_special = options.parse_special});
    if (!tokens.empty()) out.parts.push_back({.tokens = std::move(tokens), .media = {}});
    if (i == media.size()) break;
    out.parts.push_back({.tokens = {}, .media = std::move(media[i])});
    from = at + marker.size();
  }
  return out;
}

void queue_prompt(weft::Conversation &conv, const PromptInput &prompt) {
  for (const auto &p : prompt.parts) {
    if (!p.tokens.empty()) conv.prompt(std::span<const weft::Token>(p.tokens));
    else if (p.media.image) conv.prompt_image(p.media.image);
    else conv.prompt_audio(p.media.audio);
  }
}

PromptMedia read_media_part(const Json &part, const weft::Projector &projector, const MediaLimits &limits,
                            const std::string &param) {
  if (part.value("type", "") == "image_url") return read_image(part, projector, limits, param);
  return read_audio(part, projector, limits, param);
}

void append_parts(const Json &parts, const std::string &where, const weft::Projector &projector,
                  const MediaLimits &limits, std::string &text, std::vector<PromptMedia> &media) {
  for (std::size_t j = 0; j < parts.size(); ++j) {
    const Json &part = parts[j];
    const std::string param = fmt::format("{}[{}]", where, j);
    if (is_media_part(part)) {
      media.push_back(read_media_part(part, projector, limits, param));
      text += weft::media_marker();
      continue;
    }
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      throw bad_param(param,
                      fmt::format("'{}' must be {{\"type\": \"text\", \"text\": ...}}, an image_url part or an "
                                  "input_audio part",
                                  param),
                      "invalid_type");
    text += part["text"].get<std::string>();
  }
}

std::size_t count_media_parts(const Json &parts) {
  std::size_t n = 0;
  for (const auto &part : parts) n += is_media_part(part);
  return n;
}

void check_media_count(std::size_t n, const MediaLimits &limits, const std::string &param) {
  if (n > limits.max_parts)
    throw bad_param(param,
                    fmt::format("'{}' holds {} images and audio clips; this server takes at most {} per request "
                                "(--max-media)",
                                param, n, limits.max_parts),
                    "too_many_media");
}

ChatInput parse_chat(const Json &body, const weft::Projector &projector, const MediaLimits &limits) {
  const auto it = body.find("messages");
  if (it == body.end()) throw bad_param("messages", "'messages' is required", "missing_required_parameter");
  if (!it->is_array() || it->empty())
    throw bad_param("messages", "'messages' must be a non-empty array of {role, content}", "invalid_type");
  // Counted first, so that a request over the limit decodes nothing.
  std::size_t n_media = 0;
  for (const auto &m : *it)
    if (m.is_object() && m.contains("content") && m["content"].is_array()) n_media += count_media_parts(m["content"]);
  check_media_count(n_media, limits, "messages");
  const std::string_view marker = weft::media_marker();
  ChatInput out;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const Json &m = (*it)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw bad_param(where, fmt::format("'{}' must be an object with a string 'role'", where), "invalid_type");
    weft::ChatMessage msg{.role = m["role"].get<std::string>(), .content = {}};
    const auto c = m.find("content");
    if (c == m.end() || c->is_null()) {
      // An assistant turn may carry no content; nothing to add.
    } else if (c->is_string()) {
      msg.content = c->get<std::string>();
    } else if (c->is_array()) {
      append_parts(*c, where + ".content", projector, limits, msg.content, out.media);
    } else {
      throw bad_param(where + ".content", fmt::format("'{}.content' must be a string or an array of parts", where),
                      "invalid_type");
    }
    out.messages.push_back(std::move(msg));
  }
  if (n_media > 0) {
    // The marker stands for media only: text that spells it would shift every image after it.
    std::size_t markers = 0;
    for (const auto &msg : out.messages)
      for (auto at = msg.content.find(marker); at != std::string::npos; at = msg.content.find(marker, at + 1)) ++markers;
    if (markers != n_media)
      throw bad_param("messages",
                      fmt::format("the messages' text holds the media marker {} itself; a request with images or "
                                  "audio may not",
                                  marker),
                      "invalid_value");
  }
  return out;
}

PromptInput chat_prompt(const weft::Model &model, ChatInput chat, const std::string &chat_template,
                        bool add_assistant) {
  const std::string text = model.apply_chat_template(chat.messages, add_assistant, chat_template);
  return make_prompt(model, text, std::move(chat.media), {.add_bos = model.bos() >= 0, .parse_special = true}, "messages");
}

std::string text_with_markers(const weft::Model &model, const std::vector<weft::Token> &tokens) {
  std::string out;
  std::size_t i = 0;
  while (i < tokens.size()) {
    std::size_t j = i;
    if (tokens[i] >= 0) {
      while (j < tokens.size() && tokens[j] >= 0) ++j;
      out += model.detokenize(std::span(tokens).subspan(i, j - i), {.remove_special = true});
    } else {
      // One span: the same image_token(id) at each of its positions.
      while (j < tokens.size() && tokens[j] == tokens[i]) ++j;
      out += weft::media_marker();
    }
    i = j;
  }
  return out;
}

}  // namespace weft_cli::serve
