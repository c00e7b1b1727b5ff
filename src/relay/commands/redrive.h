// Dead letters after the fact: listing them, and re-driving them once their cause is fixed
// (a topic created or allowed, a size limit raised, a row corrected): `walrelay
// dead-letters list | retry`.
//
// Re-drive rebuilds each selected letter's record the way the relay would now:
//   - a letter of an outbox table whose row is still there (found by its event id) is
//     mapped again from the row, with the current configuration: topic, key, value and the
//     row's own headers exactly as a streamed event;
//   - otherwise (a table-less event, or a row deleted since) from the letter's own fields
//     (event_id, aggregate_id, event_type, topic, payload): the record then has the
//     relay's headers but not the row's own (the letter does not keep them).
// The record carries the letter's source position (walrelay.position: its commit LSN,
// ordinal, xid, source; recovered=1 when the letter was written by recovery), so a
// consumer can tell where it came from; consumers dedup on the event id as always.
// Each letter's outcome is recorded on its row: redrive_outcome 'attempted' (with
// redriven_at) before its record is produced, so that a crash or a refused UPDATE between
// publishing and recording never lets the next retry publish it again silently; then
// 'published' once Kafka acked it, or 'failed' with `reason` replaced by the new reason
// when it could not be built or Kafka refused it (the letter stays, to be retried again).
// Letters already published by a re-drive are skipped; letters left 'attempted' (the
// outcome unknown: they may be in Kafka) are skipped and named unless
// `include_attempted`, which publishes them again knowingly (a consumer may see them twice,
// with the same event id).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "src/relay/core/config.h"

namespace walrelay::relay {

struct DeadLetterInfo {
  int64_t id = 0;
  std::string dead_at, slot, source, commit_lsn;
  bool recovered = false;
  int ordinal = 0;
  int64_t xid = 0;
  std::optional<std::string> event_id, aggregate_id, event_type, topic, payload;
  std::string reason;
  std::optional<std::string> redriven_at, redrive_outcome;
};

struct DeadLetterSelection {
  std::vector<int64_t> ids;  // these letters; empty: every letter (of the other filters)
  std::string since;         // dead_at >= this timestamptz; empty: any time
  bool include_published = false;  // also letters a re-drive already published
  bool include_attempted = false;  // retry: also letters whose earlier re-drive's outcome
                                   // is unknown (they may be published twice)
  int limit = 1000;                // list only
};

// The letters of config.dead_letter_table that `selection` selects, oldest first.
Result<std::vector<DeadLetterInfo>> ListDeadLetters(const RelayConfig& config,
                                                    const DeadLetterSelection& selection);

struct RedriveResult {
  int published = 0;  // acked by Kafka, recorded 'published'
  int failed = 0;     // recorded 'failed' with the new reason
  // Letters left 'attempted' by an earlier re-drive and not retried (no include_attempted).
  std::vector<int64_t> skipped_attempted;
  int published_again = 0;  // of `published`: 'attempted' ones retried (include_attempted)
};

// Re-drives the selected letters (never ones already published) and records each outcome.
// Errors other than a letter's own (the database, the producer) end it: letters whose
// outcome was not recorded stay as they were and can be retried.
Result<RedriveResult> RedriveDeadLetters(const RelayConfig& config,
                                         const DeadLetterSelection& selection);

}  // namespace walrelay::relay
