// The defaults of stage_logic and the small helpers of runtime/stage/stage.hpp;
// the replica actor that runs a stage is in runtime/stage/detail/stage_actor.cpp.
#include "actorflow/runtime/stage/stage.hpp"

#include <stdexcept>

#include "actorflow/runtime/stage/replica_label.hpp"

namespace af {

emitter::~emitter() = default;
stage_logic::~stage_logic() = default;

bool stage_logic::produce(emitter&) {
  return false;
}

void stage_logic::process(batch&&, emitter&) {
}

void stage_logic::process_from(std::string_view, batch&& item, emitter& out) {
  process(std::move(item), out);
}

void stage_logic::end_of_epoch(uint64_t, emitter&) {
}

void stage_logic::finish(emitter&) {
}

std::string stage_logic::snapshot() const {
  return {};
}

void stage_logic::restore(const std::string& state) {
  if (!state.empty())
    throw std::invalid_argument("this stage keeps no position to restore");
}

uint64_t stage_logic::quiesce() {
  return 0;
}

void stage_logic::resume() {
}

size_t stage_logic::held() const {
  return 0;
}

size_t stage_logic::most_held() const {
  return 0;
}

void stage_logic::release(emitter&) {
}

void stage_logic::take_over(uint32_t, uint64_t) {
  throw std::logic_error("this stage type cannot take over a lost "
                         "replica's input");
}

void stage_logic::metrics(std::vector<metric>&) const {
}

void stage_logic::take_scalars(std::vector<scalar_event>&) {}

void stage_logic::take_histograms(std::vector<histogram_summary>&) {
}

const std::vector<caf::actor>&
job_context::service(const std::string& name) const {
  static const std::vector<caf::actor> none;
  auto it = services.find(name);
  return it == services.end() ? none : it->second;
}

std::string replica_label(const std::string& name, uint32_t replica) {
  return name + "[" + std::to_string(replica) + "]";
}

std::string stage_info::label() const {
  return replica_label(name, replica);
}

} // namespace af
