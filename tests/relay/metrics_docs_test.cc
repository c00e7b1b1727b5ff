// The metric names that files outside the code use — the alert rules (docker/alerts.yml),
// the Grafana dashboard (docker/grafana/) and the Debezium JMX table of
// docs/migrating-from-debezium.md — are metrics walrelay exports
// (src/relay/core/metric_names.h, the audit sidecar's src/audit/metric_names.h and the
// process series of src/metrics/process_metrics.cc): a renamed metric cannot silently
// disable an alert.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace walrelay::relay {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::set<std::string> Names(const std::string& text, const std::regex& re) {
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    names.insert((*it)[1].str());
  }
  return names;
}

TEST(MetricsDocsTest, AlertsAndDashboardUseExportedMetrics) {
  const std::string root = WALRELAY_SOURCE_DIR;
  std::set<std::string> exported =
      Names(Read(root + "/src/relay/core/metric_names.h"), std::regex("\"(walrelay_[a-z0-9_]+)\""));
  for (const std::string& name :
       Names(Read(root + "/src/audit/metric_names.h"), std::regex("\"(walrelay_[a-z0-9_]+)\""))) {
    exported.insert(name);
  }
  // The process series (src/metrics/process_metrics.cc): process_* and walrelay_heap_*.
  for (const std::string& name : Names(Read(root + "/src/metrics/process_metrics.cc"),
                                       std::regex("\"((?:walrelay|process)_[a-z0-9_]+)\""))) {
    exported.insert(name);
  }
  ASSERT_GT(exported.size(), 20u);
  ASSERT_EQ(exported.count("process_resident_memory_bytes"), 1u);
  const std::regex used("\\b((?:walrelay|process)_[a-z0-9_]+)");
  std::vector<std::string> files = {root + "/docker/alerts.yml",
                                    root + "/docs/migrating-from-debezium.md"};
  for (const auto& e : std::filesystem::directory_iterator(root + "/docker/grafana")) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  size_t checked = 0;
  for (const std::string& file : files) {
    std::string text = Read(file);
    if (file.ends_with(".md")) {  // the metrics table only (the doc also names tables)
      const size_t from = text.find("## 3. Moving dashboards");
      ASSERT_NE(from, std::string::npos) << file;
      text = text.substr(from, text.find("\n## ", from + 1) - from);
    }
    for (std::string name : Names(text, used)) {
      for (const char* suffix : {"_bucket", "_count", "_sum"}) {
        if (name.ends_with(suffix) && exported.count(name) == 0) {
          name.resize(name.size() - std::string(suffix).size());
        }
      }
      EXPECT_EQ(exported.count(name), 1u) << file << " uses " << name
                                          << ", which walrelay does not export";
      ++checked;
    }
  }
  EXPECT_GT(checked, 20u);
}

}  // namespace
}  // namespace walrelay::relay
