#include "tests/support/apache_kafka.h"

#include <librdkafka/rdkafka.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

namespace walrelay::testing {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string ScriptPath() { return std::string(WALRELAY_SOURCE_DIR) + "/scripts/kafka.sh"; }

std::map<std::string, std::string> KeyValues(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos && line.rfind("kafka.sh:", 0) != 0) {
      kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return kv;
}

ApacheKafka* g_cluster = nullptr;
char g_dir[256] = "";  // plain storage: still there when the atexit handler runs

void StopAtExit() {
  if (g_dir[0] == '\0') return;
  // kafka.sh's watcher would stop it too once this process is gone; stopping here keeps
  // the next program's start from competing with a cluster that is shutting down.
  (void)std::system(("bash " + Quote(ScriptPath()) + " stop --dir " + Quote(g_dir) +
                     " >/dev/null 2>&1 && rm -rf " + Quote(g_dir))
                        .c_str());
}

}  // namespace

std::string ApacheKafka::SkipReason() {
  const char* kind = std::getenv("WALRELAY_TEST_KAFKA");
  if (kind != nullptr && std::string(kind) == "apache") return "";
  return "needs the Apache Kafka cluster: run with WALRELAY_TEST_KAFKA=apache (scripts/kafka.sh "
         "starts it; CI does)";
}

Status ApacheKafka::Script(const std::vector<std::string>& args, std::string* out) {
  std::string cmd = "bash " + Quote(ScriptPath());
  for (const auto& a : args) cmd += " " + Quote(a);
  cmd += " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return InternalError("popen " + cmd);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  const int status = ::pclose(pipe);
  if (out != nullptr) *out = text;
  if (status != 0) {
    return UnavailableError("kafka.sh " + args[0] + " failed (status " + std::to_string(status) +
                            "): " + text);
  }
  return Status::Ok();
}

Result<ApacheKafka*> ApacheKafka::Shared() {
  if (g_cluster != nullptr) return g_cluster;
  if (std::string why = SkipReason(); !why.empty()) return FailedPreconditionError(why);
  auto cluster = std::unique_ptr<ApacheKafka>(new ApacheKafka());
  char tmpl[] = "/tmp/walrelay-kafka-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return InternalError("mkdtemp");
  cluster->dir_ = tmpl;
  std::string out;
  WALRELAY_RETURN_IF_ERROR(cluster->Script(
      {"start", "--dir", cluster->dir_, "--owner", std::to_string(::getpid())}, &out));
  auto kv = KeyValues(out);
  cluster->bootstrap_ = kv["bootstrap"];
  cluster->bootstrap_sasl_ = kv["bootstrap_sasl"];
  cluster->ca_ = kv["ca"];
  cluster->other_ca_ = kv["other_ca"];
  cluster->bootstrap_mtls_ = kv["bootstrap_mtls"];
  cluster->client_cert_ = kv["client_cert"];
  cluster->client_key_ = kv["client_key"];
  cluster->brokers_ = std::atoi(kv["brokers"].c_str());
  if (cluster->bootstrap_.empty() || cluster->brokers_ < 1) {
    return InternalError("kafka.sh start printed no bootstrap line: " + out);
  }
  std::ifstream users(kv["users"]);
  auto user_kv = KeyValues(std::string(std::istreambuf_iterator<char>(users), {}));
  cluster->walrelay_password_ = user_kv["KAFKA_WALRELAY_PASSWORD"];
  cluster->admin_password_ = user_kv["KAFKA_ADMIN_PASSWORD"];
  std::snprintf(g_dir, sizeof g_dir, "%s", cluster->dir_.c_str());
  g_cluster = cluster.release();
  std::atexit(StopAtExit);
  return g_cluster;
}

std::string ApacheKafka::UniqueTopic(const std::string& prefix) {
  return prefix + "." + std::to_string(++topics_made_) + "." + std::to_string(::getpid());
}

Status ApacheKafka::CreateTopic(const std::string& name, int partitions,
                                const std::vector<std::string>& configs) {
  std::vector<std::string> args = {"topic", "--dir", dir_, name, std::to_string(partitions)};
  args.insert(args.end(), configs.begin(), configs.end());
  WALRELAY_RETURN_IF_ERROR(Script(args));
  return WaitFullIsr(name, partitions, std::chrono::seconds(60));
}

Result<std::vector<std::string>> ApacheKafka::JavaConsume(const std::string& topic, int count) {
  std::string out;
  WALRELAY_RETURN_IF_ERROR(Script({"consume", "--dir", dir_, topic, std::to_string(count)}, &out));
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CreateTime:", 0) == 0) lines.push_back(line);
  }
  return lines;
}

Status ApacheKafka::JavaProduce(const std::string& topic,
                                const std::vector<std::string>& key_values) {
  char tmpl[] = "/tmp/walrelay-kafka-produce-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) return InternalError("mkstemp");
  ::close(fd);
  {
    std::ofstream f(tmpl);
    for (const auto& kv : key_values) f << kv << "\n";
  }
  const std::string cmd = "bash " + Quote(ScriptPath()) + " produce --dir " + Quote(dir_) + " " +
                          Quote(topic) + " < " + Quote(tmpl) + " 2>&1";
  const int status = std::system(cmd.c_str());
  ::unlink(tmpl);
  if (status != 0) return UnavailableError("kafka.sh produce failed: " + std::to_string(status));
  return Status::Ok();
}

Status ApacheKafka::Acl(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"acl", "--dir", dir_};
  all.insert(all.end(), args.begin(), args.end());
  return Script(all);
}

Status ApacheKafka::KillBroker(int id) {
  return Script({"kill-broker", "--dir", dir_, std::to_string(id)});
}
Status ApacheKafka::StartBroker(int id) {
  return Script({"start-broker", "--dir", dir_, std::to_string(id)});
}
Status ApacheKafka::PauseBroker(int id) {
  return Script({"pause-broker", "--dir", dir_, std::to_string(id)});
}
Status ApacheKafka::ResumeBroker(int id) {
  return Script({"resume-broker", "--dir", dir_, std::to_string(id)});
}

Result<std::vector<ApacheKafka::PartitionState>> ApacheKafka::Describe(const std::string& topic,
                                                                       int partitions) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap_.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "log_level", "0", err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (rk == nullptr) return InternalError(std::string("rd_kafka_new: ") + err);
  std::unique_ptr<rd_kafka_t, void (*)(rd_kafka_t*)> handle(rk, rd_kafka_destroy);
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  std::unique_ptr<rd_kafka_topic_t, void (*)(rd_kafka_topic_t*)> topic_handle(
      rkt, rd_kafka_topic_destroy);
  const rd_kafka_metadata_t* md = nullptr;
  rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return UnavailableError("metadata of " + topic + ": " + rd_kafka_err2str(e));
  }
  std::vector<PartitionState> out(partitions);
  Status st = Status::Ok();
  if (md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    st = UnavailableError("metadata of " + topic + ": " +
                          (md->topic_cnt == 1 ? rd_kafka_err2str(md->topics[0].err) : "none"));
  } else {
    for (int i = 0; i < md->topics[0].partition_cnt; ++i) {
      const rd_kafka_metadata_partition_t& p = md->topics[0].partitions[i];
      if (p.id >= 0 && p.id < partitions) out[p.id] = {p.leader, p.isr_cnt};
    }
  }
  rd_kafka_metadata_destroy(md);
  if (!st.ok()) return st;
  return out;
}

Result<int> ApacheKafka::LeaderOf(const std::string& topic, int partition) {
  WALRELAY_ASSIGN_OR_RETURN(auto states, Describe(topic, partition + 1));
  if (states[partition].leader < 0) {
    return UnavailableError(topic + "[" + std::to_string(partition) + "] has no leader");
  }
  return states[partition].leader;
}

Status ApacheKafka::WaitFullIsr(const std::string& topic, int partitions,
                                std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last = Status::Ok();
  while (std::chrono::steady_clock::now() < deadline) {
    auto states = Describe(topic, partitions);
    if (states.ok()) {
      bool full = true;
      for (const auto& p : *states) full = full && p.leader >= 0 && p.isr == brokers_;
      if (full) return Status::Ok();
      last = UnavailableError(topic + ": some partition has no leader or a partial ISR");
    } else {
      last = states.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return DeadlineExceededError("waiting for a full ISR: " + last.ToString());
}

Status ApacheKafka::RestoreAll(const std::vector<std::pair<std::string, int>>& topics) {
  for (int id = 1; id <= brokers_; ++id) {
    WALRELAY_RETURN_IF_ERROR(ResumeBroker(id));
    WALRELAY_RETURN_IF_ERROR(StartBroker(id));
  }
  for (const auto& [topic, partitions] : topics) {
    WALRELAY_RETURN_IF_ERROR(WaitFullIsr(topic, partitions, std::chrono::seconds(90)));
  }
  return Status::Ok();
}

}  // namespace walrelay::testing
