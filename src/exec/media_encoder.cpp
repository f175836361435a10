// MediaEncoder: one thread, a queue of images, the projector's encoder.
#include "exec/media_encoder.hpp"

namespace weft::detail {

MediaEncoder::MediaEncoder(std::shared_ptr<Projector::Impl> projector, std::function<void()> on_ready)
    : projector_(std::move(projector)), on_ready_(std::move(on_ready)), thread_([this] { loop(); }) {}

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

void MediaEncoder::set_hook(std::function<void()> hook) {
  std::lock_guard lock(mu_);
  hook_ = std::move(hook);
}

void MediaEncoder::loop() {
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
    if (hook) hook();
    encode_media(*projector_, *m);
    m.reset();
    on_ready_();
    lock.lock();
    --busy_;
  }
}

}  // namespace weft::detail
