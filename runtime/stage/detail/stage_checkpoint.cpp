// A stage replica's checkpoints (docs/checkpoints.md, runtime/protocol/stream.hpp):
// its state at the cut, and loading it again on --resume.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actorflow/runtime/protocol/stream.hpp"
#include "actorflow/runtime/stage/detail/stage_state.hpp"
#include "actorflow/runtime/state/state_io.hpp"

namespace af::detail {

namespace {

// The stage's checkpoint state: the runtime's epoch counters, then the
// logic's snapshot().
const std::string stage_state_tag = "stage/1";

std::string save_stage(stage_state& st) {
  std::vector<uint64_t> ended;
  for (auto& e : st.in.edges())
    ended.push_back(e.epochs_ended);
  // save_state(tag, forwarded, ended, logic), with the logic's snapshot
  // (a cache's whole epoch) copied once: the values before it, and its
  // length as the serializer writes a string's, then its bytes.
  auto logic = st.setup.logic->snapshot();
  std::vector<char> head;
  caf::binary_serializer sink{nullptr, head};
  auto forwarded = st.in.epochs_forwarded();
  auto size = logic.size();
  if (sink(forwarded, ended) || sink.begin_sequence(size))
    throw std::runtime_error("cannot serialize the " + stage_state_tag
                             + " state");
  return frame_state(stage_state_tag, head, logic);
}

} // namespace

void restore_stage(stage_state& st, const std::string& bytes) {
  uint64_t forwarded = 0;
  std::vector<uint64_t> ended;
  std::string logic;
  load_state(bytes, stage_state_tag, forwarded, ended, logic);
  if (ended.size() != st.in.edges().size())
    throw std::invalid_argument("the checkpoint has "
                                + std::to_string(ended.size())
                                + " inputs for this replica, the topology "
                                + std::to_string(st.in.edges().size()));
  st.in.set_epochs_forwarded(forwarded);
  for (size_t i = 0; i < ended.size(); ++i)
    st.in.edges()[i].epochs_ended = ended[i];
  st.setup.logic->restore(logic);
}

// Every input delivered the pending barrier or ended.
bool cut_reached(const stage_state& st) {
  auto& edges = st.in.edges();
  for (size_t i = 0; i < edges.size(); ++i)
    if (!edges[i].ended && !st.barrier_in[i])
      return false;
  return true;
}

// Completes the pending checkpoint (cut_reached, inputs processed).
void take_cut(stage_self self) {
  auto& st = self->state;
  st.checkpoint_pending = false;
  auto step = st.setup.logic->quiesce();
  auto state = save_stage(st);
  if (st.coordinator)
    self->send(st.coordinator, checkpoint_atom::value, st.checkpoint_id,
               st.label, std::move(state), step, false);
  std::fill(st.barrier_in.begin(), st.barrier_in.end(), false);
  if (!st.out.empty())
    st.outputs.push_back(
      output_event{output_event::barrier, batch{}, st.checkpoint_id});
  st.paused = true;
}

} // namespace af::detail
