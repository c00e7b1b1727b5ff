#include "decoder/relation_cache.h"

#include <string>

namespace walrelay::pgoutput {

int CachedRelation::FindColumn(std::string_view name) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const CachedRelation* RelationCache::Put(const Relation& relation) {
  auto entry = std::make_unique<CachedRelation>();
  entry->relation_id = relation.relation_id;
  entry->namespace_name = std::string(relation.namespace_name);
  entry->relation_name = std::string(relation.relation_name);
  entry->replica_identity = relation.replica_identity;
  entry->columns.reserve(relation.columns.size());
  for (const RelationColumn& c : relation.columns) {
    entry->columns.push_back(
        CachedColumn{std::string(c.name), c.flags, c.type_oid, c.type_modifier});
  }
  std::unique_ptr<CachedRelation>& slot = entries_[relation.relation_id];
  slot = std::move(entry);
  return slot.get();
}

const CachedRelation* RelationCache::Find(Oid relation_id) const {
  auto it = entries_.find(relation_id);
  return it == entries_.end() ? nullptr : it->second.get();
}

Result<const CachedRelation*> RelationCache::FindForTuple(Oid relation_id,
                                                          const TupleView& tuple) const {
  const CachedRelation* rel = Find(relation_id);
  if (rel == nullptr) {
    return DataLossError("pgoutput: change for relation " + std::to_string(relation_id) +
                         " before its Relation message");
  }
  if (tuple.size() != rel->columns.size()) {
    return DataLossError("pgoutput: tuple for relation " + rel->namespace_name + "." +
                         rel->relation_name + " (" + std::to_string(relation_id) + ") has " +
                         std::to_string(tuple.size()) + " columns, Relation message has " +
                         std::to_string(rel->columns.size()));
  }
  return rel;
}

}  // namespace walrelay::pgoutput
