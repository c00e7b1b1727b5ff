#include "tests/support/apache_kafka.h"

#include <librdkafka/rdkafka.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>
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

using Client_t = std::unique_ptr<rd_kafka_t, void (*)(rd_kafka_t*)>;

// A librdkafka client of the PLAINTEXT listeners (the super user), silent.
Result<Client_t> Client(const std::string& bootstrap) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "log_level", "0", err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (rk == nullptr) return InternalError(std::string("rd_kafka_new: ") + err);
  return Client_t(rk, rd_kafka_destroy);
}

// One Admin API request of kind `op` (CreateTopics or DeleteTopics of one or more topics)
// sent by `send(rk, options, queue)`; the first topic error is the result.
template <typename Send>
Status AdminRequest(const std::string& bootstrap, rd_kafka_admin_op_t op, Send send) {
  WALRELAY_ASSIGN_OR_RETURN(auto rk, Client(bootstrap));
  char err[512];
  rd_kafka_AdminOptions_t* options = rd_kafka_AdminOptions_new(rk.get(), op);
  rd_kafka_AdminOptions_set_operation_timeout(options, 30000, err, sizeof err);
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk.get());
  Status st = send(rk.get(), options, queue);
  rd_kafka_event_t* ev = st.ok() ? rd_kafka_queue_poll(queue, 45000) : nullptr;
  if (st.ok() && ev == nullptr) st = DeadlineExceededError("no Admin API answer in 45 s");
  if (ev != nullptr && rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    st = UnavailableError(std::string("Admin API: ") + rd_kafka_event_error_string(ev));
  } else if (ev != nullptr) {
    const rd_kafka_topic_result_t** results = nullptr;
    size_t n = 0;
    if (const auto* c = rd_kafka_event_CreateTopics_result(ev)) {
      results = rd_kafka_CreateTopics_result_topics(c, &n);
    } else if (const auto* d = rd_kafka_event_DeleteTopics_result(ev)) {
      results = rd_kafka_DeleteTopics_result_topics(d, &n);
    }
    for (size_t i = 0; i < n && st.ok(); ++i) {
      const rd_kafka_resp_err_t e = rd_kafka_topic_result_error(results[i]);
      if (e == RD_KAFKA_RESP_ERR_NO_ERROR) continue;
      const std::string what = std::string(rd_kafka_topic_result_name(results[i])) + ": " +
                               (rd_kafka_topic_result_error_string(results[i])
                                    ? rd_kafka_topic_result_error_string(results[i])
                                    : rd_kafka_err2str(e));
      st = e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS ? AlreadyExistsError(what)
                                                       : UnavailableError(what);
    }
  }
  if (ev != nullptr) rd_kafka_event_destroy(ev);
  rd_kafka_queue_destroy(queue);
  rd_kafka_AdminOptions_destroy(options);
  return st;
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
  for (const char* var : {"WALRELAY_TEST_KAFKA", "WALRELAY_TEST_BROKER"}) {
    const char* kind = std::getenv(var);
    if (kind != nullptr && std::string(kind) == "apache") return "";
  }
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
  {
    std::stringstream list(kv["proxied"]);  // N:P:Q,...
    for (std::string item; std::getline(list, item, ',');) {
      ProxiedListener l;
      if (std::sscanf(item.c_str(), "%d:%d:%d", &l.broker, &l.proxy_port, &l.port) == 3) {
        cluster->proxied_.push_back(l);
      }
    }
  }
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
  // A topic of the same name deleted a moment ago may still be going: retry that a while.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    Status st = AdminRequest(bootstrap_, RD_KAFKA_ADMIN_OP_CREATETOPICS, [&](rd_kafka_t* rk,
                                                                             auto* options,
                                                                             auto* queue) {
      char err[512];
      rd_kafka_NewTopic_t* topic =
          rd_kafka_NewTopic_new(name.c_str(), partitions, brokers_, err, sizeof err);
      if (topic == nullptr) return InvalidArgumentError("topic " + name + ": " + err);
      for (const std::string& kv : configs) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos) {
          rd_kafka_NewTopic_destroy(topic);
          return InvalidArgumentError("topic config " + kv + " is not key=value");
        }
        rd_kafka_NewTopic_set_config(topic, kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str());
      }
      rd_kafka_CreateTopics(rk, &topic, 1, options, queue);
      rd_kafka_NewTopic_destroy(topic);
      return Status::Ok();
    });
    if (st.ok()) break;
    if (st.code() != StatusCode::kAlreadyExists || std::chrono::steady_clock::now() > deadline) {
      return st;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return WaitFullIsr(name, partitions, std::chrono::seconds(60));
}

Status ApacheKafka::DeleteAllTopics() {
  auto list = [&]() -> Result<std::vector<std::string>> {
    WALRELAY_ASSIGN_OR_RETURN(auto rk, Client(bootstrap_));
    const rd_kafka_metadata_t* md = nullptr;
    const rd_kafka_resp_err_t e = rd_kafka_metadata(rk.get(), 1, nullptr, &md, 10000);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return UnavailableError(std::string("metadata of every topic: ") + rd_kafka_err2str(e));
    }
    std::vector<std::string> names;
    for (int i = 0; i < md->topic_cnt; ++i) {
      if (std::string_view(md->topics[i].topic).substr(0, 2) != "__") {
        names.emplace_back(md->topics[i].topic);
      }
    }
    rd_kafka_metadata_destroy(md);
    return names;
  };
  WALRELAY_ASSIGN_OR_RETURN(auto names, list());
  if (names.empty()) return Status::Ok();
  WALRELAY_RETURN_IF_ERROR(AdminRequest(
      bootstrap_, RD_KAFKA_ADMIN_OP_DELETETOPICS, [&](rd_kafka_t* rk, auto* options, auto* queue) {
        std::vector<rd_kafka_DeleteTopic_t*> topics;
        for (const auto& n : names) topics.push_back(rd_kafka_DeleteTopic_new(n.c_str()));
        rd_kafka_DeleteTopics(rk, topics.data(), topics.size(), options, queue);
        rd_kafka_DeleteTopic_destroy_array(topics.data(), topics.size());
        return Status::Ok();
      }));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    WALRELAY_ASSIGN_OR_RETURN(names, list());
    if (names.empty()) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return DeadlineExceededError("topics still listed 60 s after their deletion: " + names[0] +
                               ", ...");
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
                                                                       int partitions,
                                                                       const std::string& server) {
  WALRELAY_ASSIGN_OR_RETURN(auto handle, Client(server.empty() ? bootstrap_ : server));
  rd_kafka_t* rk = handle.get();
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
  std::vector<std::string> servers;
  for (size_t from = 0; from <= bootstrap_.size();) {
    const size_t comma = std::min(bootstrap_.find(',', from), bootstrap_.size());
    servers.push_back(bootstrap_.substr(from, comma - from));
    from = comma + 1;
  }
  while (std::chrono::steady_clock::now() < deadline) {
    bool full = true;
    for (const std::string& server : servers) {
      auto states = Describe(topic, partitions, server);
      if (!states.ok()) {
        last = states.status();
        full = false;
        break;
      }
      for (const auto& p : *states) full = full && p.leader >= 0 && p.isr == brokers_;
      if (!full) {
        last = UnavailableError(topic + ": broker " + server +
                                " knows no leader or a partial ISR for some partition");
        break;
      }
    }
    if (full) return Status::Ok();
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
