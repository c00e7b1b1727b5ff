// Lost-slot recovery: republishes, from the outbox tables, the rows a lost slot may not
// have delivered.
//
// When the slot is invalidated (wal_status 'lost': max_slot_wal_keep_size removed WAL it
// needed) or dropped, the WAL of the undelivered events is gone, but the rows are still in
// the outbox tables. The relay then (relay.cc, Session::Start):
//   1. marks the recovery in the progress table (so a failure half-way redoes it);
//   2. drops the lost slot and creates it anew with an exported snapshot;
//   3. Backfill(): under that snapshot, publishes every row with id > the recorded
//      progress, and every row created within `lookback` before the progress was written
//      (a transaction that was open across the recorded point can commit ids below it);
//      waits until Kafka acked all of them (unmappable rows are dead-lettered);
//   4. records the new progress, clears the mark, and streams from the new slot, whose
//      start is exactly the snapshot: nothing is missed between the two.
// Duplicates are expected (consumers dedup on event_id); loss is not. Documented limit:
// rows deleted from the outbox before recovery cannot be republished.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "base/lsn.h"
#include "base/status.h"
#include "src/relay/config.h"
#include "src/relay/dead_letter.h"
#include "src/relay/pipeline.h"
#include "src/relay/progress.h"
#include "src/relay/relay_stats.h"

namespace walrelay::relay {

struct BackfillResult {
  uint64_t published = 0;
  uint64_t dead_lettered = 0;
  std::map<std::string, int64_t> max_id;  // per table, the highest id republished
};

// Publishes the rows described above and waits for every ack (up to `ack_timeout`).
// `snapshot` is the exported snapshot of the new slot; `consistent_point` its start.
Result<BackfillResult> Backfill(const RelayConfig& config, const std::string& conninfo,
                                const std::string& snapshot, Lsn consistent_point,
                                const Progress& progress, RecordSink& sink,
                                DeadLetterSink& dead_letters, RelayStats& stats);

}  // namespace walrelay::relay
