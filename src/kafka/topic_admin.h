// Topics as an administrator sees them: create one with its configs, read a topic's
// partition count and configs. `walrelay setup` creates exactly-once mode's checkpoint
// topic with them, and every exactly-once start checks it (src/relay/run/session.cc).
//
// Each call makes its own short-lived client from the cluster's properties (how to reach
// and authenticate to the brokers; producer-only properties are left out), so no relay
// state is involved. Thread safety: free functions.
//
// Errors: kNotFound, the topic does not exist (DescribeTopic); kPermissionDenied, the
// cluster's ACLs refuse the request; kUnavailable, the cluster did not answer within
// `timeout`; kInvalidArgument, a bad property or topic spec; kFailedPrecondition (CreateTopic),
// a broker that does not serve CreateTopics (librdkafka's mock cluster and the dev broker,
// which make topics as they are first written).
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace walrelay::kafka {

using Properties = std::vector<std::pair<std::string, std::string>>;

// Whether a librdkafka property says how to reach and authenticate to the cluster (and so
// belongs in every client walrelay makes: consumers, admin clients), rather than how to
// produce.
bool ForAnyClient(std::string_view name);

struct TopicSpec {
  std::string name;
  int partitions = 1;
  // -1: the broker's default.replication.factor.
  int replication_factor = -1;
  std::vector<std::pair<std::string, std::string>> configs;
};

// Creates the topic. true: created, and returned once the cluster's metadata lists it with
// its partitions (a client asking any broker finds it); false: it existed already (its
// configs untouched).
Result<bool> CreateTopic(const Properties& properties, const TopicSpec& spec,
                         std::chrono::milliseconds timeout);

struct TopicDescription {
  int partitions = 0;
  int replication_factor = 0;  // of its first partition
  int brokers = 0;             // in the cluster
  // Every config the broker reports for the topic (its own and the defaults it inherits).
  std::vector<std::pair<std::string, std::string>> configs;
  // False: the broker does not serve DescribeConfigs, or did not answer it within 5 s
  // although it answered the metadata (librdkafka's mock cluster, the dev broker, never
  // does): `configs` is empty and says nothing.
  bool configs_known = false;

  // The value of config `name`; empty when not reported.
  std::string Config(std::string_view name) const;
};

Result<TopicDescription> DescribeTopic(const Properties& properties, const std::string& topic,
                                       std::chrono::milliseconds timeout);

}  // namespace walrelay::kafka
