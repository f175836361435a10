// A conversation's adapter settings in its state (version 3): written by
// fingerprint, resolved on load against the adapters loaded for the model.
#pragma once

#include "exec/executor_core.hpp"
#include "state/state_codec.hpp"

namespace weft::detail {

// c's current setting and history spans, into r.
void record_adapters(const Conv &c, ConvRecord &r);

struct ResolvedAdapters {
  AdapterConfigPtr current;
  AdapterSpans spans;
  bool any = false;  // some setting is not the base model
};

// r's settings as this executor's adapters. Throws Errc::not_found naming an
// adapter no Model::load_adapter of this model has loaded (by name and
// fingerprint), Errc::corrupt for a kind that does not match the loaded
// file's, and make_adapter_config's errors.
ResolvedAdapters resolve_adapters(const ExecutorCore &x, const ConvRecord &r);

}  // namespace weft::detail
