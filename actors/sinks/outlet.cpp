// outlet: a sink that hands every batch to an actor of the embedding
// application as a request, at most `in_flight` unanswered. Declared in
// actors/sinks/outlet.hpp.
#include "actorflow/actors/sinks/outlet.hpp"

#include <deque>
#include <optional>
#include <stdexcept>

#include <caf/actor_system.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/sec.hpp>

#include "actorflow/runtime/job/job.hpp"

namespace af {

namespace {

struct outlet_config {
  int64_t in_flight = 4; // batches delivered and not yet answered
};

outlet_config outlet_config_of(const topology::Stage& s) {
  outlet_config c;
  if (s.outlet().has_in_flight())
    c.in_flight = s.outlet().in_flight();
  return c;
}

class outlet : public stage_logic {
public:
  outlet(caf::actor_system& sys, std::string name, caf::actor dest,
         size_t in_flight)
    : sys_{sys},
      name_{std::move(name)},
      dest_{std::move(dest)},
      in_flight_{in_flight} {}

  void process(batch&& item, emitter&) override {
    // Made here, on the replica's own thread, which then waits in it.
    if (!self_)
      self_.emplace(sys_);
    pending_.push_back((*self_)->request(dest_, caf::infinite,
                                      outlet_atom::value, name_,
                                      std::move(item)));
    while (pending_.size() >= in_flight_)
      await_oldest();
  }

  // The job ends only after the application answered every batch.
  void finish(emitter&) override {
    while (!pending_.empty())
      await_oldest();
    self_.reset();
  }

private:
  using handle = decltype(std::declval<caf::scoped_actor&>()->request(
    std::declval<caf::actor&>(), caf::infinite, outlet_atom::value,
    std::string{}, batch{}));

  void await_oldest() {
    auto h = pending_.front();
    pending_.pop_front();
    std::string failure;
    h.receive([] {},
              [&](caf::error& err) {
                // The handler answered with a value: an answer all the same.
                if (err == caf::sec::unexpected_response)
                  return;
                failure = err == caf::sec::request_receiver_down
                            ? std::string{"the application's actor for "
                                          "this outlet has exited"}
                            : "the application's actor answered with an "
                                "error: "
                                + sys_.render(err);
              });
    if (!failure.empty())
      throw std::runtime_error(failure);
  }

  caf::actor_system& sys_;
  std::optional<caf::scoped_actor> self_;
  std::string name_;
  caf::actor dest_;
  size_t in_flight_;
  std::deque<handle> pending_;
};

} // namespace

stage_type outlet_type() {
  stage_type t;
  t.name = "outlet";
  t.kind = stage_kind::sink;
  t.description = "hands every batch to an actor of the embedding "
                  "application (job_options::outlets)";
  // Waits for the application's answers on its own thread.
  t.blocking = true;
  t.check = [](const topology::Stage& s) -> std::string {
    if (s.config_case() != topology::Stage::kOutlet
        && s.config_case() != topology::Stage::CONFIG_NOT_SET)
      return "expects an outlet { ... } block";
    if (s.outlet().has_in_flight() && s.outlet().in_flight() < 1)
      return "outlet.in_flight must be >= 1";
    if (s.hosts_size() > 0)
      return "an outlet runs in the process of the application that started "
             "the job: remove its hosts";
    return {};
  };
  t.make = [](const stage_info& info, const topology::Stage& s) {
    if (!info.context || info.context->system == nullptr)
      throw std::runtime_error("an outlet runs only inside a job");
    auto it = info.context->outlets.find(info.name);
    if (it == info.context->outlets.end() || !it->second)
      throw std::runtime_error(
        "no actor for this outlet: set job_options::outlets[\"" + info.name
        + "\"] to the actor that receives its batches (outlets serve "
          "applications that embed ActorFlow, docs/embedding.md; `actorflow "
          "run` has none)");
    auto cfg = outlet_config_of(s);
    return std::make_shared<outlet>(*info.context->system, info.name,
                                    it->second,
                                    static_cast<size_t>(cfg.in_flight));
  };
  return t;
}

} // namespace af
