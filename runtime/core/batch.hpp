// af::batch: the item that travels on every stream edge.
//
// A batch is a set of named tensors that share their first dimension (the
// records it carries), plus the sequence number the producer gave it and the
// epoch it belongs to. Copying a batch shares the tensors' buffers.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "actorflow/runtime/core/tensor.hpp"

namespace af {

/// The stage's input is bad (a label out of range, a shape that does not
/// fit): the job stops whatever the stage type's failure policy.
class input_error : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

struct named_tensor {
  std::string name;
  tensor value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, named_tensor& x) {
  return f(caf::meta::type_name("af::named_tensor"), x.name, x.value);
}

struct batch {
  uint64_t seq = 0;
  uint64_t epoch = 0;
  std::vector<named_tensor> fields;

  /// The tensor called `name`, or nullptr. The pointer (and at()'s
  /// reference) is invalidated by set() and by changes to `fields`; copy
  /// the tensor (cheap: the buffer is shared) to keep it.
  const tensor* find(const std::string& name) const noexcept;
  /// The tensor called `name`; throws std::out_of_range naming it if absent.
  const tensor& at(const std::string& name) const;
  /// The tensor called `name`, for a stage that needs it; throws
  /// af::input_error (runtime/stage/stage.hpp: bad data, which fails the job)
  /// naming it and the fields the batch has: "the batch has no field 'x'
  /// (it has: image, label)".
  const tensor& field(const std::string& name) const;
  /// Adds or replaces the tensor called `name`. Does not check that its
  /// first dimension matches the other fields' (consumers such as the
  /// batcher and the trainer do, with an af::input_error).
  void set(std::string name, tensor value);
  /// Records carried: the first dimension of the first tensor (0 if none).
  int64_t records() const noexcept;
  /// Payload bytes of all tensors; what an edge's byte budget counts.
  uint64_t byte_size() const noexcept;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch& x) {
  return f(caf::meta::type_name("af::batch"), x.seq, x.epoch, x.fields);
}

} // namespace af
