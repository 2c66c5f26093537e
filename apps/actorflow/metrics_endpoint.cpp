#include "apps/actorflow/metrics_endpoint.hpp"

#include <cctype>
#include <map>
#include <mutex>
#include <stdexcept>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

namespace af::cli {

namespace {

std::string sanitized(const std::string& s) {
  std::string out;
  for (char c : s)
    out += std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' ? c
                                                                         : '_';
  return out;
}

} // namespace

prometheus_name prometheus_name_of(const std::string& tag) {
  auto first = tag.find('/');
  if (first == std::string::npos)
    return {"actorflow_" + sanitized(tag), ""};
  auto head = tag.substr(0, first);
  auto rest = tag.substr(first + 1);
  if (head == "job")
    return {"actorflow_job_" + sanitized(rest), ""};
  if (head == "stage") {
    auto second = rest.find('/');
    if (second != std::string::npos)
      return {"actorflow_stage_" + sanitized(rest.substr(second + 1)),
              rest.substr(0, second)};
  }
  return {"actorflow_" + sanitized(rest), head};
}

struct metrics_endpoint::families : prometheus::Collectable {
  mutable std::mutex mtx;
  std::vector<prometheus::MetricFamily> current;

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard<std::mutex> guard{mtx};
    return current;
  }
};

metrics_endpoint::metrics_endpoint(uint16_t port)
  : families_(std::make_shared<families>()) {
  auto address = "127.0.0.1:" + std::to_string(port);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception& ex) {
    throw std::runtime_error("--metrics-port: cannot listen on " + address
                             + ": " + ex.what());
  }
  exposer_->RegisterCollectable(families_);
}

metrics_endpoint::~metrics_endpoint() = default;

uint16_t metrics_endpoint::port() const {
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : static_cast<uint16_t>(ports.front());
}

void metrics_endpoint::update(int64_t step, const std::vector<metric>& values) {
  std::map<std::string, prometheus::MetricFamily> by_name;
  auto add = [&](const prometheus_name& n, double v) {
    auto& f = by_name[n.name];
    f.name = n.name;
    f.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric m;
    if (!n.stage.empty())
      m.label.push_back({"stage", n.stage});
    m.gauge.value = v;
    f.metric.push_back(std::move(m));
  };
  add({"actorflow_step", ""}, static_cast<double>(step));
  for (auto& m : values)
    add(prometheus_name_of(m.name), m.value);
  std::vector<prometheus::MetricFamily> out;
  out.reserve(by_name.size());
  for (auto& [name, f] : by_name) {
    f.help = name == "actorflow_step"
               ? "The job's global step (TensorBoard's x axis)"
               : "See docs/monitoring.md";
    out.push_back(std::move(f));
  }
  std::lock_guard<std::mutex> guard{families_->mtx};
  families_->current = std::move(out);
}

} // namespace af::cli
