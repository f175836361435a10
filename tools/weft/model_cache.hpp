// Where the CLI keeps generated models when no --model is given.
#pragma once

#include <functional>
#include <string>

#include "weft/train.hpp"
#include "weft/make_model.hpp"

namespace weft_cli {

// $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft, else ~/.cache/weft.
std::string cache_dir();
// The path of a generated preset model, generating it (with a progress bar)
// when it is not there yet. "npc" and "npc-draft" train with
// weft::npc_train_params(preset), cached by content (ensure_npc_model).
// `arch`: the model family (MakeModelParams::arch) of a random-weight preset.
std::string ensure_preset_model(const std::string &preset, unsigned seed, weft::ModelArch arch = weft::ModelArch::llama);
// The cached trained model for these training parameters (params.out is
// ignored): cache_dir()/models/<preset>-<npc_model_key>.gguf (npc or
// npc-draft), trained first when missing, with a message and a progress bar
// on stderr unless quiet.
std::string ensure_npc_model(weft::TrainParams params, bool quiet = false);
// A TrainParams::on_progress that draws a bar with loss and accuracy on a
// terminal and prints a line per tenth of the run otherwise, labelled with
// the preset's name; none if quiet.
std::function<void(const weft::TrainProgress &)> train_progress(bool quiet, const std::string &preset = "npc");
// A TrainParams::cancel that turns Ctrl-C / SIGTERM into a clean
// Errc::cancelled (nothing written) instead of a kill mid-write.
std::function<bool()> cancel_on_interrupt();

}  // namespace weft_cli
