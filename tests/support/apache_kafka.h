// ApacheKafka: the Apache Kafka cluster of scripts/kafka.sh (a KRaft controller and three
// brokers on loopback, replication factor 3, min.insync.replicas=2) for the tests only a
// real cluster can run: leader changes, in-sync replicas, paused brokers, topic limits,
// ACLs, SASL_SSL.
//
// Which broker a test run uses: WALRELAY_TEST_KAFKA=apache selects this cluster for the
// tests only it can run (CI sets it); unset or `dev`, they skip, saying how to run them
// (ApacheKafka::SkipReason). WALRELAY_TEST_BROKER=apache runs the relay and inbox suites on
// it too (tests/support/test_broker.h). One cluster per test program, started at the first Shared()
// call in a directory of its own and stopped when the program exits (kafka.sh's watcher
// stops it too if the program is killed). Tests share it: each creates topics of its own
// (UniqueTopic) and leaves every broker running and resumed (RestoreAll) when it ends.
//
// Thread safety: one test thread.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"

namespace walrelay::testing {

class ApacheKafka {
 public:
  // The program's cluster, started at the first call (about 20 s; the first run on a
  // machine also resolves Kafka's jars from Maven Central). Errors say what failed.
  static Result<ApacheKafka*> Shared();
  // Empty when WALRELAY_TEST_KAFKA=apache or WALRELAY_TEST_BROKER=apache; otherwise why
  // the test skips.
  static std::string SkipReason();

  int brokers() const { return brokers_; }
  // PLAINTEXT listeners (no authentication; a super user): "127.0.0.1:p1,...".
  const std::string& bootstraps() const { return bootstrap_; }
  // SASL_SSL listeners ("localhost:p1,..."), the CA that signed the brokers' certificate,
  // a CA nobody trusts, and the walrelay user's password (least privileges, see kafka.sh).
  const std::string& sasl_bootstraps() const { return bootstrap_sasl_; }
  const std::string& ca_path() const { return ca_; }
  const std::string& other_ca_path() const { return other_ca_; }
  const std::string& walrelay_password() const { return walrelay_password_; }
  // SSL listeners with client certificates required ("localhost:p1,..."), and the walrelay
  // user's certificate and key (CN=walrelay: User:walrelay, the same ACLs).
  const std::string& mtls_bootstraps() const { return bootstrap_mtls_; }
  const std::string& client_cert_path() const { return client_cert_; }
  const std::string& client_key_path() const { return client_key_; }
  const std::string& admin_password() const { return admin_password_; }
  // Each broker's PROXIED listener (kafka.sh): PLAINTEXT on `port`, advertised as
  // `proxy_port`, where a test's proxy must listen and forward to `port`; clients that
  // bootstrap at the proxy ports then reach every broker through its own proxy.
  struct ProxiedListener {
    int broker = 0;
    int proxy_port = 0;
    int port = 0;
  };
  const std::vector<ProxiedListener>& proxied_listeners() const { return proxied_; }

  // A topic name no other test uses: "<prefix>.<n>.<pid>".
  std::string UniqueTopic(const std::string& prefix);
  // Creates `name` (replication factor: every broker) with topic configs "key=value"
  // (Kafka's Admin API, through librdkafka); waits until every partition has a leader and
  // a full ISR.
  Status CreateTopic(const std::string& name, int partitions,
                     const std::vector<std::string>& configs = {});
  // Deletes every topic but Kafka's own (__consumer_offsets, ...) and returns once the
  // cluster's metadata lists none of them.
  Status DeleteAllTopics();

  // The Java clients of the cluster's Kafka version (kafka.sh consume / produce): reads
  // `count` records of `topic` from the beginning, one line each, "CreateTime:<ms>\t
  // Partition:<p>\t<name:value|...>\t<key>\t<value>" (a null header value is <null>,
  // no headers NO_HEADERS); writes "key:value" lines.
  Result<std::vector<std::string>> JavaConsume(const std::string& topic, int count);
  Status JavaProduce(const std::string& topic, const std::vector<std::string>& key_values);

  // kafka-acls with these arguments (e.g. --add --deny-principal User:walrelay ...).
  Status Acl(const std::vector<std::string>& args);

  // Broker ids are 1..brokers().
  Status KillBroker(int id);   // kill -9
  Status StartBroker(int id);  // returns once it runs again (not yet in every ISR)
  Status PauseBroker(int id);  // SIGSTOP: alive, silent
  Status ResumeBroker(int id);
  // The broker that leads `partition` of `topic` now, or an error.
  Result<int> LeaderOf(const std::string& topic, int partition);
  // Waits until every partition of `topic` has all `brokers()` replicas in sync, as the
  // metadata of each broker says (a topic made a moment ago may still be unknown to one:
  // a request it answers, DescribeConfigs say, would fail with UNKNOWN_TOPIC_OR_PART).
  Status WaitFullIsr(const std::string& topic, int partitions, std::chrono::seconds timeout);
  // Every broker started and resumed, and back in the ISR of `topics` (tests call it at
  // their end, so the next test finds the cluster whole).
  Status RestoreAll(const std::vector<std::pair<std::string, int>>& topics = {});

 private:
  ApacheKafka() = default;
  Status Script(const std::vector<std::string>& args, std::string* out = nullptr);
  struct PartitionState {
    int leader = -1;
    int isr = 0;
  };
  // The partitions of `topic` as `server` (default: any broker) reports them.
  Result<std::vector<PartitionState>> Describe(const std::string& topic, int partitions,
                                               const std::string& server = "");

  std::string dir_;
  int brokers_ = 0;
  int topics_made_ = 0;
  std::string bootstrap_, bootstrap_sasl_, ca_, other_ca_, walrelay_password_, admin_password_;
  std::string bootstrap_mtls_, client_cert_, client_key_;
  std::vector<ProxiedListener> proxied_;
};

}  // namespace walrelay::testing
