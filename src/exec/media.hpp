// A conversation's images (Conv::media): where they sit in its positions,
// and the edits that must keep each one whole. Internal; under the
// executor's state lock.
#pragma once

#include <cstdint>

#include "exec/conv.hpp"

namespace weft::detail {

// The image starting exactly at c's next undecoded position, if any.
const MediaSpan *media_front(const Conv &c);
// Queued tokens before the first image still queued (all of them without one).
std::uint32_t text_run(const Conv &c);
// The start of the image holding position pos, else pos.
std::uint32_t media_floor(const Conv &c, std::uint32_t pos);
// Throws Errc::invalid_argument when position pos falls strictly inside an
// image (a cut there would leave half of it).
void check_media_cut(const Conv &c, std::uint32_t pos, const char *what);
// Forgets images at or past position n (the conversation now ends there).
void media_truncate(Conv &c, std::uint32_t n);
// Forgets images within [p0, p1) and moves later ones down by p1 - p0.
void media_erase(Conv &c, std::uint32_t p0, std::uint32_t p1);

}  // namespace weft::detail
