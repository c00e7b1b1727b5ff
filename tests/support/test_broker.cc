#include "tests/support/test_broker.h"

#include <librdkafka/rdkafka.h>

#include <cstdlib>

namespace walrelay::testing {

bool TestBroker::OnApache() {
  const char* kind = std::getenv("WALRELAY_TEST_BROKER");
  return kind != nullptr && std::string_view(kind) == "apache";
}

Result<std::unique_ptr<TestBroker>> TestBroker::Create(int brokers) {
  auto broker = std::unique_ptr<TestBroker>(new TestBroker());
  if (!OnApache()) {
    WALRELAY_ASSIGN_OR_RETURN(broker->mock_, kafka::MockCluster::Create(brokers));
    return broker;
  }
  WALRELAY_ASSIGN_OR_RETURN(broker->apache_, ApacheKafka::Shared());
  // The previous test may have left a broker down or paused (a failed assertion skips its
  // own restore): every test starts from the whole cluster.
  WALRELAY_RETURN_IF_ERROR(broker->apache_->RestoreAll());
  WALRELAY_RETURN_IF_ERROR(broker->apache_->DeleteAllTopics());
  return broker;
}

const std::string& TestBroker::bootstraps() const {
  return mock_ ? mock_->bootstraps() : apache_->bootstraps();
}

std::string TestBroker::name() const {
  return mock_ ? "the dev broker"
               : "Apache Kafka " + std::to_string(apache_->brokers()) + "-broker cluster";
}

Status TestBroker::CreateTopic(std::string_view name, int partitions, int replication_factor) {
  if (mock_) return mock_->CreateTopic(name, partitions, replication_factor);
  WALRELAY_RETURN_IF_ERROR(apache_->CreateTopic(std::string(name), partitions));
  topics_.emplace_back(name, partitions);
  return Status::Ok();
}

Status TestBroker::MakeTopicMissing(std::string_view name, int partitions) {
  missing_[std::string(name)] = partitions;
  if (!mock_) return Status::Ok();
  WALRELAY_RETURN_IF_ERROR(mock_->CreateTopic(name, partitions, 1));
  mock_->SetTopicError(name, RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
  return Status::Ok();
}

Status TestBroker::TopicAppears(std::string_view name) {
  auto it = missing_.find(name);
  if (it == missing_.end()) return FailedPreconditionError("no MakeTopicMissing(" + std::string(name) + ")");
  const int partitions = it->second;
  missing_.erase(it);
  if (!mock_) return CreateTopic(name, partitions);
  mock_->SetTopicError(name, RD_KAFKA_RESP_ERR_NO_ERROR);
  return Status::Ok();
}

Status TestBroker::SetAllBrokersDown() {
  if (mock_) return mock_->SetAllBrokersDown();
  for (int id = 1; id <= apache_->brokers(); ++id) {
    WALRELAY_RETURN_IF_ERROR(apache_->KillBroker(id));
  }
  return Status::Ok();
}

Status TestBroker::SetAllBrokersUp() {
  if (mock_) return mock_->SetAllBrokersUp();
  return apache_->RestoreAll(topics_);
}

}  // namespace walrelay::testing
