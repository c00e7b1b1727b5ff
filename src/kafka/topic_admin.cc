#include "src/kafka/topic_admin.h"

#include <librdkafka/rdkafka.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "src/kafka/properties.h"

namespace walrelay::kafka {

bool ForAnyClient(std::string_view name) {
  for (std::string_view prefix : {"bootstrap.servers", "security.", "sasl.", "ssl.", "socket.",
                                  "reconnect.", "client.dns.lookup", "broker.address.",
                                  "client.id", "debug", "metadata.", "topic.metadata."}) {
    if (name.starts_with(prefix)) return true;
  }
  return false;
}

std::string TopicDescription::Config(std::string_view name) const {
  for (const auto& [k, v] : configs) {
    if (k == name) return v;
  }
  return "";
}

namespace {

struct ClientDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using Client = std::unique_ptr<rd_kafka_t, ClientDeleter>;

// A consumer handle serves the admin API and, unlike a producer's, never asks the broker
// to create a topic it looks up (allow.auto.create.topics is false for consumers).
Result<Client> MakeClient(const Properties& properties) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto configure = [&]() -> Status {
    for (const auto& [name, value] : properties) {
      if (ForAnyClient(name)) WALRELAY_RETURN_IF_ERROR(SetProperty(conf, name, value));
    }
    return SetProperty(conf, "allow.auto.create.topics", "false");
  };
  if (Status st = configure(); !st.ok()) {
    rd_kafka_conf_destroy(conf);
    return st;
  }
  rd_kafka_conf_set_log_cb(conf, &LogLibrdkafka);
  char errstr[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    return InvalidArgumentError(fmt::format("kafka admin client: {}", errstr));
  }
  return Client(rk);
}

Status StatusFor(rd_kafka_resp_err_t err, const std::string& what) {
  const std::string why = fmt::format("{}: {} ({})", what, rd_kafka_err2str(err), rd_kafka_err2name(err));
  switch (err) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
      return Status::Ok();
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
      return NotFoundError(why);
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
      return PermissionDeniedError(why);
    case RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION:
    case RD_KAFKA_RESP_ERR_INVALID_REQUEST:
      return FailedPreconditionError(why);  // the broker does not serve the request
    case RD_KAFKA_RESP_ERR_INVALID_REPLICATION_FACTOR:
    case RD_KAFKA_RESP_ERR_INVALID_PARTITIONS:
    case RD_KAFKA_RESP_ERR_INVALID_CONFIG:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
      return InvalidArgumentError(why);
    default:
      return UnavailableError(why);
  }
}

// Runs one admin request whose result arrives on `queue`; the event, or kUnavailable.
Result<rd_kafka_event_t*> Await(rd_kafka_queue_t* queue, std::chrono::milliseconds timeout,
                                const std::string& what) {
  rd_kafka_event_t* ev = rd_kafka_queue_poll(queue, static_cast<int>(timeout.count()) + 1000);
  if (ev == nullptr) {
    return UnavailableError(fmt::format("{}: no answer from the cluster within {} ms", what,
                                        timeout.count()));
  }
  if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    Status st = StatusFor(rd_kafka_event_error(ev), what);
    rd_kafka_event_destroy(ev);
    return st;
  }
  return ev;
}

}  // namespace

Result<bool> CreateTopic(const Properties& properties, const TopicSpec& spec,
                         std::chrono::milliseconds timeout) {
  WALRELAY_ASSIGN_OR_RETURN(Client rk, MakeClient(properties));
  const std::string what = "creating kafka topic " + spec.name;
  char errstr[512];
  rd_kafka_NewTopic_t* topic = rd_kafka_NewTopic_new(spec.name.c_str(), spec.partitions,
                                                     spec.replication_factor, errstr,
                                                     sizeof(errstr));
  if (topic == nullptr) return InvalidArgumentError(fmt::format("{}: {}", what, errstr));
  std::unique_ptr<rd_kafka_NewTopic_t, void (*)(rd_kafka_NewTopic_t*)> topic_owner(
      topic, rd_kafka_NewTopic_destroy);
  for (const auto& [name, value] : spec.configs) {
    if (rd_kafka_NewTopic_set_config(topic, name.c_str(), value.c_str()) !=
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      return InvalidArgumentError(fmt::format("{}: config {}={} refused", what, name, value));
    }
  }
  rd_kafka_AdminOptions_t* options =
      rd_kafka_AdminOptions_new(rk.get(), RD_KAFKA_ADMIN_OP_CREATETOPICS);
  rd_kafka_AdminOptions_set_request_timeout(options, static_cast<int>(timeout.count()), errstr,
                                            sizeof(errstr));
  rd_kafka_AdminOptions_set_operation_timeout(options, static_cast<int>(timeout.count()), errstr,
                                              sizeof(errstr));
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk.get());
  rd_kafka_CreateTopics(rk.get(), &topic, 1, options, queue);
  auto ev = Await(queue, timeout, what);
  rd_kafka_AdminOptions_destroy(options);
  rd_kafka_queue_destroy(queue);
  if (!ev.ok()) return ev.status();
  Result<bool> out = true;
  size_t n = 0;
  const rd_kafka_CreateTopics_result_t* res = rd_kafka_event_CreateTopics_result(*ev);
  const rd_kafka_topic_result_t** results =
      res != nullptr ? rd_kafka_CreateTopics_result_topics(res, &n) : nullptr;
  if (n != 1) {
    out = UnavailableError(what + ": the cluster's answer names no topic");
  } else if (rd_kafka_topic_result_error(results[0]) == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
    out = false;
  } else if (rd_kafka_topic_result_error(results[0]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* text = rd_kafka_topic_result_error_string(results[0]);
    out = StatusFor(rd_kafka_topic_result_error(results[0]), what)
              .WithContext(text != nullptr ? text : "");
  }
  rd_kafka_event_destroy(*ev);
  if (!out.ok() || !*out) return out;
  // Created by the controller is not yet known to every broker: a client that asks one
  // of them at once is told the topic does not exist. Return once the metadata has it.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk.get(), spec.name.c_str(), nullptr);
    const rd_kafka_metadata_t* metadata = nullptr;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk.get(), 0, rkt, &metadata, 5000);
    rd_kafka_topic_destroy(rkt);
    bool known = false;
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      known = metadata->topic_cnt == 1 && metadata->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
              metadata->topics[0].partition_cnt == spec.partitions;
      rd_kafka_metadata_destroy(metadata);
    }
    if (known) return true;
    if (std::chrono::steady_clock::now() >= deadline) {
      return UnavailableError(what + ": created, but the cluster's metadata does not list it after " +
                              std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Result<TopicDescription> DescribeTopic(const Properties& properties, const std::string& topic,
                                       std::chrono::milliseconds timeout) {
  WALRELAY_ASSIGN_OR_RETURN(Client rk, MakeClient(properties));
  TopicDescription out;
  {
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
    const rd_kafka_metadata_t* metadata = nullptr;
    rd_kafka_resp_err_t err =
        rd_kafka_metadata(rk.get(), 0, rkt, &metadata, static_cast<int>(timeout.count()));
    rd_kafka_topic_destroy(rkt);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return StatusFor(err, "kafka metadata of " + topic);
    out.brokers = metadata->broker_cnt;
    const rd_kafka_metadata_topic_t* t = metadata->topic_cnt > 0 ? &metadata->topics[0] : nullptr;
    Status st = t == nullptr ? NotFoundError("kafka topic " + topic + " does not exist")
                             : StatusFor(t->err, "kafka topic " + topic);
    if (st.ok()) {
      out.partitions = t->partition_cnt;
      out.replication_factor = t->partition_cnt > 0 ? t->partitions[0].replica_cnt : 0;
    }
    rd_kafka_metadata_destroy(metadata);
    if (st.code() == StatusCode::kNotFound) {
      return NotFoundError("kafka topic " + topic + " does not exist");
    }
    WALRELAY_RETURN_IF_ERROR(st);
  }
  const std::string what = "describing the configs of kafka topic " + topic;
  // A broker that answered the metadata answers this in milliseconds; librdkafka's mock
  // cluster (the dev broker) never does: then the configs are unknown, not an outage.
  const auto configs_timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(5));
  rd_kafka_ConfigResource_t* resource =
      rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str());
  rd_kafka_AdminOptions_t* options =
      rd_kafka_AdminOptions_new(rk.get(), RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
  char errstr[256];
  rd_kafka_AdminOptions_set_request_timeout(options, static_cast<int>(configs_timeout.count()),
                                            errstr, sizeof(errstr));
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk.get());
  rd_kafka_DescribeConfigs(rk.get(), &resource, 1, options, queue);
  auto ev = Await(queue, configs_timeout, what);
  rd_kafka_AdminOptions_destroy(options);
  rd_kafka_queue_destroy(queue);
  rd_kafka_ConfigResource_destroy(resource);
  if (!ev.ok() && (ev.status().code() == StatusCode::kFailedPrecondition ||
                   ev.status().code() == StatusCode::kUnavailable)) {
    return out;  // not served, or not answered (configs_known false)
  }
  if (!ev.ok()) return ev.status();
  Status st;
  size_t n = 0;
  const rd_kafka_DescribeConfigs_result_t* res = rd_kafka_event_DescribeConfigs_result(*ev);
  const rd_kafka_ConfigResource_t** rs =
      res != nullptr ? rd_kafka_DescribeConfigs_result_resources(res, &n) : nullptr;
  if (n != 1) {
    st = UnavailableError(what + ": the cluster's answer names no topic");
  } else if (rd_kafka_ConfigResource_error(rs[0]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    st = StatusFor(rd_kafka_ConfigResource_error(rs[0]), what);
  } else {
    out.configs_known = true;
    size_t nc = 0;
    const rd_kafka_ConfigEntry_t** entries = rd_kafka_ConfigResource_configs(rs[0], &nc);
    for (size_t j = 0; j < nc; ++j) {
      const char* v = rd_kafka_ConfigEntry_value(entries[j]);
      if (v != nullptr) out.configs.emplace_back(rd_kafka_ConfigEntry_name(entries[j]), v);
    }
  }
  rd_kafka_event_destroy(*ev);
  WALRELAY_RETURN_IF_ERROR(st);
  return out;
}

}  // namespace walrelay::kafka
