// Decoder throughput on a realistic outbox row: Insert messages with 9 columns and a
// ~300-byte jsonb payload, as pgoutput sends them (text format), and the same row as
// wal2json format-version 2 sends it (one decoder for the whole run, as the relay uses it).
//   build-decoder/bench/decoder/decoder_bench
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "decoder/pgoutput.h"
#include "decoder/transaction_assembler.h"
#include "decoder/wal2json.h"
#include "tests/decoder/wire_builder.h"

namespace walrelay::pgoutput {
namespace {

namespace t = testing;

std::string Payload() {
  std::string p =
      R"({"order_id":"b7a4f0d2-5c1e-4e8a-9f3d-2a6b8c0e1f47","customer_id":918273,)"
      R"("status":"PAID","currency":"EUR","total_cents":129900,"items":[{"sku":"KB-104",)"
      R"("qty":1,"price_cents":99900},{"sku":"MS-220","qty":2,"price_cents":15000}],)"
      R"("shipping":{"method":"express","country":"DE","zip":"10115"},)"
      R"("placed_at":"2024-05-01T12:34:56.789Z"})";
  return p;
}

// id uuid, aggregate_type, aggregate_id, event_type, payload jsonb, headers jsonb (null),
// created_at timestamptz, trace_id, sequence bigint.
std::string OutboxInsert(int i) {
  return t::wire::Insert(
      {}, 16384,
      {t::Text("6f1c2d3e-4b5a-4c7d-8e9f-" + std::to_string(100000000000 + i)), t::Text("order"),
       t::Text(std::to_string(1000000 + i)), t::Text("OrderPaid"), t::Text(Payload()), t::Null(),
       t::Text("2024-05-01 12:34:56.789012+00"), t::Text("00-4bf92f3577b34da6a3ce929d0e0e4736-01"),
       t::Text(std::to_string(i))});
}

std::vector<std::string> Messages() {
  std::vector<std::string> v;
  for (int i = 0; i < 1024; ++i) v.push_back(OutboxInsert(i));
  return v;
}

size_t TotalBytes(const std::vector<std::string>& v) {
  size_t n = 0;
  for (const auto& s : v) n += s.size();
  return n;
}

void BM_DecodeInsert(benchmark::State& state) {
  const std::vector<std::string> msgs = Messages();
  const DecodeOptions options{1, false, false};
  Message m;
  size_t i = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    const std::string& b = msgs[i++ & 1023];
    Status st = Decode(b, options, &m);
    benchmark::DoNotOptimize(st);
    benchmark::DoNotOptimize(m);
    bytes += static_cast<int64_t>(b.size());
  }
  state.SetBytesProcessed(bytes);
  state.SetItemsProcessed(state.iterations());
  state.counters["msg_bytes"] = static_cast<double>(TotalBytes(msgs)) / msgs.size();
}
BENCHMARK(BM_DecodeInsert);

// Decode plus a walk over every column into a reused vector (what the mapper does).
void BM_DecodeInsertAndFillColumns(benchmark::State& state) {
  const std::vector<std::string> msgs = Messages();
  const DecodeOptions options{1, false, false};
  Message m;
  std::vector<ColumnValue> cols;
  size_t i = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    const std::string& b = msgs[i++ & 1023];
    if (!Decode(b, options, &m).ok()) state.SkipWithError("decode failed");
    std::get<Insert>(m).new_tuple.FillColumns(&cols);
    benchmark::DoNotOptimize(cols.data());
    bytes += static_cast<int64_t>(b.size());
  }
  state.SetBytesProcessed(bytes);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeInsertAndFillColumns);

// Decode + assembler on transactions of 16 inserts (Begin, 16 x Insert, Commit).
void BM_DecodeAndAssembleTransactions(benchmark::State& state) {
  const std::vector<std::string> inserts = Messages();
  const DecodeOptions options{1, false, false};
  std::vector<std::string> begins, commits;
  for (uint32_t k = 0; k < 1024; ++k) {
    const uint64_t lsn = 0x1000 + uint64_t{k} * 0x1000;
    begins.push_back(t::wire::Begin(lsn, 1, k + 1));
    commits.push_back(t::wire::Commit(lsn, lsn + 0x100, 1));
  }
  TransactionAssembler assembler;
  Message m;
  size_t i = 0;
  size_t txn = 0;
  int64_t bytes = 0;
  int64_t items = 0;
  std::vector<ColumnValue> cols;
  for (auto _ : state) {
    if ((txn & 1023) == 0) assembler.Reset();  // LSNs restart with the precomputed set
    const std::string& begin = begins[txn & 1023];
    const std::string& commit = commits[txn & 1023];
    ++txn;
    auto feed = [&](const std::string& b) {
      if (!Decode(b, options, &m).ok() || !assembler.Feed(m).ok()) {
        state.SkipWithError("decode/assemble failed");
      }
      bytes += static_cast<int64_t>(b.size());
      ++items;
    };
    feed(begin);
    for (int k = 0; k < 16; ++k) {
      feed(inserts[i++ & 1023]);
      std::get<Insert>(m).new_tuple.FillColumns(&cols);
    }
    feed(commit);
  }
  state.SetBytesProcessed(bytes);
  state.SetItemsProcessed(items);
}
BENCHMARK(BM_DecodeAndAssembleTransactions);

// The outbox row of OutboxInsert as wal2json writes it: the jsonb payload is a JSON string
// of the document's text, so every quote in it is escaped.
std::string Wal2JsonOutboxInsert(int i) {
  std::string payload;
  for (char c : Payload()) {
    if (c == '"' || c == '\\') payload.push_back('\\');
    payload.push_back(c);
  }
  auto column = [](const char* name, const char* type, int oid, const std::string& value) {
    return std::string(R"({"name":")") + name + R"(","type":")" + type + R"(","typeoid":)" +
           std::to_string(oid) + R"(,"value":)" + value + "}";
  };
  auto str = [](const std::string& s) { return '"' + s + '"'; };
  return std::string(R"({"action":"I","xid":)") + std::to_string(700 + i / 1000) +
         R"(,"timestamp":"2024-05-01 12:34:56.789012+00","lsn":"0/)" +
         std::to_string(15000000 + i * 512) +
         R"(","schema":"public","table":"outbox","columns":[)" +
         column("id", "uuid", 2950,
                str("6f1c2d3e-4b5a-4c7d-8e9f-" + std::to_string(100000000000 + i))) +
         "," + column("aggregate_type", "text", 25, str("order")) + "," +
         column("aggregate_id", "text", 25, str(std::to_string(1000000 + i))) + "," +
         column("event_type", "text", 25, str("OrderPaid")) + "," +
         column("payload", "jsonb", 3802, str(payload)) + "," +
         column("headers", "jsonb", 3802, "null") + "," +
         column("created_at", "timestamp with time zone", 1184,
                str("2024-05-01 12:34:56.789012+00")) +
         "," + column("trace_id", "text", 25, str("00-4bf92f3577b34da6a3ce929d0e0e4736-01")) + "," +
         column("sequence", "bigint", 20, std::to_string(i)) +
         R"(],"pk":[{"name":"id","type":"uuid","typeoid":2950}]})";
}

void BM_DecodeWal2JsonOutboxInsert(benchmark::State& state) {
  std::vector<std::string> docs;
  for (int i = 0; i < 1000; ++i) docs.push_back(Wal2JsonOutboxInsert(i));
  wal2json::Wal2JsonDecoder decoder;
  std::vector<Message> out;
  int64_t bytes = 0, items = 0;
  for (auto _ : state) {
    for (const std::string& d : docs) {
      if (!decoder.Decode(d, &out).ok()) state.SkipWithError("decode failed");
      benchmark::DoNotOptimize(out.data());
      bytes += static_cast<int64_t>(d.size());
    }
    items += static_cast<int64_t>(docs.size());
  }
  state.SetBytesProcessed(bytes);
  state.SetItemsProcessed(items);
}
BENCHMARK(BM_DecodeWal2JsonOutboxInsert);

}  // namespace
}  // namespace walrelay::pgoutput

BENCHMARK_MAIN();
