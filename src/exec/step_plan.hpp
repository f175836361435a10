// StepPlan: what the schedule stage decided for one step, handed by value to
// the run stage (step.cpp reads schedule -> run -> update). Nothing in it is
// read after the step; ExecutorCore keeps the last one only to reuse its
// buffers, so a steady-state step does not allocate. Internal; under the
// executor's state lock.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/conv.hpp"
#include "kv/kv_manager.hpp"

namespace weft::detail {

// A conversation's share of the planned batch, decoded over one or more
// llama_decode calls.
struct Segment {
  Conv *conv;
  std::uint32_t n;           // planned tokens
  std::uint64_t epoch = 0;   // the conversation's epoch when planned
  std::uint32_t start = 0;   // its cache position when planned
  std::uint32_t done = 0;    // decoded so far
  std::uint32_t sliced = 0;  // handed to micro-batches so far
  AdapterConfigPtr adapters;  // decoded under (null: the base model)
  bool failed = false;
  bool counted = false;  // counted in StepResult::conversations
  // Speculative decoding: `draft` of the `n` tokens are drafts after the
  // sampled one, StepPlan::drafts[draft_at, draft_at + draft); such a
  // segment goes whole into one llama_decode, logits at every position.
  std::uint32_t draft = 0;
  std::uint32_t draft_at = 0;
};

// Part of one llama_decode call: `n` tokens of segment `seg` (the run
// stage slices the plan's segments into these).
struct Part {
  std::uint32_t seg;
  std::uint32_t n;
  bool output;           // its last token's logits are read (it ends the queue)
  std::uint32_t staged;  // when output: its logits' buffer in RunBuffers::staging
  // When output and its conversation is generating: its token is sampled
  // straight from llama.cpp's logits (RunBuffers::early[job]), not staged.
  std::int32_t job = -1;
  // A recurrent model's prompt end: its sequence (-1: none), whose state the
  // run stage copies with the lock released, and the copy, which the update
  // stage hands to the conversation's KV handle (KvManager::checkpoint).
  std::int32_t checkpoint_seq = -1;
  StateCheckpoint checkpoint;
};

// Media decoded in this step, from its embeddings (media.cpp): a whole
// non-causal image, or rows [offset, offset + rows) of a causal one, which
// goes in pieces over steps like a prompt (mtmd's helper splits those too).
struct MediaSegment {
  Conv *conv;
  std::shared_ptr<MediaChunk> chunk;
  std::uint64_t epoch = 0;   // the conversation's epoch when planned
  std::uint32_t start = 0;   // its cache position when planned
  std::uint32_t offset = 0;  // the chunk's first embedding decoded here
  std::uint32_t rows = 0;    // embeddings decoded here
  AdapterConfigPtr adapters;  // decoded under (null: the base model)
  bool output = false;        // it ends the queue: its last embedding's logits are read
  bool failed = false;
};

// One step's plan.
struct StepPlan {
  // Token segments: rank order, then grouped by adapter setting (groups.cpp).
  std::vector<Segment> segments;
  // Images' embeddings, decoded before the tokens (media.cpp).
  std::vector<MediaSegment> media;
  // A step with causal image rows: its two decodes as predicted (seconds;
  // 0 for a step without), which step() compares with what they took.
  double image_step_need = 0;
  // The callback (on_pressure) closed the executor while the step planned.
  bool closed = false;
  // Every segment's draft tokens (Segment::draft_at).
  std::vector<Token> drafts;

  bool empty() const { return segments.empty() && media.empty(); }
  // Empties it, keeping the buffers.
  void clear() {
    segments.clear();
    media.clear();
    image_step_need = 0;
    closed = false;
    drafts.clear();
  }
};

}  // namespace weft::detail
