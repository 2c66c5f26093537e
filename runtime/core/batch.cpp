// af::batch: the item that travels on every stream edge. Declared in
// runtime/core/batch.hpp.
#include "actorflow/runtime/core/batch.hpp"

#include <stdexcept>

namespace af {

const tensor* batch::find(const std::string& name) const noexcept {
  for (auto& f : fields)
    if (f.name == name)
      return &f.value;
  return nullptr;
}

const tensor& batch::at(const std::string& name) const {
  if (auto* t = find(name))
    return *t;
  throw std::out_of_range("batch has no tensor named '" + name + "'");
}

const tensor& batch::field(const std::string& name) const {
  if (auto* t = find(name))
    return *t;
  std::string have;
  for (auto& f : fields)
    have += (have.empty() ? "" : ", ") + f.name;
  throw input_error("the batch has no field '" + name + "' (it has: " + have
                    + ")");
}

void batch::set(std::string name, tensor value) {
  for (auto& f : fields)
    if (f.name == name) {
      f.value = std::move(value);
      return;
    }
  fields.push_back(named_tensor{std::move(name), std::move(value)});
}

int64_t batch::records() const noexcept {
  return fields.empty() ? 0 : fields.front().value.rows();
}

uint64_t batch::byte_size() const noexcept {
  uint64_t n = 0;
  for (auto& f : fields)
    n += f.value.byte_size();
  return n;
}

} // namespace af
