// Everything an application needs to run ActorFlow pipelines inside its own
// CAF actor system (docs/embedding.md; CMake: find_package(ActorFlow 0.2),
// target ActorFlow::actors).
//
//   caf::actor_system_config cfg;
//   af::add_message_types(cfg);                 // runtime/net/system.hpp
//   af::apply(af::engine_options{}, cfg);       // threads, scheduler
//   caf::actor_system sys{cfg};
//
//   af::registry reg;
//   af::register_builtin_stages(reg);           // actors/builtin.hpp
//   reg.add(af::map_stage(...));                // runtime/stage/custom_stage.hpp
//
//   auto topo = af::value_or_throw(af::load_topology_file(path, reg));
//   // or: af::pipeline p; p.add(...); auto topo = p.build(reg);
//   af::job_options opts;
//   opts.listener = my_actor;                   // runtime/job/job.hpp
//   auto job = af::job::start(sys, topo, reg, opts);
//   af::run_result result = job.wait();
//
// The main headers (installed under <prefix>/include, included as
// <actorflow/...>; every header outside a detail/ folder is installed):
//   runtime/net/system.hpp          message types, engine options, networking, TLS
//   runtime/stage/registry.hpp      stage types and services
//   runtime/stage/stage.hpp         stage_logic, emitter, stage_info
//   runtime/stage/custom_stage.hpp  map_stage, stage_type_of, stage_options
//   runtime/core/batch.hpp, runtime/core/tensor.hpp   the items on every edge
//   runtime/topology/topology.hpp   loading and validating topology text
//   runtime/topology/pipeline.hpp   building a topology in code
//   runtime/job/job.hpp             running a job; listener and outlet messages
//   runtime/job/node.hpp            serving stages to other processes' jobs
//   version.hpp                     af::version
//   actors/builtin.hpp              the built-in stage types
#pragma once

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/core/batch.hpp"
#include "actorflow/runtime/core/tensor.hpp"
#include "actorflow/runtime/job/job.hpp"
#include "actorflow/runtime/job/node.hpp"
#include "actorflow/runtime/net/system.hpp"
#include "actorflow/runtime/stage/custom_stage.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/stage/stage.hpp"
#include "actorflow/runtime/topology/pipeline.hpp"
#include "actorflow/runtime/topology/topology.hpp"
#include "actorflow/version.hpp"
