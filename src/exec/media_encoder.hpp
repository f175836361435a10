// MediaEncoder: the executor's image encoder thread.
//
// prompt_image() queues an image here; this thread runs the projector's
// vision encoder on it (tens of milliseconds to seconds), so a step never
// does: the step decodes an image only once its embeddings are ready, and
// meanwhile the conversation's later input waits behind it while everyone
// else keeps stepping. `on_ready` (the worker's wake-up) is called after each
// image, with no lock of the encoder held. `before_encode` (may be empty)
// runs on this thread before each encode, with no lock of the encoder held,
// and returns within a bounded time: the executor's gate that keeps an
// encode from starting beside a step's decodes. Images nobody holds any more
// (a disposed conversation's) are skipped.
//
// Bounded: the thread sleeps at most kIdle between checks of its stop flag;
// the destructor stops and joins it, waiting for at most the encode in
// progress (and its `before_encode`). Thread-safe; its lock is taken after the executor's state lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/projector_impl.hpp"

namespace weft::detail {

class MediaEncoder {
 public:
  static constexpr std::chrono::milliseconds kIdle{100};

  MediaEncoder(std::shared_ptr<Projector::Impl> projector, std::function<void()> on_ready,
               std::function<void()> before_encode = {});
  ~MediaEncoder();
  MediaEncoder(const MediaEncoder &) = delete;
  MediaEncoder &operator=(const MediaEncoder &) = delete;

  void push(std::shared_ptr<MediaChunk> m);
  // Images queued or being encoded.
  std::size_t pending() const;
  // Changes whenever an image is done; odd while any is queued or being
  // encoded. Equal and even before and after a decode: the encoder left the
  // cores to it all along.
  std::uint64_t activity() const;
  struct Counters {
    std::uint64_t encoded = 0;  // images the encoder ran on (failed ones included)
    double seconds = 0;         // its time on them
  };
  Counters counters() const;
  // Tests: runs on the encoder thread before each encode; one that throws
  // fails that image (Errc::backend with its message) as the encoder would.
  void set_hook(std::function<void()> hook);

 private:
  void loop();

  std::shared_ptr<Projector::Impl> projector_;
  std::function<void()> on_ready_;
  std::function<void()> before_encode_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<MediaChunk>> queue_;
  std::size_t busy_ = 0;
  Counters counters_;
  std::function<void()> hook_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after everything it reads
};

}  // namespace weft::detail
