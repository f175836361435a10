// MediaEncoder: the executor's image encoder — a thread of its own, or the
// callers of encode() (ImageEncoding::caller).
//
// prompt_image() queues an image here; the thread, or a caller of encode(),
// runs the projector's vision encoder on it (tens of milliseconds to
// seconds), so a step never does: the step decodes an image only once its embeddings are ready, and
// meanwhile the conversation's later input waits behind it while everyone
// else keeps stepping. `on_ready` (the worker's wake-up) is called after each
// image, with no lock of the encoder held. `before_encode` (may be empty)
// runs on this thread before each encode, with no lock of the encoder held,
// and returns within a bounded time: the executor's gate that keeps an
// encode from starting beside a step's decodes; encode() skips it (its
// caller chose the moment). Images nobody holds any more (a disposed
// conversation's) are skipped.
//
// Bounded: the thread sleeps at most kIdle between checks of its stop flag;
// the destructor stops and joins it, waiting for at most the encode in
// progress (and its `before_encode`). Thread-safe: any number of encode()
// callers and the thread each take their own image. Its lock is taken
// after the executor's state lock and never held across an encode.
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

  // own_thread = false: no thread; images wait for encode().
  MediaEncoder(std::shared_ptr<Projector::Impl> projector, std::function<void()> on_ready,
               std::function<void()> before_encode = {}, bool own_thread = true);
  ~MediaEncoder();
  MediaEncoder(const MediaEncoder &) = delete;
  MediaEncoder &operator=(const MediaEncoder &) = delete;

  void push(std::shared_ptr<MediaChunk> m);
  // Images queued or being encoded.
  std::size_t pending() const;
  // Changes whenever an image is done; odd while any is being encoded (with
  // its own thread, also while any is queued: the thread starts on it at
  // once). Equal and even before and after a decode: the encoder left the
  // cores to it all along.
  std::uint64_t activity() const;
  struct Counters {
    std::uint64_t encoded = 0;  // images the encoder ran on (failed ones included)
    std::uint64_t failed = 0;   // of which failed
    double seconds = 0;         // its time on them
  };
  Counters counters() const;
  // Encodes up to `max` queued images on the calling thread, now (no gate);
  // returns what this call did.
  Counters encode(std::size_t max);
  // Tests: runs on the encoder thread before each encode; one that throws
  // fails that image (Errc::backend with its message) as the encoder would.
  void set_hook(std::function<void()> hook);

 private:
  void loop();
  // Under mu_: the next queued image somebody still holds, counted busy;
  // null when there is none.
  std::shared_ptr<MediaChunk> take_locked();
  // Encodes a taken image with no lock held, then counts it done (into
  // `mine` too) and calls on_ready_.
  void encode_taken(std::shared_ptr<MediaChunk> m, bool gate, Counters &mine);

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
  bool own_thread_ = true;
  std::thread thread_;  // last: starts after everything it reads
};

}  // namespace weft::detail
