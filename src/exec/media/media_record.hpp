// A conversation's images in its state (version 4): each as its embeddings
// once encoded, else as its source, with the projector named by fingerprint;
// on load, checked against this executor's projector and given new ids.
#pragma once

#include <map>
#include <memory>

#include "exec/executor_core.hpp"
#include "state/state_codec.hpp"

namespace weft::detail {

// c's images into r (under mu): embeddings when encoded, else (queued or
// failed) the source, which the loader encodes again.
void record_media(const ExecutorCore &x, const Conv &c, ConvRecord &r);

// Images of one load (a state, or all of a snapshot's): saved id -> this
// executor's chunk, so a snapshot's forks share their images again.
using MediaIds = std::map<std::uint64_t, std::shared_ptr<MediaChunk>>;

struct ResolvedMedia {
  std::vector<MediaSpan> spans;
  std::vector<std::shared_ptr<MediaChunk>> to_encode;  // made from a source here
};

// r's images as this executor's (on the loading thread, no lock held):
// rewrites their positions in r.history and r.queue to the new ids; an
// image saved as its source is tokenized again here and encoded on the
// encoder thread. Throws Errc::incompatible when this executor has no
// projector or another one (by fingerprint or width), or the source no
// longer makes the same number of positions; Errc::corrupt when two records
// of a snapshot disagree on one image; the source's own errors as
// Conversation::prompt_image.
ResolvedMedia resolve_media(ExecutorCore &x, ConvRecord &r, MediaIds &ids);

}  // namespace weft::detail
