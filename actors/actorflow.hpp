// Everything an application needs to run ActorFlow pipelines inside its own
// CAF actor system (docs/embedding.md; CMake: find_package(ActorFlow 0.2),
// target ActorFlow::actors).
//
//   caf::actor_system_config cfg;
//   af::add_message_types(cfg);                 // runtime/system.hpp
//   af::apply(af::engine_options{}, cfg);       // threads, scheduler
//   caf::actor_system sys{cfg};
//
//   af::registry reg;
//   af::register_builtin_stages(reg);           // actors/builtin.hpp
//   reg.add(af::map_stage(...));                // runtime/custom_stage.hpp
//
//   auto topo = af::value_or_throw(af::load_topology_file(path, reg));
//   // or: af::pipeline p; p.add(...); auto topo = p.build(reg);
//   af::job_options opts;
//   opts.listener = my_actor;                   // runtime/job.hpp
//   auto job = af::job::start(sys, topo, reg, opts);
//   af::run_result result = job.wait();
//
// Headers (installed under <prefix>/include/actorflow, included as here):
//   runtime/system.hpp       message types, engine options, networking, TLS
//   runtime/registry.hpp     stage types and services
//   runtime/stage.hpp        stage_logic, emitter, stage_info
//   runtime/custom_stage.hpp map_stage, stage_type_of, stage_options
//   runtime/batch.hpp, runtime/tensor.hpp   the items on every edge
//   runtime/topology.hpp     loading and validating topology text
//   runtime/pipeline.hpp     building a topology in code
//   runtime/job.hpp          running a job; listener and outlet messages
//   runtime/node.hpp         serving stages to other processes' jobs
//   runtime/version.hpp      af::version
//   actors/builtin.hpp       the built-in stage types
#pragma once

#include "actors/builtin.hpp"
#include "runtime/batch.hpp"
#include "runtime/custom_stage.hpp"
#include "runtime/job.hpp"
#include "runtime/node.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/registry.hpp"
#include "runtime/stage.hpp"
#include "runtime/system.hpp"
#include "runtime/tensor.hpp"
#include "runtime/topology.hpp"
#include "runtime/version.hpp"
