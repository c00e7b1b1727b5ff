// Writes the fuzz seed corpus (tests/decoder/corpus/) from testing::ValidSamples() when
// WALRELAY_WRITE_CORPUS names a directory; skipped otherwise. Run once after changing
// the samples:
//   WALRELAY_WRITE_CORPUS=tests/decoder/corpus
//     build-decoder/tests/decoder/decoder_test --gtest_filter='CorpusWriter.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tests/decoder/wire_builder.h"

namespace walrelay::pgoutput {
namespace {

TEST(CorpusWriter, WriteSeedCorpus) {
  const char* dir = std::getenv("WALRELAY_WRITE_CORPUS");
  if (dir == nullptr) GTEST_SKIP() << "set WALRELAY_WRITE_CORPUS=<dir> to write the corpus";
  std::set<std::string> seen;  // the same bytes appear under several versions
  for (const testing::Sample& s : testing::ValidSamples()) {
    if (!seen.insert(s.bytes).second) continue;
    std::ofstream out(std::string(dir) + "/" + s.name + ".bin", std::ios::binary);
    ASSERT_TRUE(out) << dir;
    out.write(s.bytes.data(), static_cast<std::streamsize>(s.bytes.size()));
  }
  // Sequences for the fuzzer's second mode: a version byte, then [Int16 length][message].
  namespace wire = testing::wire;
  auto sequence = [&](const std::string& name, uint8_t version_byte,
                      const std::vector<std::string>& msgs) {
    testing::WireBuilder b;
    b.Int8(version_byte);
    for (const std::string& m : msgs) b.Int16(static_cast<uint16_t>(m.size())).Bytes(m);
    std::ofstream out(std::string(dir) + "/" + name + ".bin", std::ios::binary);
    out.write(b.str().data(), static_cast<std::streamsize>(b.str().size()));
  };
  const std::vector<testing::RelCol> cols = {{1, "id", 23, -1}, {0, "payload", 3802, -1}};
  sequence("seq_txn_v1", 0,
           {wire::Begin(0x100, 5, 10), wire::Origin(0x50, "o"),
            wire::Relation({}, 16384, "public", "outbox", 'd', cols),
            wire::Insert({}, 16384, {testing::Text("1"), testing::Text("{}")}),
            wire::Update({}, 16384, 'K', {testing::Text("1"), testing::Null()},
                         {testing::Text("1"), testing::Toast()}),
            wire::Delete({}, 16384, 'K', {testing::Text("1"), testing::Null()}),
            wire::Commit(0x100, 0x140, 5)});
  sequence("seq_stream_v4", 3 | 4,
           {wire::StreamStart(11, 1), wire::Relation(11, 16384, "public", "outbox", 'd', cols),
            wire::Insert(11, 16384, {testing::Text("2"), testing::Null()}), wire::StreamStop(),
            wire::StreamStart(11, 0), wire::Message(11, 1, 0x180, "p", "x"), wire::StreamStop(),
            wire::StreamAbort(11, 12, std::make_pair(uint64_t{0x190}, int64_t{1})),
            wire::StreamCommit(11, 0x200, 0x240, 6)});
  // The documented outbox table: an event, a row that cannot be mapped (NULL aggregate_id),
  // one the pipeline fuzzer's sink refuses, a table-less event, a poison envelope; then
  // the same through protocol v2 streaming (seeds for tests/relay/pipeline_fuzz too).
  const auto outbox_row = [](std::string id, testing::Col aggregate_id, std::string payload) {
    return std::vector<testing::Col>{testing::Text(id), testing::Text("e-" + id),
                                     testing::Text("order"), aggregate_id, testing::Null(),
                                     testing::Text("Created"), testing::Text(payload),
                                     testing::Text(R"({"trace": "t"})"), testing::Null()};
  };
  sequence("seq_outbox_v1", 0,
           {wire::Begin(0x500, 9, 30), wire::OutboxRelation(16500),
            wire::Insert({}, 16500, outbox_row("1", testing::Text("a-1"), R"({"n": 1})")),
            wire::Insert({}, 16500, outbox_row("2", testing::Null(), "{}")),
            wire::Insert({}, 16500, outbox_row("3", testing::Text("a-1"), R"("REFUSE")")),
            wire::Message({}, 1, 0x540, "outbox",
                          R"({"event_id": "e-4", "aggregate_id": "a-2", "event_type": "X",)"
                          R"( "aggregate_type": "order", "payload": {"n": 4}})"),
            wire::Message({}, 1, 0x548, "outbox", R"({"event_id": 5})"),
            wire::Commit(0x500, 0x560, 9)});
  sequence("seq_outbox_stream_v2", 1,
           {wire::StreamStart(31, 1), wire::OutboxRelation(16500),
            wire::Insert(31, 16500, outbox_row("6", testing::Text("a-3"), "{}")),
            wire::StreamStop(), wire::StreamStart(31, 0),
            wire::Insert(31, 16500, outbox_row("7", testing::Text(""), "{}")),
            wire::StreamStop(), wire::StreamCommit(31, 0x600, 0x640, 10)});
  sequence("seq_two_phase_v3", 2,
           {wire::BeginPrepare(0x300, 0x340, 7, 20, "g"),
            wire::Insert({}, 16384, {testing::Text("3"), testing::Null()}),
            wire::PrepareLike('P', 0x300, 0x340, 7, 20, "g"),
            wire::CommitPrepared(0x400, 0x440, 8, 20, "g")});
}

}  // namespace
}  // namespace walrelay::pgoutput
