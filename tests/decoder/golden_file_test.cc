// Decodes the captured real pgoutput stream tests/decoder/golden/pgoutput_v1.bin (written
// by decoder_golden_test with WALRELAY_WRITE_GOLDEN; [Int32 big-endian length][message]
// records) without a server, so that a decoder change that breaks real server output
// fails the quick unit loop.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "decoder/pgoutput.h"
#include "decoder/relation_cache.h"
#include "decoder/transaction_assembler.h"
#include "decoder/wal2json.h"

namespace walrelay::pgoutput {
namespace {

std::vector<std::string> ReadGolden(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos + 4 <= all.size()) {
    const uint32_t n = decoder::LoadBigEndian32(all.data() + pos);
    if (pos + 4 + n > all.size()) break;
    out.push_back(all.substr(pos + 4, n));
    pos += 4 + n;
  }
  EXPECT_EQ(pos, all.size()) << "trailing bytes in " << path;
  return out;
}

TEST(GoldenFile, RealPgoutputStreamDecodes) {
  const std::vector<std::string> msgs = ReadGolden(WALRELAY_GOLDEN_DIR "/pgoutput_v1.bin");
  ASSERT_FALSE(msgs.empty());
  RelationCache cache;
  TransactionAssembler assembler;
  std::map<char, int> counts;
  Message m;
  int unchanged = 0;
  for (size_t i = 0; i < msgs.size(); ++i) {
    Status st = Decode(msgs[i], {1, false, false}, &m);
    ASSERT_TRUE(st.ok()) << i << ": " << st.ToString();
    auto event = assembler.Feed(m);
    ASSERT_TRUE(event.ok()) << i << ": " << event.status().ToString();
    ++counts[static_cast<char>(TypeOf(m))];
    if (const auto* rel = std::get_if<Relation>(&m)) {
      (void)cache.Put(*rel);
    }
    const TupleView* tuple = nullptr;
    Oid oid = 0;
    if (const auto* ins = std::get_if<Insert>(&m)) tuple = &ins->new_tuple, oid = ins->relation_id;
    if (const auto* upd = std::get_if<Update>(&m)) {
      tuple = &upd->new_tuple, oid = upd->relation_id;
      for (const ColumnValue& v : upd->new_tuple) unchanged += v.is_unchanged_toast();
    }
    if (const auto* del = std::get_if<Delete>(&m)) tuple = &del->old_tuple, oid = del->relation_id;
    if (tuple != nullptr) {
      auto rel = cache.FindForTuple(oid, *tuple);
      ASSERT_TRUE(rel.ok()) << i << ": " << rel.status().ToString();
    }
  }
  EXPECT_FALSE(assembler.in_transaction());
  EXPECT_EQ(counts['B'], counts['C']);
  // docs twice (ALTER TABLE), full_t, bin_t, and trunc_t THREE times: before its first
  // insert, before the TRUNCATE (a new transaction after an invalidation) and after it
  // (TRUNCATE gives the table a new relfilenode, which invalidates pgoutput's cache).
  EXPECT_EQ(counts['R'], 7);
  EXPECT_EQ(counts['I'], 17);
  EXPECT_EQ(counts['U'], 6);
  EXPECT_EQ(counts['D'], 2);
  EXPECT_EQ(counts['T'], 1);
  EXPECT_EQ(counts['M'], 3);
  EXPECT_EQ(unchanged, 3);  // docs.doc, docs.big (id 4), full_t.big (id 3)
}

// The same workload as captured from the wal2json plugin (golden/wal2json_v2.jsonl).
TEST(GoldenFile, RealWal2JsonStreamDecodes) {
  std::ifstream in(WALRELAY_GOLDEN_DIR "/wal2json_v2.jsonl", std::ios::binary);
  wal2json::Wal2JsonDecoder decoder;
  RelationCache cache;
  TransactionAssembler assembler;
  std::map<char, int> counts;
  std::vector<Message> out;
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    Status st = decoder.Decode(line, &out);
    ASSERT_TRUE(st.ok()) << lines << ": " << st.ToString();
    for (const Message& m : out) {
      ++counts[static_cast<char>(TypeOf(m))];
      if (const auto* rel = std::get_if<Relation>(&m)) (void)cache.Put(*rel);
      if (const auto* ins = std::get_if<Insert>(&m)) {
        ASSERT_TRUE(cache.FindForTuple(ins->relation_id, ins->new_tuple).ok());
      }
      ASSERT_TRUE(assembler.Feed(m).ok()) << lines;
    }
  }
  ASSERT_GT(lines, 0);
  EXPECT_FALSE(assembler.in_transaction());
  EXPECT_EQ(counts['B'], counts['C']);
  EXPECT_EQ(counts['I'], 17);
  EXPECT_EQ(counts['U'], 6);
  EXPECT_EQ(counts['D'], 2);
  EXPECT_EQ(counts['T'], 1);
  EXPECT_EQ(counts['M'], 3);
}

}  // namespace
}  // namespace walrelay::pgoutput
