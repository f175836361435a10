// weft serve: the live conversations by id.
#include "serve/registry.hpp"

#include <fmt/format.h>

#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "serve/api_error.hpp"

namespace weft_cli::serve {

std::optional<weft::Generation> ConvEntry::generation() const {
  std::lock_guard lk(mu);
  return gen;
}

bool ConvEntry::try_claim() {
  std::lock_guard lk(mu);
  if (busy) return false;
  busy = true;
  return true;
}

void ConvEntry::set_generation(const weft::Generation &g) {
  std::lock_guard lk(mu);
  gen = g;
}

void ConvEntry::release() {
  std::lock_guard lk(mu);
  busy = false;
}

double ConvEntry::tokens_per_second() {
  const auto now = std::chrono::steady_clock::now();
  std::uint32_t n = 0;
  try {
    n = conv.n_tokens();
  } catch (const weft::Error &) {
    return 0;  // disposed meanwhile
  }
  std::lock_guard lk(mu);
  const double dt = std::chrono::duration<double>(now - rate_t).count();
  if (dt >= 1.0) {
    rate = n >= rate_tokens ? (n - rate_tokens) / dt : 0.0;
    rate_tokens = n;
    rate_t = now;
  }
  return rate;
}

std::string random_conversation_id() {
  std::uint8_t b[16];
  std::size_t got = 0;
  while (got < sizeof b) {
    const ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw weft::Error(weft::Errc::io, fmt::format("getrandom failed: {}", std::strerror(errno)));
    got += static_cast<std::size_t>(n);
  }
  std::string id = "conv_";
  for (const auto x : b) id += fmt::format("{:02x}", x);
  return id;
}

ApiError conversation_not_found(const std::string &id) {
  return ApiError(404, "not_found_error", "conversation_not_found",
                  fmt::format("no conversation '{}'", id.substr(0, 80)));
}

namespace {
bool valid_id(const std::string &id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}
}  // namespace

std::shared_ptr<ConvEntry> Registry::add(weft::Conversation conv, std::string kind, std::string id, std::string owner,
                                         bool fresh) {
  const bool made_here = id.empty();
  if (made_here) {
    try {
      id = random_conversation_id();
    } catch (...) {
      conv.dispose();
      throw;
    }
  }
  std::unique_lock lk(mu_);
  auto refuse = [&](const ApiError &e) {
    lk.unlock();
    conv.dispose();
    throw e;
  };
  auto too_many = [](const std::string &message) {
    ApiError e(429, "rate_limit_error", "too_many_conversations", message);
    e.retry_after_s = 1;
    return e;
  };
  if (entries_.size() >= max_)
    refuse(too_many(fmt::format("the server holds {} conversations, its limit (--max-conversations {}); "
                                "delete some or retry later", entries_.size(), max_)));
  if (fresh && max_per_owner_ > 0 && !owner.empty()) {
    const auto mine = static_cast<std::size_t>(std::count_if(entries_.begin(), entries_.end(), [&](const auto &e) { return e->owner == owner; }));
    if (mine >= max_per_owner_)
      refuse(too_many(fmt::format("this API key holds {} conversations on this server, its limit "
                                  "(--key-max-conversations {}); delete some or retry later", mine, max_per_owner_)));
  }
  if (!made_here && !valid_id(id)) {
    refuse(bad_param("id", fmt::format("conversation id '{}' must be 1-64 characters of A-Z a-z 0-9 _ -",
                                       id.substr(0, 80))));
  }
  for (const auto &e : entries_)
    if (e->id == id) refuse(ApiError(409, "invalid_request_error", "conflict",
                                     fmt::format("conversation '{}' already exists", id), "id"));
  auto e = std::make_shared<ConvEntry>();
  e->id = std::move(id);
  e->kind = std::move(kind);
  e->owner = std::move(owner);
  e->conv = std::move(conv);
  e->rate_tokens = e->conv.n_tokens();
  entries_.push_back(e);
  return e;
}

std::shared_ptr<ConvEntry> Registry::find(const std::string &id) const {
  std::lock_guard lk(mu_);
  for (const auto &e : entries_)
    if (e->id == id) return e;
  return nullptr;
}

std::shared_ptr<ConvEntry> Registry::get(const std::string &id) const {
  if (auto e = find(id)) return e;
  throw conversation_not_found(id);
}

std::shared_ptr<ConvEntry> Registry::get(const std::string &id, const Caller &who) const {
  auto e = find(id);
  if (!e || !who.may_use(e->owner)) throw conversation_not_found(id);
  return e;
}

bool Registry::remove(const std::string &id) {
  std::shared_ptr<ConvEntry> gone;
  {
    std::lock_guard lk(mu_);
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto &e) { return e->id == id; });
    if (it == entries_.end()) return false;
    gone = *it;
    entries_.erase(it);
  }
  if (auto g = gone->generation()) g->cancel();
  gone->conv.dispose();
  return true;
}

std::vector<std::shared_ptr<ConvEntry>> Registry::list() const {
  std::lock_guard lk(mu_);
  return entries_;
}

std::size_t Registry::size() const {
  std::lock_guard lk(mu_);
  return entries_.size();
}

}  // namespace weft_cli::serve
