// Where the CLI keeps generated models when no --model is given.
#pragma once

#include <string>

namespace weft_cli {

// $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft, else ~/.cache/weft.
std::string cache_dir();
// The path of a generated preset model, generating it (with a progress bar)
// when it is not there yet.
std::string ensure_preset_model(const std::string &preset, unsigned seed);

}  // namespace weft_cli
