#include "runtime/system.hpp"

#include <chrono>

#include <caf/io/middleman.hpp>

#include <stdexcept>
#include <thread>

#include <caf/atom.hpp>

#include "runtime/batch.hpp"
#include "runtime/ps.hpp"
#include "runtime/stage_stats.hpp"
#include "runtime/stream.hpp"

namespace af {

void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<tensor>("af::tensor");
  cfg.add_message_type<batch>("af::batch");
  cfg.add_message_type<std::vector<batch>>("af::batch_list");
  cfg.add_message_type<stream_error>("af::stream_error");
  cfg.add_message_type<stage_stats>("af::stage_stats");
  cfg.add_message_type<wiring>("af::wiring");
  cfg.add_message_type<ps_slice>("af::ps_slice");
  cfg.add_message_type<std::vector<ps_slice>>("af::ps_slice_list");
  cfg.add_message_type<ps_pull>("af::ps_pull");
  cfg.add_message_type<ps_params>("af::ps_params");
  cfg.add_message_type<ps_push>("af::ps_push");
  cfg.add_message_type<ps_push_ack>("af::ps_push_ack");
  cfg.add_message_type<ps_progress>("af::ps_progress");
  cfg.add_message_type<ps_shard_stats>("af::ps_shard_stats");
}

void enable_network(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{std::chrono::milliseconds{500}});
  cfg.set("middleman.connection-timeout",
          caf::timespan{std::chrono::seconds{3}});
}

void apply(const engine_options& opts, caf::actor_system_config& cfg) {
  size_t threads = opts.threads;
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  cfg.set("scheduler.max-threads", threads);
  if (opts.scheduler == "stealing")
    cfg.set("scheduler.policy", caf::atom("stealing"));
  else if (opts.scheduler == "sharing")
    cfg.set("scheduler.policy", caf::atom("sharing"));
  else
    throw std::invalid_argument("unknown scheduler policy '" + opts.scheduler
                                + "' (use stealing or sharing)");
}

engine_options engine_options_of(const topology::Runtime& rt) {
  engine_options opts;
  if (rt.threads() > 0)
    opts.threads = static_cast<size_t>(rt.threads());
  if (rt.has_scheduler())
    opts.scheduler = rt.scheduler();
  return opts;
}

} // namespace af
