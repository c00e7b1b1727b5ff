#include "decoder/relation_cache.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/decoder/wire_builder.h"

namespace walrelay::pgoutput {
namespace {

namespace wire = testing::wire;

Relation DecodeRelation(const std::string& bytes) {
  Result<Message> r = Decode(bytes, DecodeOptions{});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::get<Relation>(*r);
}

TEST(RelationCacheTest, PutCopiesAndFind) {
  RelationCache cache;
  EXPECT_EQ(cache.Find(16384), nullptr);
  std::string bytes = wire::Relation({}, 16384, "public", "outbox", 'd',
                                     {{1, "id", 2950, -1}, {0, "payload", 3802, -1}});
  cache.Put(DecodeRelation(bytes));
  bytes.assign(bytes.size(), 'X');  // the cache must not borrow from the input
  const CachedRelation* rel = cache.Find(16384);
  ASSERT_NE(rel, nullptr);
  EXPECT_EQ(rel->namespace_name, "public");
  EXPECT_EQ(rel->relation_name, "outbox");
  EXPECT_EQ(rel->replica_identity, ReplicaIdentity::kDefault);
  ASSERT_EQ(rel->columns.size(), 2u);
  EXPECT_EQ(rel->columns[0], (CachedColumn{"id", 1, 2950, -1}));
  EXPECT_TRUE(rel->columns[0].is_key());
  EXPECT_EQ(rel->FindColumn("payload"), 1);
  EXPECT_EQ(rel->FindColumn("nope"), -1);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(RelationCacheTest, EveryRelationMessageReplacesTheEntry) {
  RelationCache cache;
  cache.Put(DecodeRelation(
      wire::Relation({}, 7, "public", "outbox", 'd', {{1, "id", 23, -1}, {0, "old_col", 25, -1}})));
  cache.Put(DecodeRelation(wire::Relation({}, 8, "public", "other", 'd', {})));
  // ALTER TABLE ... RENAME, column dropped and added, replica identity FULL.
  cache.Put(DecodeRelation(
      wire::Relation({}, 7, "app", "events", 'f', {{1, "id", 20, -1}, {1, "new_col", 1043, 36}})));
  const CachedRelation* rel = cache.Find(7);
  ASSERT_NE(rel, nullptr);
  EXPECT_EQ(rel->namespace_name, "app");
  EXPECT_EQ(rel->relation_name, "events");
  EXPECT_EQ(rel->replica_identity, ReplicaIdentity::kFull);
  ASSERT_EQ(rel->columns.size(), 2u);
  EXPECT_EQ(rel->columns[0], (CachedColumn{"id", 1, 20, -1}));
  EXPECT_EQ(rel->columns[1], (CachedColumn{"new_col", 1, 1043, 36}));
  EXPECT_EQ(rel->FindColumn("old_col"), -1);
  EXPECT_EQ(cache.size(), 2u);
  ASSERT_NE(cache.Find(8), nullptr);
  EXPECT_EQ(cache.Find(8)->relation_name, "other");
}

TEST(RelationCacheTest, PointersToOtherEntriesSurviveGrowth) {
  RelationCache cache;
  const CachedRelation* first =
      cache.Put(DecodeRelation(wire::Relation({}, 1, "s", "t1", 'd', {})));
  for (uint32_t oid = 2; oid < 500; ++oid) {
    cache.Put(DecodeRelation(wire::Relation({}, oid, "s", "t", 'd', {})));
  }
  EXPECT_EQ(cache.Find(1), first);
  EXPECT_EQ(first->relation_name, "t1");
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.Find(1), nullptr);
}

TEST(RelationCacheTest, FindForTupleChecksColumnCount) {
  RelationCache cache;
  cache.Put(
      DecodeRelation(wire::Relation({}, 5, "s", "t", 'd', {{1, "a", 23, -1}, {0, "b", 25, -1}})));
  auto insert = [](uint32_t oid, std::vector<testing::Col> cols) {
    static std::string keep;  // the decoded tuple borrows from it
    keep = wire::Insert({}, oid, cols);
    return std::get<Insert>(*Decode(keep, DecodeOptions{}));
  };
  Insert ok = insert(5, {testing::Text("1"), testing::Null()});
  Result<const CachedRelation*> r = cache.FindForTuple(5, ok.new_tuple);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->relation_name, "t");
  Insert wrong = insert(5, {testing::Text("1")});
  EXPECT_EQ(cache.FindForTuple(5, wrong.new_tuple).status().code(), StatusCode::kDataLoss);
  Insert unknown = insert(6, {});
  EXPECT_EQ(cache.FindForTuple(6, unknown.new_tuple).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace walrelay::pgoutput
