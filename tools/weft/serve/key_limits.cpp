// weft serve: limits per API key.
#include "serve/key_limits.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "serve/api_error.hpp"

namespace weft_cli::serve {

KeyLimits::Lease &KeyLimits::Lease::operator=(Lease &&o) noexcept {
  if (this != &o) {
    if (limits_) limits_->release(key_);
    limits_ = std::exchange(o.limits_, nullptr);
    key_ = std::move(o.key_);
  }
  return *this;
}

KeyLimits::Lease::~Lease() {
  if (limits_) limits_->release(key_);
}

void KeyLimits::Lease::charge(std::uint64_t tokens, Clock::time_point now) {
  if (limits_ && tokens > 0) limits_->add(key_, tokens, now);
}

void KeyLimits::prune(Usage &u, Clock::time_point now) {
  while (!u.charges.empty() && u.charges.front().first + window <= now) {
    u.total -= u.charges.front().second;
    u.charges.pop_front();
  }
}

void KeyLimits::forget_if_idle(std::map<std::string, Usage>::iterator it) {
  // Keys come and go (a key file is reloaded); a key with nothing to count is dropped.
  if (it->second.streams == 0 && it->second.charges.empty()) usage_.erase(it);
}

void KeyLimits::check_tokens(const Usage &u, Clock::time_point now) const {
  if (opt_.tokens_per_minute == 0 || u.total < opt_.tokens_per_minute) return;
  // The window falls under the limit once enough of its oldest charges have left it.
  std::uint64_t left = u.total;
  auto free_at = now;
  for (const auto &[t, n] : u.charges) {
    left -= n;
    free_at = t + window;
    if (left < opt_.tokens_per_minute) break;
  }
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(free_at - now).count();
  ApiError e(429, "rate_limit_error", "rate_limit_exceeded",
             fmt::format("this API key used {} tokens in the last 60 s on this server, its limit "
                         "(--key-tokens-per-minute {}); retry in {:.1f} s",
                         u.total, opt_.tokens_per_minute, static_cast<double>(wait) / 1000.0));
  e.retry_after_s = static_cast<int>(std::max<long long>(1, (wait + 999) / 1000));
  throw e;
}

void KeyLimits::admit_tokens(const std::string &key_id, Clock::time_point now) {
  if (opt_.tokens_per_minute == 0) return;
  std::lock_guard lk(mu_);
  const auto it = usage_.find(key_id);
  if (it == usage_.end()) return;
  prune(it->second, now);
  check_tokens(it->second, now);
}

KeyLimits::Lease KeyLimits::admit(const std::string &key_id, Clock::time_point now) {
  std::lock_guard lk(mu_);
  auto it = usage_.try_emplace(key_id).first;
  Usage &u = it->second;
  prune(u, now);
  if (opt_.max_streams > 0 && u.streams >= opt_.max_streams) {
    ApiError e(429, "rate_limit_error", "too_many_streams",
               fmt::format("this API key runs {} generations on this server, its limit (--key-max-streams {}); "
                           "retry when one ends", u.streams, opt_.max_streams));
    e.retry_after_s = 1;
    throw e;
  }
  check_tokens(u, now);
  ++u.streams;
  return Lease(this, key_id);
}

void KeyLimits::release(const std::string &key_id) {
  std::lock_guard lk(mu_);
  const auto it = usage_.find(key_id);
  if (it == usage_.end()) return;
  --it->second.streams;
  forget_if_idle(it);
}

void KeyLimits::add(const std::string &key_id, std::uint64_t tokens, Clock::time_point now) {
  if (opt_.tokens_per_minute == 0) return;
  std::lock_guard lk(mu_);
  Usage &u = usage_[key_id];
  prune(u, now);
  u.charges.emplace_back(now, tokens);
  u.total += tokens;
}

std::uint64_t KeyLimits::tokens_in_window(const std::string &key_id, Clock::time_point now) {
  std::lock_guard lk(mu_);
  const auto it = usage_.find(key_id);
  if (it == usage_.end()) return 0;
  prune(it->second, now);
  return it->second.total;
}

std::uint32_t KeyLimits::streams(const std::string &key_id) {
  std::lock_guard lk(mu_);
  const auto it = usage_.find(key_id);
  return it == usage_.end() ? 0 : it->second.streams;
}

}  // namespace weft_cli::serve
