// `walrelay republish`: publishes outbox rows that are already in the tables again, with
// the mechanism of lost-slot recovery (recovery/backfill.h, PublishRows): under one snapshot,
// mapped exactly like streamed rows, marked recovered=1, unmappable rows dead-lettered,
// progress logged, done when Kafka acked every record. Consumers dedup on the event id.
//
// Uses: a slot that was lost or dropped with no walrelay progress (a Debezium slot, a
// relay run with recovery off), rows from before a slot existed, a consumer that lost
// data and must be fed again.
//
// With create_slot, the relay's slot is created first with an exported snapshot, and the
// rows are those visible in it; `walrelay run` then streams from that slot, which starts
// exactly at the snapshot: together nothing committed is missed (the zero-gap start
// after a lost Debezium slot, migrating-from-debezium.md). The snapshot is also recorded
// as the slot's recovery bound (core/progress.h): the operator asserts that every row the
// snapshot shows and the selection leaves out was delivered before.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/lsn.h"
#include "base/status.h"
#include "src/relay/core/config.h"
#include "src/relay/core/pipeline.h"
#include "src/relay/recovery/backfill.h"

namespace walrelay::relay {

struct RepublishRequest {
  // kUnpublished: rows poll mode has not marked (published_at IS NULL; polling/poller.h).
  enum class Rows { kAll, kSinceId, kSinceTime, kEventIds, kUnpublished };
  Rows rows = Rows::kAll;
  std::string since_id;    // kSinceId: rows whose id column (outbox.columns id) >= this
  std::string since_time;  // kSinceTime: rows whose created_at column >= this timestamptz
  std::vector<std::string> event_ids;  // kEventIds: rows with these event ids
  // Create config.slot (it must not exist) with an exported snapshot and republish the
  // rows visible in that snapshot.
  bool create_slot = false;
  // Republish although the slot is being read (a relay is running): old events then
  // interleave with new ones of the same aggregates in their partitions.
  bool while_relay_runs = false;
  bool dry_run = false;  // count the rows, publish nothing, create nothing
  // The consumers' inbox retention (0: not said). Rows older than it (by created_at) are
  // counted and warned about first: an inbox dead-letters a record whose event is older
  // than its retention instead of applying it (src/inbox/inbox.h), since it can no longer
  // tell whether it applied it.
  std::chrono::milliseconds consumer_retention{0};
};

struct RepublishResult {
  BackfillResult rows;  // counts (new_bound is unset)
  Lsn position;         // the records' position: the new slot's start, or the WAL insert
                        // position when the snapshot was taken
  bool slot_created = false;
};

// kInvalidArgument for a request the configuration cannot serve (no id or created_at
// column, no tables, the embedded Kafka); kFailedPrecondition, with the fix, for a slot
// that exists with create_slot or is active without while_relay_runs, or a publication
// that does not cover the tables.
Result<RepublishResult> Republish(const RelayConfig& config, const RepublishRequest& request);

// The idempotent producer of `config` (bootstrap servers and kafka.properties) for the
// commands that publish outside a relay session (republish, dead-letter re-drive).
Result<std::unique_ptr<KafkaSink>> StandaloneKafkaSink(const RelayConfig& config);

// The WHERE clause of a request (exposed for tests and --dry-run output).
Result<std::string> RepublishPredicate(const RelayConfig& config, const RepublishRequest& request);

}  // namespace walrelay::relay
