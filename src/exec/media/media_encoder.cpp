// MediaEncoder: one thread, a queue of images, the projector's encoder.
#include "exec/media/media_encoder.hpp"

#include <fmt/format.h>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace weft::detail {

MediaEncoder::MediaEncoder(std::shared_ptr<Projector::Impl> projector, std::function<void()> on_ready,
                           std::function<void()> before_encode, bool own_thread)
    : projector_(std::move(projector)),
      on_ready_(std::move(on_ready)),
      before_encode_(std::move(before_encode)),
      own_thread_(own_thread) {
  if (own_thread_) thread_ = std::thread([this] { loop(); });
}

MediaEncoder::~MediaEncoder() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Images still queued stay queued: their conversations went with the executor.
}

void MediaEncoder::push(std::shared_ptr<MediaChunk> m) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(m));
  }
  cv_.notify_one();
}

std::size_t MediaEncoder::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size() + busy_;
}

std::uint64_t MediaEncoder::activity() const {
  std::lock_guard lock(mu_);
  const bool active = busy_ > 0 || (own_thread_ && !queue_.empty());
  return counters_.encoded * 2 + (active ? 1 : 0);
}

MediaEncoder::Counters MediaEncoder::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

void MediaEncoder::set_hook(std::function<void()> hook) {
  std::lock_guard lock(mu_);
  hook_ = std::move(hook);
}

namespace {
// A test's hook that throws fails the image as the encoder would.
bool run_hook(const std::function<void()> &hook, MediaChunk &m) {
  if (!hook) return true;
  try {
    hook();
    return true;
  } catch (const std::exception &e) {
    m.error = Error(Errc::backend, fmt::format("the vision encoder failed on image {}: {}", m.id, e.what()));
    m.state.store(MediaChunk::failed, std::memory_order_release);
    return false;
  }
}
}  // namespace

std::shared_ptr<MediaChunk> MediaEncoder::take_locked() {
  while (!queue_.empty()) {
    auto m = std::move(queue_.front());
    queue_.pop_front();
    if (m.use_count() == 1) continue;  // nobody holds it any more (disposed)
    ++busy_;
    return m;
  }
  return nullptr;
}

void MediaEncoder::encode_taken(std::shared_ptr<MediaChunk> m, bool gate, Counters &mine) {
  std::function<void()> hook;
  {
    std::lock_guard lock(mu_);
    hook = hook_;
  }
  if (gate && before_encode_) before_encode_();
  const auto t0 = std::chrono::steady_clock::now();
  if (run_hook(hook, *m)) encode_media(*projector_, *m);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool failed = m->state.load(std::memory_order_acquire) == MediaChunk::failed;
  m.reset();
  on_ready_();
  std::lock_guard lock(mu_);
  --busy_;
  for (Counters *c : {&counters_, &mine}) {
    ++c->encoded;
    c->failed += failed ? 1 : 0;
    c->seconds += took;
  }
}

MediaEncoder::Counters MediaEncoder::encode(std::size_t max) {
  Counters mine;
  for (std::size_t i = 0; i < max; ++i) {
    std::shared_ptr<MediaChunk> m;
    {
      std::lock_guard lock(mu_);
      m = take_locked();
    }
    if (!m) break;
    encode_taken(std::move(m), false, mine);
  }
  return mine;
}

void MediaEncoder::loop() {
#if defined(__linux__)
  // SCHED_BATCH: woken by push(), this thread does not preempt the thread
  // that woke it (a game's, on a busy core) for the milliseconds of an
  // encode; it runs as soon as a core is free instead.
  sched_param sp{};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
#endif
  Counters unused;
  std::unique_lock lock(mu_);
  while (!stop_) {
    auto m = take_locked();
    if (!m) {
      cv_.wait_for(lock, kIdle);  // bounded: the stop flag is checked at least this often
      continue;
    }
    lock.unlock();
    encode_taken(std::move(m), true, unused);
    lock.lock();
  }
}

}  // namespace weft::detail
