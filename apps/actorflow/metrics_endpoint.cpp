// `actorflow run --metrics-port PORT`: the numbers the TensorBoard writer
// gets (actors/training/tensorboard_writer.hpp, progress_scalars) as
// Prometheus gauges over HTTP on 127.0.0.1. Declared in
// apps/actorflow/metrics_endpoint.hpp.
#include "apps/actorflow/metrics_endpoint.hpp"

#include <cctype>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <sys/socket.h>

#include <httplib.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

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
    return {"actorflow_" + sanitized(tag), "", ""};
  auto head = tag.substr(0, first);
  auto rest = tag.substr(first + 1);
  if (head == "job")
    return {"actorflow_job_" + sanitized(rest), "", ""};
  if (head == "stage") {
    auto second = rest.find('/');
    if (second != std::string::npos) {
      auto stage = rest.substr(0, second);
      auto metric = sanitized(rest.substr(second + 1));
      // "name[r]": one replica's figures (progress_scalars)
      auto open = stage.find('[');
      if (open != std::string::npos && open > 0 && stage.back() == ']'
          && open + 2 < stage.size()
          && stage.find_first_not_of("0123456789", open + 1)
               == stage.size() - 1)
        return {"actorflow_replica_" + metric, stage.substr(0, open),
                stage.substr(open + 1, stage.size() - open - 2)};
      return {"actorflow_stage_" + metric, stage, ""};
    }
  }
  return {"actorflow_" + sanitized(rest), head, ""};
}

// The gauges of the last update, and the HTTP server on its own thread.
// (Not prometheus-cpp's exposer: its civetweb starts threads with a small
// fixed stack, which fails in a binary linked with the CUDA libraries and
// their large thread-local storage.)
struct metrics_endpoint::state {
  std::mutex mtx;
  std::vector<prometheus::MetricFamily> current;
  httplib::Server http;
  int port = 0;
  std::thread thread;
};

metrics_endpoint::metrics_endpoint(uint16_t port)
  : state_(std::make_unique<state>()) {
  auto& st = *state_;
  st.http.Get("/metrics", [&st](const httplib::Request&,
                                httplib::Response& res) {
    std::vector<prometheus::MetricFamily> families;
    {
      std::lock_guard<std::mutex> guard{st.mtx};
      families = st.current;
    }
    res.set_content(prometheus::TextSerializer{}.Serialize(families),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which
  // a second job would share a taken port instead of failing.
  st.http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  auto address = "127.0.0.1:" + std::to_string(port);
  if (port == 0)
    st.port = st.http.bind_to_any_port("127.0.0.1");
  else if (st.http.bind_to_port("127.0.0.1", port))
    st.port = port;
  else
    st.port = -1;
  if (st.port <= 0)
    throw std::runtime_error("--metrics-port: cannot listen on " + address
                             + " (is the port taken?)");
  st.thread = std::thread{[&st] { st.http.listen_after_bind(); }};
}

metrics_endpoint::~metrics_endpoint() {
  state_->http.stop();
  if (state_->thread.joinable())
    state_->thread.join();
}

uint16_t metrics_endpoint::port() const {
  return static_cast<uint16_t>(state_->port);
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
    if (!n.replica.empty())
      m.label.push_back({"replica", n.replica});
    m.gauge.value = v;
    f.metric.push_back(std::move(m));
  };
  add({"actorflow_step", "", ""}, static_cast<double>(step));
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
  std::lock_guard<std::mutex> guard{state_->mtx};
  state_->current = std::move(out);
}

} // namespace af::cli
