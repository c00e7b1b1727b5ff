// Decoder throughput on a REAL captured pgoutput stream: tests/decoder/golden/
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

}  // namespace
}  // namespace walrelay::pgoutput
BENCHMARK_MAIN();
