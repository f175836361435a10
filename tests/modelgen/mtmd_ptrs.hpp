// Owning pointers for mtmd's handles in the projector tests.
#pragma once

#ifdef WEFT_HAVE_MTMD
#include <mtmd.h>

#include <memory>

struct MtmdFree {
  void operator()(mtmd_context *c) const { mtmd_free(c); }
};
struct ChunksFree {
  void operator()(mtmd_input_chunks *c) const { mtmd_input_chunks_free(c); }
};
struct BitmapFree {
  void operator()(mtmd_bitmap *b) const { mtmd_bitmap_free(b); }
};
using MtmdPtr = std::unique_ptr<mtmd_context, MtmdFree>;
using ChunksPtr = std::unique_ptr<mtmd_input_chunks, ChunksFree>;
using BitmapPtr = std::unique_ptr<mtmd_bitmap, BitmapFree>;
#endif  // WEFT_HAVE_MTMD
