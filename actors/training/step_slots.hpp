// step_slots: a bound on how many of a trainer stage's replicas in one
// process run a step at a time (trainer { concurrent_steps }).
//
// Trainers are blocking actors, each on its own thread. With more of them
// than cores every step computes on parameters that many others are about
// to update (staleness), and the cores are no busier for it. A trainer
// takes a slot before it pulls and gives it back once it pushed, so a step
// reads the parameters the steps before it updated.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace af {

class step_slots {
public:
  explicit step_slots(int64_t count);

  /// The slots every caller with the same `key` shares in this process, as
  /// long as one of them holds them; `count` is the first caller's.
  static std::shared_ptr<step_slots> shared(const std::string& key,
                                            int64_t count);

  /// A slot held until the lease is destroyed (or moved from).
  class lease {
  public:
    lease() = default;
    lease(lease&& other) noexcept;
    lease& operator=(lease&& other) noexcept;
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease();
    bool held() const { return owner_ != nullptr; }

  private:
    friend class step_slots;
    explicit lease(step_slots* owner) : owner_(owner) {}
    step_slots* owner_ = nullptr;
  };

  /// Blocks until a slot is free and takes it.
  lease acquire();

  int64_t count() const { return count_; }
  /// Slots taken now.
  int64_t taken() const;

private:
  void give_back();

  const int64_t count_;
  mutable std::mutex mtx_;
  std::condition_variable freed_;
  int64_t taken_ = 0;
};

} // namespace af
