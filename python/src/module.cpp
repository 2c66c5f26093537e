// actorflow._actorflow: the engine as a Python extension module. The
// Python package (python/actorflow/__init__.py) is the API users see; this
// module gives it topology checks, the outlet stream (stream.hpp) and
// DLPack export (arrays.hpp). docs/python.md documents both.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spdlog/spdlog.h>

#include "actorflow/actors/builtin.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/topology/topology.hpp"
#include "actorflow/version.hpp"
#include "python/src/arrays.hpp"
#include "python/src/stream.hpp"

namespace pyb = pybind11;
using namespace pybind11::literals;

namespace af::py {
namespace {

const registry& builtin() {
  static const registry reg = [] {
    registry r;
    register_builtin_stages(r);
    return r;
  }();
  return reg;
}

// `source` is a file's path when `is_file`, else topology text named
// `name` in messages.
load_result load(const std::string& source, const std::string& name,
                 bool is_file) {
  return is_file ? load_topology_file(source, builtin())
                 : load_topology_text(source, name, builtin());
}

std::vector<std::string> check(const std::string& source,
                               const std::string& name, bool is_file) {
  std::vector<std::string> out;
  pyb::gil_scoped_release nogil;
  for (auto& e : load(source, name, is_file).errors)
    out.push_back(e.to_string());
  return out;
}

pyb::dict stats_dict(const stage_stats& s) {
  pyb::dict metrics;
  for (auto& m : s.metrics)
    metrics[pyb::str(m.name)] = m.value;
  return pyb::dict("label"_a = s.stage, "stage"_a = s.stage_name,
                   "replica"_a = s.replica, "is_sink"_a = s.is_sink,
                   "items_in"_a = s.items_in, "records_in"_a = s.records_in,
                   "bytes_in"_a = s.bytes_in, "items_out"_a = s.items_out,
                   "records_out"_a = s.records_out,
                   "bytes_out"_a = s.bytes_out, "busy_s"_a = s.busy_s,
                   "wait_input_s"_a = s.wait_input_s,
                   "wait_credit_s"_a = s.wait_credit_s,
                   "epochs_ended"_a = s.epochs_ended, "metrics"_a = metrics);
}

pyb::dict progress_dict(const job_progress& p) {
  pyb::list stages;
  for (auto& s : p.stages)
    stages.append(stats_dict(s));
  return pyb::dict("elapsed_s"_a = p.elapsed_s, "items"_a = p.items,
                   "records"_a = p.records, "bytes"_a = p.bytes,
                   "stages"_a = stages);
}

pyb::dict result_dict(const run_result& r) {
  return pyb::dict("ok"_a = r.ok, "stopped"_a = r.stopped,
                   "error"_a = r.error,
                   "tolerated_failures"_a = r.tolerated_failures,
                   "restored"_a = r.restored, "checkpoints"_a = r.checkpoints,
                   "last_checkpoint"_a = r.last_checkpoint,
                   "restarts"_a = r.restarts,
                   "final"_a = progress_dict(r.final));
}

std::unique_ptr<stream> open(const std::string& source,
                             const std::string& name, bool is_file,
                             const std::string& outlet, int64_t epochs,
                             size_t threads) {
  pyb::gil_scoped_release nogil;
  auto loaded = load(source, name, is_file);
  if (!loaded.ok()) {
    std::string all;
    for (auto& e : loaded.errors)
      all += (all.empty() ? "" : "\n") + e.to_string();
    throw std::invalid_argument(all);
  }
  return std::make_unique<stream>(*loaded.topology,
                                  stream_options{outlet, epochs, threads});
}

// (0, fields, epoch, names of the bf16 fields) for a batch, (1, None,
// None, None) at the end, (2, None, None, None) when nothing came within
// `timeout_s`.
pyb::tuple next(stream& s, double timeout_s) {
  batch b;
  stream::status st;
  {
    pyb::gil_scoped_release nogil;
    st = s.next(b, std::chrono::milliseconds{
                     static_cast<int64_t>(timeout_s * 1000)});
  }
  switch (st) {
    case stream::status::batch: {
      pyb::list bf16;
      for (auto& f : b.fields)
        if (f.value.type() == dtype::bf16)
          bf16.append(pyb::str(f.name));
      return pyb::make_tuple(0, to_dict(b), b.epoch, bf16);
    }
    case stream::status::end:
      return pyb::make_tuple(1, pyb::none(), pyb::none(), pyb::none());
    case stream::status::waiting:
      break;
  }
  return pyb::make_tuple(2, pyb::none(), pyb::none(), pyb::none());
}

} // namespace
} // namespace af::py

PYBIND11_MODULE(_actorflow, m) {
  using af::py::stream;
  m.doc() = "ActorFlow's engine (use the actorflow package)";
  m.attr("version") = af::version;
  m.def("check", &af::py::check, "source"_a, "name"_a, "is_file"_a,
        "Every problem of a topology, as 'file:line: message'");
  pyb::class_<stream>(m, "_Stream")
    .def(pyb::init(&af::py::open), "source"_a, "name"_a, "is_file"_a,
         "outlet"_a, "epochs"_a, "threads"_a)
    .def("next", &af::py::next, "timeout_s"_a)
    .def("stop",
         [](stream& s) {
           pyb::gil_scoped_release nogil;
           s.stop();
         })
    .def(
      "close",
      [](stream& s, double limit_s) {
        pyb::gil_scoped_release nogil;
        s.close(std::chrono::milliseconds{static_cast<int64_t>(limit_s * 1000)});
      },
      "limit_s"_a)
    .def_property_readonly("outlet", &stream::outlet)
    .def("progress",
         [](const stream& s) -> pyb::object {
           auto p = s.progress();
           if (!p)
             return pyb::none();
           return af::py::progress_dict(*p);
         })
    .def("result",
         [](const stream& s) { return af::py::result_dict(s.result()); });
  m.def("to_dlpack", &af::py::to_dlpack, "array"_a, "bf16"_a,
        "A DLPack capsule over the array's memory");
  m.def(
    "set_log_level",
    [](const std::string& level) {
      auto l = spdlog::level::from_str(level);
      // from_str gives `off` for a name it does not know.
      if (l == spdlog::level::off && level != "off")
        throw std::invalid_argument("log level must be one of trace, debug, "
                                    "info, warn, error, off; not '"
                                    + level + "'");
      spdlog::set_level(l);
    },
    "level"_a, "The engine's log level (its log goes to stderr)");
}
