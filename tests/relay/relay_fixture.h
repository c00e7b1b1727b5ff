// RelayTest: the fixture of the end-to-end relay tests. A throwaway PostgreSQL 15 with the
// documented outbox table, a Kafka (the dev broker, or Apache Kafka with
// WALRELAY_TEST_BROKER=apache: tests/support/test_broker.h) with the topic outbox.payment,
// and the Relay on its own thread; helpers write events and read what arrived. Subclasses
// override ServerSettings() for server settings of their own.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/lsn.h"
#include "src/relay/run/relay.h"
#include "src/relay/core/schema.h"
#include "tests/kafka/test_consumer.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/slot_wait.h"
#include "tests/support/test_broker.h"
#include "tests/support/wait.h"

namespace walrelay::relay {

// A second relay (a standby, a competitor) running on a thread of its own, stopped and
// joined however the test ends: an assertion that ends a test early must not leave a
// joinable thread behind, which aborts the whole program and hides the other tests'
// results. Stop() asks it to stop, waits, and gives what Run() returned.
class RelayOnAThread {
 public:
  explicit RelayOnAThread(const RelayConfig& config)
      : relay_(config), thread_([this] { status_ = relay_.Run(); }) {}
  ~RelayOnAThread() { Stop(); }
  RelayOnAThread(const RelayOnAThread&) = delete;
  RelayOnAThread& operator=(const RelayOnAThread&) = delete;

  Relay& relay() { return relay_; }
  Relay* operator->() { return &relay_; }
  const Status& Stop() {
    relay_.RequestStop();
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  // What Run() returned, once it has (after Stop(), or once the relay ended by itself).
  const Status& status() const { return status_; }

 private:
  Relay relay_;
  Status status_;
  std::thread thread_;
};

class RelayTest : public ::testing::Test {
 protected:
  // The mock cluster keeps at most 5 MB per partition: enough partitions keep every record.
  static constexpr int kPartitions = 12;

  // Extra server settings for a test fixture (see RecoveryTest).
  virtual std::vector<std::string> ServerSettings() const { return {}; }

  void SetUp() override {
    testing::TestCluster::Options pg_options;
    pg_options.settings = ServerSettings();
    auto pg = testing::TestCluster::Start(pg_options);
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    pg_ = std::move(*pg);
    ASSERT_TRUE(pg_->Exec(OutboxTableDdl("public.outbox")).ok());
    auto kc = testing::TestBroker::Create(3);
    ASSERT_TRUE(kc.ok()) << kc.status().ToString();
    kafka_ = std::move(*kc);
    ASSERT_TRUE(kafka_->CreateTopic("outbox.payment", kPartitions, 3).ok());
    config_.source_dsn = pg_->conninfo();
    config_.bootstrap_servers = kafka_->bootstraps();
    config_.status_interval = std::chrono::milliseconds(100);
    config_.reconnect_min = std::chrono::milliseconds(50);
    config_.reconnect_max = std::chrono::milliseconds(500);
  }

  void TearDown() override { StopRelay(); }

  void StartRelay() {
    relay_ = std::make_unique<Relay>(config_);
    run_returned_ = false;
    thread_ = std::thread([this] {
      run_status_ = relay_->Run();
      run_returned_ = true;
    });
    // Events written before the slot exists are not in its stream: wait for it (Apache
    // Kafka restarted a moment ago may take a few seconds to give the producer an id).
    for (int i = 0; i < 1500 && relay_->stats().streaming.load() == 0 && !run_returned_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_FALSE(run_returned_) << "relay stopped before streaming: " << run_status_.ToString();
    ASSERT_EQ(relay_->stats().streaming.load(), 1) << "relay did not start streaming";
  }

  void StopRelay() {
    if (!relay_) return;
    relay_->RequestStop();
    thread_.join();
    relay_.reset();
  }

  // Commits `txs` transactions of `rows` outbox rows; payload seq counts from `first`.
  void WriteEvents(int first, int txs, int rows) {
    for (int t = 0; t < txs; ++t) {
      const int lo = first + t * rows;
      ASSERT_TRUE(pg_->Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, "
                            "payload) SELECT 'payment', 'agg-' || (g % 20), 'PaymentCaptured', "
                            "jsonb_build_object('seq', g) FROM generate_series(" +
                            std::to_string(lo) + ", " + std::to_string(lo + rows - 1) + ") g")
                      .ok());
    }
  }

  // Distinct event ids in the payment topic, reading until `expected` are seen.
  std::set<std::string> DistinctEventIds(size_t expected, std::chrono::milliseconds timeout,
                                         const std::string& topic = "outbox.payment",
                                         int partitions = kPartitions) {
    std::set<std::string> ids;
    size_t scanned = 0;
    kafka::testing::ConsumeUntil(
        kafka_->bootstraps(), topic, partitions,
        [&](const std::vector<kafka::testing::ConsumedRecord>& got) {
          for (; scanned < got.size(); ++scanned) ids.insert(got[scanned].Header("event_id"));
          return ids.size() >= expected;
        },
        timeout);
    return ids;
  }

  Lsn ConfirmedFlush() { return testing::ConfirmedFlush(*pg_); }

  // Waits until the relay has saved a recovery bound in walrelay_progress (it does every
  // 2 s once events are confirmed). False on timeout.
  bool WaitBoundSaved(std::chrono::milliseconds timeout) {
    return testing::WaitFor(
        [&] {
          auto n = pg_->QueryScalar(
              "SELECT count(*) FROM walrelay_progress WHERE bound_snapshot IS NOT NULL");
          return n.ok() && *n == "1";
        },
        timeout);
  }

  // Waits until confirmed_flush_lsn reaches the WAL insert position as of the call.
  bool WaitConfirmedPastCurrent(std::chrono::milliseconds timeout) {
    return testing::WaitConfirmedPastCurrent(*pg_, timeout);
  }

  std::unique_ptr<testing::TestCluster> pg_;
  std::unique_ptr<testing::TestBroker> kafka_;
  RelayConfig config_;
  std::unique_ptr<Relay> relay_;
  std::thread thread_;
  Status run_status_;
  std::atomic<bool> run_returned_{false};  // run_status_ is set (Run returned on its own)
};

}  // namespace walrelay::relay
