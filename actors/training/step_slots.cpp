// step_slots: a bound on how many of a trainer stage's replicas in one
// process run a step at a time (trainer { concurrent_steps }). Declared in
// actors/training/step_slots.hpp.
#include "actorflow/actors/training/step_slots.hpp"

#include <map>
#include <stdexcept>

namespace af {

step_slots::step_slots(int64_t count) : count_(count) {
  if (count < 1)
    throw std::invalid_argument("step_slots: count must be >= 1, got "
                                + std::to_string(count));
}

std::shared_ptr<step_slots> step_slots::shared(const std::string& key,
                                               int64_t count) {
  static std::mutex mtx;
  static std::map<std::string, std::weak_ptr<step_slots>> all;
  std::lock_guard<std::mutex> guard{mtx};
  for (auto i = all.begin(); i != all.end();) // forget the expired ones
    i = i->second.expired() ? all.erase(i) : std::next(i);
  auto& entry = all[key];
  if (auto s = entry.lock())
    return s;
  auto s = std::make_shared<step_slots>(count);
  entry = s;
  return s;
}

step_slots::lease step_slots::acquire() {
  std::unique_lock<std::mutex> guard{mtx_};
  freed_.wait(guard, [&] { return taken_ < count_; });
  ++taken_;
  return lease{this};
}

int64_t step_slots::taken() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return taken_;
}

void step_slots::give_back() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    --taken_;
  }
  freed_.notify_one();
}

step_slots::lease::lease(lease&& other) noexcept : owner_(other.owner_) {
  other.owner_ = nullptr;
}

step_slots::lease& step_slots::lease::operator=(lease&& other) noexcept {
  if (this != &other) {
    if (owner_ != nullptr)
      owner_->give_back();
    owner_ = other.owner_;
    other.owner_ = nullptr;
  }
  return *this;
}

step_slots::lease::~lease() {
  if (owner_ != nullptr)
    owner_->give_back();
}

} // namespace af
