// Decoder throughput on REAL captured streams. pgoutput: tests/decoder/golden/
// pgoutput_v1.bin (73 kB, 73 messages of the golden workload: small and TOASTed jsonb,
// unicode, updates with 'u'/'K'/'O', deletes, truncate, logical messages), decoded with
// pgoutput::Decode and fed through RelationCache + TransactionAssembler, as the relay does.
//   build-golden/bench/decoder/decoder_golden_bench
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "decoder/pgoutput.h"
#include "decoder/relation_cache.h"
#include "decoder/transaction_assembler.h"
#include "decoder/wal2json.h"

namespace walrelay::pgoutput {
namespace {

std::vector<std::string> ReadGolden() {
  std::ifstream in(WALRELAY_GOLDEN_DIR "/pgoutput_v1.bin", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  std::vector<std::string> out;
  for (size_t pos = 0; pos + 4 <= all.size();) {
    const uint32_t n = decoder::LoadBigEndian32(all.data() + pos);
    out.push_back(all.substr(pos + 4, n));
    pos += 4 + n;
  }
  return out;
}

void BM_DecodeGoldenStream(benchmark::State& state) {
  const std::vector<std::string> msgs = ReadGolden();
  if (msgs.empty()) state.SkipWithError("golden stream not found");
  int64_t bytes = 0, items = 0;
  Message m;
  for (auto _ : state) {
    RelationCache cache;
    TransactionAssembler assembler;
    for (const std::string& b : msgs) {
      if (!Decode(b, {1, false, false}, &m).ok()) state.SkipWithError("decode failed");
      if (const auto* rel = std::get_if<Relation>(&m)) benchmark::DoNotOptimize(cache.Put(*rel));
      auto e = assembler.Feed(m);
      if (!e.ok()) state.SkipWithError("assembler failed");
      bytes += static_cast<int64_t>(b.size());
    }
    items += static_cast<int64_t>(msgs.size());
  }
  state.SetBytesProcessed(bytes);
  state.SetItemsProcessed(items);
}
BENCHMARK(BM_DecodeGoldenStream);

// wal2json (format-version 2) of the same workload: tests/decoder/golden/wal2json_v2.jsonl,
// one document per line, through Wal2JsonDecoder + RelationCache + TransactionAssembler.
void BM_DecodeWal2JsonGolden(benchmark::State& state) {
  std::ifstream in(WALRELAY_GOLDEN_DIR "/wal2json_v2.jsonl", std::ios::binary);
  std::vector<std::string> docs;
  for (std::string line; std::getline(in, line);) docs.push_back(line);
  if (docs.empty()) state.SkipWithError("golden wal2json stream not found");
  int64_t bytes = 0, items = 0, messages = 0;
  std::vector<Message> out;
  for (auto _ : state) {
    wal2json::Wal2JsonDecoder decoder;
    RelationCache cache;
    TransactionAssembler assembler;
    for (const std::string& d : docs) {
      if (!decoder.Decode(d, &out).ok()) state.SkipWithError("decode failed");
      for (const Message& m : out) {
        if (const auto* rel = std::get_if<Relation>(&m)) benchmark::DoNotOptimize(cache.Put(*rel));
        if (!assembler.Feed(m).ok()) state.SkipWithError("assembler failed");
      }
      messages += static_cast<int64_t>(out.size());
      bytes += static_cast<int64_t>(d.size());
    }
    items += static_cast<int64_t>(docs.size());
  }
  state.SetBytesProcessed(bytes);
  state.SetItemsProcessed(items);
  state.counters["messages_per_second"] =
      benchmark::Counter(static_cast<double>(messages), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeWal2JsonGolden);

}  // namespace
}  // namespace walrelay::pgoutput
BENCHMARK_MAIN();
