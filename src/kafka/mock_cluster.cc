#include "src/kafka/mock_cluster.h"

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "src/kafka/producer.h"

namespace walrelay::kafka {

namespace {

Status FromKafka(rd_kafka_resp_err_t err, std::string_view what) {
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return Status::Ok();
  StatusCode code =
      err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS
          ? StatusCode::kAlreadyExists
          : (err == RD_KAFKA_RESP_ERR__INVALID_ARG || err == RD_KAFKA_RESP_ERR_INVALID_PARTITIONS ||
                     err == RD_KAFKA_RESP_ERR_INVALID_REPLICATION_FACTOR
                 ? StatusCode::kInvalidArgument
                 : StatusCodeForKafkaError(err));
  return Status(code, fmt::format("mock cluster: {}: {} ({})", what, rd_kafka_err2str(err),
                                  rd_kafka_err2name(err)));
}

}  // namespace

Result<std::unique_ptr<MockCluster>> MockCluster::Create(int brokers) {
  if (brokers < 1) return InvalidArgumentError("mock cluster needs at least one broker");
  std::unique_ptr<MockCluster> cluster(new MockCluster());
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  // The owning handle never connects anywhere; keep it quiet.
  if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
    rd_kafka_conf_destroy(conf);
    return InternalError(fmt::format("mock cluster conf: {}", errstr));
  }
  cluster->rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  if (cluster->rk_ == nullptr) {
    rd_kafka_conf_destroy(conf);
    return InternalError(fmt::format("mock cluster handle: {}", errstr));
  }
  cluster->mcluster_ = rd_kafka_mock_cluster_new(cluster->rk_, brokers);
  if (cluster->mcluster_ == nullptr) {
    return UnavailableError("mock cluster: could not start brokers (listen failed?)");
  }
  cluster->brokers_ = brokers;
  cluster->bootstraps_ = rd_kafka_mock_cluster_bootstraps(cluster->mcluster_);
  return cluster;
}

MockCluster::~MockCluster() {
  if (mcluster_ != nullptr) rd_kafka_mock_cluster_destroy(mcluster_);
  if (rk_ != nullptr) rd_kafka_destroy(rk_);
}

Status MockCluster::CreateTopic(std::string_view name, int partitions, int replication_factor) {
  if (name.empty()) return InvalidArgumentError("mock cluster: empty topic name");
  if (partitions < 1) {
    return InvalidArgumentError(
        fmt::format("mock cluster: topic {}: partitions must be >= 1", name));
  }
  if (replication_factor < 1 || replication_factor > brokers_) {
    return InvalidArgumentError(
        fmt::format("mock cluster: topic {}: replication factor {} not in 1..{}", name,
                    replication_factor, brokers_));
  }
  std::string owned(name);
  return FromKafka(
      rd_kafka_mock_topic_create(mcluster_, owned.c_str(), partitions, replication_factor),
      fmt::format("create topic {}", name));
}

Status MockCluster::CheckBroker(int32_t id) const {
  if (id < 1 || id > brokers_) {
    return InvalidArgumentError(
        fmt::format("mock cluster: no broker {} (brokers are 1..{})", id, brokers_));
  }
  return Status::Ok();
}

Status MockCluster::SetBrokerDown(int32_t id) {
  WALRELAY_RETURN_IF_ERROR(CheckBroker(id));
  return FromKafka(rd_kafka_mock_broker_set_down(mcluster_, id), fmt::format("broker {} down", id));
}

Status MockCluster::SetBrokerUp(int32_t id) {
  WALRELAY_RETURN_IF_ERROR(CheckBroker(id));
  return FromKafka(rd_kafka_mock_broker_set_up(mcluster_, id), fmt::format("broker {} up", id));
}

Status MockCluster::SetAllBrokersDown() {
  for (int32_t id = 1; id <= brokers_; ++id) WALRELAY_RETURN_IF_ERROR(SetBrokerDown(id));
  return Status::Ok();
}

Status MockCluster::SetAllBrokersUp() {
  for (int32_t id = 1; id <= brokers_; ++id) WALRELAY_RETURN_IF_ERROR(SetBrokerUp(id));
  return Status::Ok();
}

Status MockCluster::SetBrokerRtt(int32_t id, int rtt_ms) {
  if (id != -1) WALRELAY_RETURN_IF_ERROR(CheckBroker(id));
  return FromKafka(rd_kafka_mock_broker_set_rtt(mcluster_, id, rtt_ms),
                   fmt::format("broker {} rtt", id));
}

void MockCluster::PushRequestErrors(int16_t api_key, const std::vector<int>& errors) {
  std::vector<rd_kafka_resp_err_t> errs;
  errs.reserve(errors.size());
  for (int e : errors) errs.push_back(static_cast<rd_kafka_resp_err_t>(e));
  rd_kafka_mock_push_request_errors_array(mcluster_, api_key, errs.size(), errs.data());
}

void MockCluster::ClearRequestErrors(int16_t api_key) {
  rd_kafka_mock_clear_request_errors(mcluster_, api_key);
}

void MockCluster::SetTopicError(std::string_view name, int error) {
  const std::string topic(name);
  rd_kafka_mock_topic_set_error(mcluster_, topic.c_str(), static_cast<rd_kafka_resp_err_t>(error));
}

}  // namespace walrelay::kafka
