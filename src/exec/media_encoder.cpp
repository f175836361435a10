// MediaEncoder: one thread, a queue of images, the projector's encoder.
#include "exec/media_encoder.hpp"

#include <fmt/format.h>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace weft::detail {

MediaEncoder::MediaEncoder(std::shared_ptr<Projector::Impl> projector, std::function<void()> on_ready,
                           std::function<void()> before_encode)
    : projector_(std::move(projector)),
      on_ready_(std::move(on_ready)),
      before_encode_(std::move(before_encode)),
      thread_([this] { loop(); }) {}

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
  return counters_.encoded * 2 + (queue_.size() + busy_ > 0 ? 1 : 0);
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

void MediaEncoder::loop() {
#if defined(__linux__)
  // SCHED_BATCH: woken by push(), this thread does not preempt the thread
  // that woke it (a game's, on a busy core) for the milliseconds of an
  // encode; it runs as soon as a core is free instead.
  sched_param sp{};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
#endif
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait_for(lock, kIdle);  // bounded: the stop flag is checked at least this often
      continue;
    }
    auto m = std::move(queue_.front());
    queue_.pop_front();
    if (m.use_count() == 1) continue;  // nobody holds it any more (disposed)
    ++busy_;
    auto hook = hook_;
    lock.unlock();
    if (before_encode_) before_encode_();
    const auto t0 = std::chrono::steady_clock::now();
    if (run_hook(hook, *m)) encode_media(*projector_, *m);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.reset();
    on_ready_();
    lock.lock();
    --busy_;
    ++counters_.encoded;
    counters_.seconds += took;
  }
}

}  // namespace weft::detail
