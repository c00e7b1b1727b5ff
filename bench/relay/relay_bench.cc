// Relay hot-path benchmarks on a realistic outbox row (the documented schema: 9 columns,
// ~300-byte jsonb payload, text format as pgoutput proto 1 sends it).
//   build-bench/bench/relay/relay_bench [--benchmark_filter=...]
// Targets (issue 6): decoder >= 1.5 GB/s and >= 4M messages/s on one core; relay CPU per
// event <= 2 us (BM_ReplayNullSink's us/event is the decode + assemble + map + produce to
// the null sink + ack + feedback path).
#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "decoder/pgoutput.h"
#include "decoder/transaction_assembler.h"
#include "src/kafka/mock_cluster.h"
#include "src/kafka/producer.h"
#include "src/relay/core/ack_tracker.h"
#include "src/relay/core/dead_letter.h"
#include "src/relay/core/outbox_mapper.h"
#include "src/relay/core/pipeline.h"
#include "src/relay/commands/recording.h"
#include "tests/decoder/wire_builder.h"

namespace walrelay::relay {
namespace {

namespace t = pgoutput::testing;
constexpr uint32_t kOid = 16384;

std::string Payload(size_t size, int i) {
  if (size < 200) {  // a small document: {"order_id":N,"pad":"xx..."}
    std::string p = R"({"order_id":)" + std::to_string(i) + R"(,"pad":")";
    if (p.size() + 2 < size) p += std::string(size - p.size() - 2, 'x');
    return p + "\"}";
  }
  std::string p = R"({"order_id":"b7a4f0d2-5c1e-4e8a-9f3d-)" + std::to_string(100000000000 + i) +
                  R"(","customer_id":918273,"status":"PAID","currency":"EUR","total_cents":129900,)"
                  R"("items":[{"sku":"KB-104","qty":1,"price_cents":99900},{"sku":"MS-220",)"
                  R"("qty":2,"price_cents":15000}],"shipping":{"method":"express","country":"DE",)"
                  R"("zip":"10115"},"placed_at":"2024-05-01T12:34:56.789Z")";
  if (p.size() + 12 < size) p += R"(,"pad":")" + std::string(size - p.size() - 11, 'x') + "\"";
  return p + "}";
}

std::string OutboxInsert(int i, size_t payload_size = 300, bool headers = false) {
  char uuid[40];
  std::snprintf(uuid, sizeof uuid, "018f2b6e-7c1a-7d3e-9a4b-%012d", i);
  return t::wire::Insert(
      {}, kOid,
      {t::Text(std::to_string(1000000 + i)), t::Text(uuid), t::Text("order"),
       t::Text("customer-" + std::to_string(i % 5000)), t::Null(), t::Text("OrderPaid"),
       t::Text(Payload(payload_size, i)),
       headers
           ? t::Text(
                 R"({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"})")
           : t::Null(),
       t::Text("2024-05-01 12:34:56.789012+00")});
}

RelayConfig BenchConfig() {
  RelayConfig c;
  c.source_dsn = "bench";
  c.bootstrap_servers = "bench";
  return c;
}

// ---- outbox mapping

void BM_MapInsert(benchmark::State& state) {
  const bool headers = state.range(0) != 0;
  RelayConfig config = BenchConfig();
  OutboxMapper mapper(config);
  pgoutput::Message rel;
  const pgoutput::DecodeOptions opts{1, false, false};
  const std::string rel_bytes = t::wire::OutboxRelation(kOid);
  if (!pgoutput::Decode(rel_bytes, opts, &rel).ok()) return state.SkipWithError("relation");
  mapper.OnRelation(std::get<pgoutput::Relation>(rel));
  std::vector<std::string> raw;
  std::vector<pgoutput::Message> msgs(256);
  for (int i = 0; i < 256; ++i) raw.push_back(OutboxInsert(i, 300, headers));
  for (int i = 0; i < 256; ++i) {
    if (!pgoutput::Decode(raw[i], opts, &msgs[i]).ok()) return state.SkipWithError("insert");
  }
  OutboxEvent event;
  size_t i = 0;
  for (auto _ : state) {
    const auto& ins = std::get<pgoutput::Insert>(msgs[i++ & 255]);
    Status st = mapper.MapInsert(ins, &event);
    if (!st.ok()) return state.SkipWithError(st.ToString().c_str());
    benchmark::DoNotOptimize(event);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MapInsert)->ArgName("headers")->Arg(0)->Arg(1);

// ---- ack tracker: acks arrive in random order within a window of outstanding events
// (as delivery reports from many partitions do), transactions of `tx` events.

void BM_AckTrackerOutOfOrder(benchmark::State& state) {
  const int64_t tx_size = state.range(0);
  const size_t window = static_cast<size_t>(state.range(1));
  AckTracker tracker;
  std::vector<AckTracker::Token> outstanding;
  outstanding.reserve(window + 1);
  std::mt19937_64 rng(42);
  AckTracker::Tx tx = tracker.BeginTransaction();
  int64_t in_tx = 0;
  uint64_t lsn = 0x1000000;
  for (auto _ : state) {
    outstanding.push_back(tracker.AddEvent(tx));
    if (++in_tx == tx_size) {
      lsn += 0x100;
      tracker.CommitTransaction(tx, Lsn(lsn));
      tx = tracker.BeginTransaction();
      in_tx = 0;
    }
    if (outstanding.size() > window) {
      const size_t k = rng() % outstanding.size();
      tracker.Ack(outstanding[k]);
      outstanding[k] = outstanding.back();
      outstanding.pop_back();
    }
    benchmark::DoNotOptimize(tracker.FlushLsn());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["pending_txs"] = static_cast<double>(tracker.PendingTransactions());
}
BENCHMARK(BM_AckTrackerOutOfOrder)
    ->ArgNames({"tx", "window"})
    ->Args({1, 1000})
    ->Args({1000, 1000})
    ->Args({1000, 100000})
    ->Args({1, 100000});

// ---- pgoutput decode by message type and by tuple size

std::string ByType(int type) {
  switch (type) {
    case 0:
      return t::wire::Begin(0x16B374D848, 700000000000000, 731);
    case 1:
      return t::wire::Commit(0x16B374D848, 0x16B374D900, 700000000000000);
    case 2:
      return t::wire::OutboxRelation(kOid);
    case 3:
      return OutboxInsert(7);
    case 4:
      return t::wire::Update({}, kOid, 'K', {t::Text("1000007"), t::Null()},
                             {t::Text("1000007"), t::Text("x"), t::Toast()});
    case 5:
      return t::wire::Delete({}, kOid, 'K', {t::Text("1000007")});
    case 6:
      return t::wire::Message(
          {}, 1, 0x2000, "walrelay.outbox",
          R"({"event_id":"018f2b6e-7c1a-7d3e-9a4b-000000000001","aggregate_id":"c-1","event_type":"OrderPaid","payload":{"a":1}})");
    default:
      return t::wire::Truncate({}, 0, {kOid});
  }
}

void BM_DecodeByType(benchmark::State& state) {
  static const char* kNames[] = {"begin",  "commit", "relation", "insert",
                                 "update", "delete", "message",  "truncate"};
  const std::string msg = ByType(static_cast<int>(state.range(0)));
  state.SetLabel(kNames[state.range(0)]);
  const pgoutput::DecodeOptions opts{1, false, false};
  pgoutput::Message m;
  for (auto _ : state) {
    Status st = pgoutput::Decode(msg, opts, &m);
    benchmark::DoNotOptimize(st);
    benchmark::DoNotOptimize(m);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(msg.size()));
}
BENCHMARK(BM_DecodeByType)->ArgName("type")->DenseRange(0, 7);

void BM_DecodeInsertByPayloadSize(benchmark::State& state) {
  std::vector<std::string> msgs;
  for (int i = 0; i < 64; ++i) msgs.push_back(OutboxInsert(i, static_cast<size_t>(state.range(0))));
  const pgoutput::DecodeOptions opts{1, false, false};
  pgoutput::Message m;
  size_t i = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    const std::string& b = msgs[i++ & 63];
    Status st = pgoutput::Decode(b, opts, &m);
    benchmark::DoNotOptimize(st);
    bytes += static_cast<int64_t>(b.size());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_DecodeInsertByPayloadSize)
    ->ArgName("payload")
    ->Arg(64)
    ->Arg(300)
    ->Arg(2048)
    ->Arg(16384);

// ---- a synthetic recording: Relation once, then transactions of `tx_rows` inserts

struct Stream {
  std::vector<std::pair<uint64_t, std::string>> frames;  // wal_start, bytes
  size_t events = 0;
  size_t bytes = 0;
};

Stream MakeStream(int events, int tx_rows) {
  Stream s;
  uint64_t lsn = 0x3000000;
  uint32_t xid = 1000;
  for (int done = 0; done < events;) {
    const uint64_t final_lsn = lsn + static_cast<uint64_t>(tx_rows) * 0x200 + 0x100;
    s.frames.emplace_back(lsn, t::wire::Begin(final_lsn, 780000000000000, ++xid));
    if (done == 0) s.frames.emplace_back(lsn, t::wire::OutboxRelation(kOid));
    for (int r = 0; r < tx_rows && done < events; ++r, ++done) {
      lsn += 0x200;
      s.frames.emplace_back(lsn, OutboxInsert(done));
    }
    s.frames.emplace_back(final_lsn + 0x30,
                          t::wire::Commit(final_lsn, final_lsn + 0x30, 780000000000000));
    lsn = final_lsn + 0x30;
  }
  s.events = static_cast<size_t>(events);
  for (const auto& f : s.frames) s.bytes += f.second.size();
  return s;
}

// Decoder alone on a recorded stream (in memory): decode + transaction assembler.
void BM_DecodeStream(benchmark::State& state) {
  const Stream s = MakeStream(4096, static_cast<int>(state.range(0)));
  const pgoutput::DecodeOptions opts{1, false, false};
  pgoutput::TransactionAssembler assembler;
  pgoutput::Message m;
  for (auto _ : state) {
    assembler.Reset();
    for (const auto& f : s.frames) {
      if (!pgoutput::Decode(f.second, opts, &m).ok() || !assembler.Feed(m).ok()) {
        return state.SkipWithError("decode");
      }
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(s.frames.size()));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s.bytes));
}
BENCHMARK(BM_DecodeStream)->ArgName("tx_rows")->Arg(1)->Arg(1000);

std::string WriteRecording(const Stream& s, const std::string& path) {
  RecordingHeader h;
  h.plugin = "pgoutput";
  h.server_version = "15 (synthetic)";
  h.slot = "bench";
  h.options = {{"proto_version", "1"}, {"publication_names", "walrelay_outbox"}};
  auto w = RecordingWriter::Create(path, h);
  if (!w.ok()) return w.status().ToString();
  for (const auto& [lsn, bytes] : s.frames) {
    slot::XLogData x;
    x.wal_start = Lsn(lsn);
    x.wal_end = Lsn(lsn);
    x.send_time = 780000000000000;
    x.data = bytes;
    if (Status st = (*w)->AppendXLogData(x); !st.ok()) return st.ToString();
  }
  Status st = (*w)->Finish();
  return st.ok() ? "" : st.ToString();
}

// The whole relay path on a recording file into the null sink: read + decode + assemble +
// map + produce + ack + status feedback. us/event here is the relay's CPU per event
// without Kafka.
void BM_ReplayNullSink(benchmark::State& state) {
  const int tx_rows = static_cast<int>(state.range(0));
  const int events = 20000;
  const std::string path = "/tmp/walrelay_relay_bench_" + std::to_string(::getpid()) + ".wrr";
  const Stream s = MakeStream(events, tx_rows);
  if (std::string err = WriteRecording(s, path); !err.empty())
    return state.SkipWithError(err.c_str());
  const RelayConfig config = BenchConfig();
  for (auto _ : state) {
    auto reader = RecordingReader::Open(path);
    if (!reader.ok()) return state.SkipWithError(reader.status().ToString().c_str());
    RelayStats stats;
    NullSink sink;
    LoggingDeadLetterSink dead;
    Pipeline::Options o;
    o.end_of_stream_is_error = false;
    Pipeline pipeline(config, stats, **reader, sink, dead, o);
    std::atomic<bool> stop{false};
    Status st = pipeline.Run(stop);
    if (!st.ok()) return state.SkipWithError(st.ToString().c_str());
    if (stats.events_acked.load() != static_cast<uint64_t>(events)) {
      return state.SkipWithError("not every event acked");
    }
  }
  ::unlink(path.c_str());
  state.SetItemsProcessed(state.iterations() * events);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s.bytes));
}
BENCHMARK(BM_ReplayNullSink)->ArgName("tx_rows")->Arg(1)->Arg(1000)->Unit(benchmark::kMillisecond);

// The ceiling outside walrelay: librdkafka's idempotent producer (walrelay's defaults)
// into an in-process mock cluster (3 brokers, 16 partitions), batches of 20,000 ~300-byte
// records, each batch flushed (every record acked). Process CPU (all librdkafka and mock
// broker threads). headers = how many of walrelay's headers each record carries, in this
// order: event_id, event_type, aggregate_type, walrelay.position (the four every record
// gets), then one extra header (a traceparent mapped from the row): the cost per header.
void BM_ProduceToMockCluster(benchmark::State& state) {
  const size_t header_count = static_cast<size_t>(state.range(0));
  auto cluster = kafka::MockCluster::Create(3);
  if (!cluster.ok()) return state.SkipWithError(cluster.status().ToString().c_str());
  if (!(*cluster)->CreateTopic("outbox.order", 16, 3).ok()) return state.SkipWithError("topic");
  kafka::ProducerOptions options;
  options.properties.emplace_back("bootstrap.servers", (*cluster)->bootstraps());
  uint64_t acked = 0;
  auto producer = kafka::Producer::Create(
      options, [&acked](uint64_t, const Status& st, const kafka::DeliveredRecord&) {
        if (st.ok()) ++acked;
      });
  if (!producer.ok()) return state.SkipWithError(producer.status().ToString().c_str());
  std::vector<std::string> values, keys, ids;
  for (int i = 0; i < 1024; ++i) {
    values.push_back(Payload(300, i));
    keys.push_back("customer-" + std::to_string(i % 5000));
    ids.push_back("018f2b6e-7c1a-7d3e-9a4b-" + std::to_string(100000000000 + i));
  }
  constexpr int kBatch = 20000;
  uint64_t produced = 0;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      const size_t k = static_cast<size_t>(i) & 1023;
      // position outlives Produce(): headers hold views.
      const std::string position =
          "lsn=0/230D4D70;ordinal=" + std::to_string(i) +
          ";xid=123456;commit_time_us=1764680000000000;source=public.outbox";
      const kafka::Header all[] = {{"event_id", ids[k]},
                                   {"event_type", "OrderPaid"},
                                   {"aggregate_type", "order"},
                                   {"walrelay.position", position},
                                   {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-01"}};
      const std::span<const kafka::Header> headers(all, header_count);
      Status st = (*producer)->Produce("outbox.order", keys[k], values[k], headers, produced++);
      if (!st.ok()) return state.SkipWithError(st.ToString().c_str());
      if ((i & 255) == 0) (*producer)->Poll(std::chrono::milliseconds(0));
    }
    if (!(*producer)->Flush(std::chrono::milliseconds(60000)).ok()) {
      return state.SkipWithError("flush");
    }
  }
  if (acked != produced) state.SkipWithError("not every record acked");
  state.SetItemsProcessed(static_cast<int64_t>(produced));
}
BENCHMARK(BM_ProduceToMockCluster)
    ->ArgName("headers")
    ->DenseRange(0, 5)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace walrelay::relay

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
