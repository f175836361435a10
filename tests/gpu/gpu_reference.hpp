// The gpu label's models and its independent path: the tiny model with every
// layer (and with one layer) on the GPU device, and raw llama.cpp on the CPU
// alone (no GPU device at all) as the reference every GPU result is held to.
#pragma once

#include <llama.h>

#include <string>
#include <vector>

#include "reference.hpp"

namespace weft_gpu {

// tiny.gguf with n_gpu_layers = -1 (both layers and the output layer on
// the device) and with n_gpu_layers = 2 (llama.cpp counts the output layer
// as the last: layer 1 and the output layer on the device, layer 0 and its
// KV cells on the CPU, so the cache is split over both).
const weft::Model &gpu_tiny();
const weft::Model &partial_tiny();

// The GPU device the tests run on ("llvmpipe (LLVM 15.0.6, 256 bits)" on
// lavapipe); the suite fails at start when there is none.
std::string device_name();

// Logits of the last of `tokens` from raw llama.cpp on the CPU: tiny loaded
// with an empty device list (no GPU backend in its scheduler, so no op is
// offloaded), decoded alone in chunks of `chunk`.
std::vector<float> cpu_logits(const std::vector<weft::Token> &tokens, int chunk = 64);

// The device's noise floor (nmse), the larger of two measurements on raw
// llama.cpp over seeded random sequences (fewer than the CPU tests take:
// lavapipe is slow): (a) the same sequence decoded alone
// on the device and on the CPU (the kernels' difference), (b) sequences
// decoded beside others in one batch vs alone, on the device (the batch
// noise the CPU tests measure, tests/reference.cpp). Cached beside the test
// models (gpu-floor.txt), keyed by model, device and attention kernel.
struct DeviceFloor {
  double cross = 0;  // (a)
  double batch = 0;  // (b)
  double floor() const { return cross > batch ? cross : batch; }
};
// `n_gpu_layers` is the one `gpu_model` was loaded with (part of the key:
// the model's fingerprint is its file's).
DeviceFloor device_floor(const weft::Model &gpu_model, int n_gpu_layers);

// Every "same logits" assertion of the gpu label: 8x the device floor, as
// the CPU tests allow 8x theirs (at least 1e-9 when the floor is 0).
double gpu_tolerance(const weft::Model &gpu_model, int n_gpu_layers);

}  // namespace weft_gpu
