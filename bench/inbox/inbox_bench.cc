// inbox_bench: messages/s through the inbox dedup path. One throwaway PostgreSQL
// (fsync off, unix socket) and one in-process mock Kafka cluster for the whole run; each
// benchmark produces kMessages records to a fresh topic, then times a fresh consumer
// group from its first handled message to the last (group join excluded: manual time).
//
//   new        every event id is new: BEGIN, INSERT inbox (1 row), empty handler, COMMIT
//   duplicate  every event id is already in the inbox: BEGIN, INSERT (0 rows), COMMIT
//   ledger     new ids, the example ledger handler (two more statements per message)
// Argument: partitions = worker threads = database connections.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "src/inbox/examples/ledger.h"
#include "src/inbox/inbox.h"
#include "src/kafka/mock_cluster.h"
#include "src/kafka/producer.h"
#include "tests/support/pg_cluster.h"

namespace {

using namespace std::chrono_literals;
using walrelay::inbox::InboxConsumer;
using walrelay::inbox::InboxOptions;
using walrelay::inbox::InboxStats;

constexpr int kMessages = 20'000;

struct Env {
  std::unique_ptr<walrelay::testing::TestCluster> pg;
  std::unique_ptr<walrelay::kafka::MockCluster> kafka;
  int next = 0;
};

Env& env() {
  static Env* e = [] {
    auto* e = new Env;
    auto pg = walrelay::testing::TestCluster::Start();
    if (!pg.ok()) {
      std::fprintf(stderr, "postgres: %s\n", pg.status().ToString().c_str());
      std::exit(1);
    }
    e->pg = std::move(pg).value();
    auto kafka = walrelay::kafka::MockCluster::Create(1);
    if (!kafka.ok()) std::exit(1);
    e->kafka = std::move(kafka).value();
    if (!walrelay::inbox::ledger::EnsureLedgerSchema(e->pg->conninfo()).ok()) std::exit(1);
    InboxOptions o;
    o.bootstrap_servers = e->kafka->bootstraps();
    o.group_id = "schema";
    o.topics = {"unused"};
    o.conninfo = e->pg->conninfo();
    o.consumer_name = "bench";
    o.inbox_retention = 0ms;
    auto c = InboxConsumer::Create(o, [](const auto&, auto&) { return walrelay::Status::Ok(); });
    if (!c.ok() || !(*c)->EnsureSchema().ok()) std::exit(1);
    return e;
  }();
  return *e;
}

// Produces kMessages payments with ids "<prefix>-<i>" to `topic`.
void Produce(const std::string& topic, const std::string& prefix) {
  walrelay::kafka::ProducerOptions opt;
  opt.properties = {{"bootstrap.servers", env().kafka->bootstraps()}, {"linger.ms", "20"}};
  auto producer = walrelay::kafka::Producer::Create(
      opt, [](uint64_t, const walrelay::Status&, const walrelay::kafka::DeliveredRecord&) {});
  for (int i = 0; i < kMessages; ++i) {
    const std::string id = prefix + "-" + std::to_string(i);
    const std::string wallet = "w" + std::to_string(i % 100);
    const std::string value = R"({"wallet":")" + wallet + R"(","amount":1})";
    const walrelay::kafka::Header h[] = {{"event_id", id}};
    (void)(*producer)->Produce(topic, wallet, value, h, static_cast<uint64_t>(i));
  }
  (void)(*producer)->Flush(120s);
}

// Consumes `topic` with a fresh group; returns seconds from the first to the last message.
double Consume(const std::string& topic, int partitions, walrelay::inbox::Handler handler) {
  InboxOptions o;
  o.bootstrap_servers = env().kafka->bootstraps();
  o.group_id = "bench-" + topic;
  o.topics = {topic};
  o.properties = {{"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "500"}};
  o.conninfo = env().pg->conninfo();
  o.consumer_name = "bench";
  o.max_db_connections = partitions;
  o.inbox_retention = 0ms;
  auto c = InboxConsumer::Create(o, std::move(handler));
  if (!c.ok() || !(*c)->EnsureSchema().ok()) std::exit(1);
  std::thread runner([&] { (void)(*c)->Run(); });
  auto done = [&] {
    InboxStats s = (*c)->stats();
    return s.applied + s.duplicates;
  };
  while (done() == 0) std::this_thread::sleep_for(100us);
  const auto start = std::chrono::steady_clock::now();
  while (done() < static_cast<uint64_t>(kMessages)) std::this_thread::sleep_for(100us);
  const auto end = std::chrono::steady_clock::now();
  (*c)->Stop();
  runner.join();
  // The first message is handled before `start`: count kMessages - 1 in the interval.
  return std::chrono::duration<double>(end - start).count() * kMessages / (kMessages - 1);
}

walrelay::Status Noop(const walrelay::inbox::InboxMessage&, walrelay::inbox::Transaction&) {
  return walrelay::Status::Ok();
}

void Run(benchmark::State& state, const char* mode) {
  const int partitions = static_cast<int>(state.range(0));
  for (auto _ : state) {
    const std::string topic = std::string(mode) + std::to_string(env().next++);
    if (!env().kafka->CreateTopic(topic, partitions).ok()) std::exit(1);
    const std::string prefix = std::string(mode) == "duplicate" ? "dup" : topic;
    if (std::string(mode) == "duplicate") {
      // Pre-fill the inbox with these ids so every message is a duplicate.
      (void)env().pg->Exec(
          "INSERT INTO inbox (consumer, message_id) SELECT 'bench', 'dup-' || i "
          "FROM generate_series(0, " +
          std::to_string(kMessages - 1) + ") i ON CONFLICT DO NOTHING");
    }
    Produce(topic, prefix);
    const double secs =
        Consume(topic, partitions,
                std::string(mode) == "ledger"
                    ? walrelay::inbox::Handler(&walrelay::inbox::ledger::CreditWallet)
                    : walrelay::inbox::Handler(&Noop));
    state.SetIterationTime(secs);
  }
  state.SetItemsProcessed(state.iterations() * kMessages);
}

void BM_New(benchmark::State& s) { Run(s, "new"); }
void BM_Duplicate(benchmark::State& s) { Run(s, "duplicate"); }
void BM_Ledger(benchmark::State& s) { Run(s, "ledger"); }

BENCHMARK(BM_New)->Arg(1)->Arg(4)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Duplicate)
    ->Arg(1)
    ->Arg(4)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Ledger)->Arg(1)->Arg(4)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
