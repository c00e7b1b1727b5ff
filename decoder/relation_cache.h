// RelationCache: the client-side relation map pgoutput expects (relation OID -> table
// description). pgoutput sends a Relation message before the first change to a table in a
// session and again whenever the table's definition may have changed (ALTER TABLE,
// rename, a new connection); every Relation message REPLACES the cached entry, so names,
// column lists and replica identity are never stale.
//
// Entries own copies of the strings (unlike pgoutput::Relation, which borrows the input).
// Thread safety: none; one cache per replication stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "decoder/pgoutput.h"

namespace walrelay::pgoutput {

struct CachedColumn {
  std::string name;
  uint8_t flags = 0;  // RelationColumn::kFlagKey
  Oid type_oid = 0;
  int32_t type_modifier = -1;

  bool is_key() const { return (flags & RelationColumn::kFlagKey) != 0; }
  friend bool operator==(const CachedColumn&, const CachedColumn&) = default;
};

struct CachedRelation {
  Oid relation_id = 0;
  std::string namespace_name;
  std::string relation_name;
  ReplicaIdentity replica_identity = ReplicaIdentity::kDefault;
  std::vector<CachedColumn> columns;

  // Index of the column called `name`, or -1.
  int FindColumn(std::string_view name) const;
  friend bool operator==(const CachedRelation&, const CachedRelation&) = default;
};

class RelationCache {
 public:
  RelationCache() = default;
  RelationCache(const RelationCache&) = delete;
  RelationCache& operator=(const RelationCache&) = delete;

  // Stores a copy of `relation`, replacing any entry with the same OID. Returns the entry.
  // Invalidates pointers previously returned for that OID.
  const CachedRelation* Put(const Relation& relation);

  // The entry for `relation_id`, or nullptr. The pointer is valid until the next Put for
  // the same OID, Clear(), or the cache's destruction.
  const CachedRelation* Find(Oid relation_id) const;

  // Checks that a tuple of a change to `relation_id` fits the cached description: the
  // relation is known and the tuple has as many columns. kDataLoss otherwise (pgoutput
  // always sends Relation before the first change that uses it).
  Result<const CachedRelation*> FindForTuple(Oid relation_id, const TupleView& tuple) const;

  // Forgets everything (on reconnect the server re-sends Relation messages).
  void Clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }

 private:
  // unique_ptr keeps entries at stable addresses across rehashing.
  std::unordered_map<Oid, std::unique_ptr<CachedRelation>> entries_;
};

}  // namespace walrelay::pgoutput
