#include "runtime/job_part.hpp"

#include <sstream>
#include <stdexcept>

namespace af {

std::string format_job_part(const job_part& p) {
  std::string s = "actorflow-job 1\ntopology " + p.topology + "\nstep "
                  + std::to_string(p.step) + "\n";
  for (auto& [label, ended] : p.ended) {
    auto it = p.steps.find(label);
    s += "replica " + label + (ended ? " ended " : " live ")
         + std::to_string(it == p.steps.end() ? 0 : it->second) + "\n";
  }
  for (auto& label : p.lost)
    s += "replica " + label + " lost\n";
  return s;
}

job_part parse_job_part(const std::string& text, const std::string& where) {
  job_part p;
  std::istringstream in{text};
  std::string line, magic;
  auto bad = [&](const std::string& why) {
    return std::runtime_error(where + ": the job part is damaged: " + why);
  };
  if (!std::getline(in, line) || line != "actorflow-job 1")
    throw bad("it does not start with 'actorflow-job 1'");
  while (std::getline(in, line)) {
    std::istringstream words{line};
    std::string key, a, b;
    words >> key;
    if (key == "topology") {
      p.topology = line.size() > 9 ? line.substr(9) : std::string{};
    } else if (key == "step" && (words >> p.step)) {
    } else if (key == "replica" && (words >> a >> b)) {
      uint64_t steps = 0;
      if (b == "lost")
        p.lost.insert(a);
      else if ((b == "live" || b == "ended") && (words >> steps)) {
        p.ended[a] = b == "ended";
        p.steps[a] = steps;
      } else
        throw bad("line '" + line + "'");
    } else {
      throw bad("line '" + line + "'");
    }
  }
  return p;
}

} // namespace af
