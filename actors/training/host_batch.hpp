// What the trainer and the evaluator share: turning a batch into the
// model's host-side inputs, with the checks that give bad data a clear
// error. (The worker side of the parameter-server protocol, which they
// share too, is runtime/ps/ps_client.hpp.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/runtime/core/batch.hpp"

namespace af {

/// One batch as the model takes it.
struct host_batch {
  int n = 0;
  uint64_t epoch = 0;
  std::vector<float> x;         // dense inputs [n, input...]
  // Embedding inputs: local rows [n, F]; with named inputs, followed by
  // the numeric inputs' floats [n, D] (their bits; the features layer).
  std::vector<int32_t> local;
  size_t ids = 0;               // how many of `local` are local rows
  std::vector<int64_t> rows;    // embedding: table row of each local row
  std::vector<int32_t> classes; // softmax labels
  std::vector<float> binary;    // sigmoid labels, 0 or 1
  std::vector<float> reference; // optional reference scores
  // The dense input was left where it is (to_host's `input_in_place`):
  // x is empty; the images need [h, w, c] -> [c, h, w] when `to_chw`.
  bool input_in_place = false;
  bool to_chw = false;
  int64_t height = 0, width = 0, channels = 0; // of each image, if to_chw
  // A TorchScript model's inputs (torchscript_model::stage): opaque here.
  std::shared_ptr<const void> staged;

  const void* input() const noexcept {
    return local.empty() ? static_cast<const void*>(x.data()) : local.data();
  }
  size_t input_bytes() const noexcept {
    return local.empty() ? x.size() * sizeof(float)
                         : local.size() * sizeof(int32_t);
  }
  const void* labels() const noexcept {
    return classes.empty() ? static_cast<const void*>(binary.data())
                           : classes.data();
  }
  size_t label_bytes() const noexcept {
    return classes.empty() ? binary.size() * sizeof(float)
                           : classes.size() * sizeof(int32_t);
  }
};

/// Converts `b` into `out`. u8 inputs are scaled to [0, 1]; images shaped
/// [height, width, channels] (image_decode's layout) are transposed to the
/// [channels, height, width] of an input_shape that says so; i64 ids (an
/// embedding first layer) are checked against the table and mapped to
/// local rows; a model with named inputs (training_spec::inputs) gets its
/// ids mapped so, into the one table that holds all of its tables, and its
/// numeric inputs after them. Throws af::input_error naming the field, the record and the
/// value when the batch does not fit the model (bad data fails the job even
/// though a trainer replica may otherwise fail alone). `reference`: a field
/// to copy as f32 into out.reference, or "". `input_in_place`: an f32 input
/// is checked but not copied (a trainer reads it where it is, in its GPU's
/// memory); out.x stays empty and out.to_chw says whether to transpose.
void to_host(const training_spec& spec, const batch& b, host_batch& out,
             const std::string& reference = "",
             bool input_in_place = false);

} // namespace af
