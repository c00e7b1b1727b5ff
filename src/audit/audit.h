// walrelay audit: reconciles what Kafka holds with what the outbox tables committed, as a
// witness independent of the relay (issue 44). It shares only base/ (the position header's
// format, the header names) with the code it checks: no mapper, no producer, no progress
// table.
//
// Reference set: the rows of the outbox tables whose created_at falls in the window
// [now - since, now - grace) (the database's clock), read over a plain SQL connection:
// event id, aggregate id, inserting transaction (xmin). Rows are the truth of what
// committed: a rolled-back row is never visible. The window's end leaves the relay `grace`
// to publish what committed last. created_at is the insert time, not the commit: a
// transaction open longer than `grace` can commit after the window's end and its rows be
// reported missing too early (docs/operations.md section 18 says to size `grace` above it).
//
// Observed set: every record of the given topics from the first offset whose timestamp is
// at or after the window's start minus `slack` (CreateTime is set when the relay produced
// the record, after the commit) up to each partition's end as it was when the audit
// began (the last stable offset under read_committed), with its event id header and its
// walrelay.position header. The records are streamed into a temporary table on the audit's
// own connection (COPY): the audit's memory does not grow with the window; the database
// does the joins (it spills to disk as a sort would).
//
// Findings (each a count and up to `samples` event ids):
//   missing      a row in the window that no record carries and that is not in the
//                dead-letter table (committed, not delivered: what the relay promises never
//                happens)
//   dead-lettered a row in the window that is in the dead-letter table instead (not a
//                finding: accounted, with its reason there)
//   phantom      a record whose position names one of the outbox tables, committed in the
//                window (its commit time), not republished, whose event id no row of those
//                tables has (e.g. a rolled-back row, a record produced by something else)
//   duplicated   an event id carried by more than one record of the window (a repeat:
//                absorbed by the inbox; not an error in the default mode)
//   beyond the inbox's retention
//                of those, the events whose copies were produced further apart than
//                `inbox_retention` (when given): an inbox that forgets an event id after
//                that long applies the later copy again. A breach of what consumers rely on
//   out of order a first delivery of an event whose source position (lsn, ordinal) is
//                below the previous first delivery of the same key in the same partition
//   torn         a source transaction (xmin) of the window with some rows delivered and
//                some missing (the missing ones are also counted as missing)
//   late         a first delivery produced more than `late` after its commit
// Table-less events (pg_logical_emit_message) have no row: they are observed (counted,
// duplicates and order checked) but cannot be missing or phantom.
//
// The janitor: rows it deleted are out of the reference set, so a window older than the
// janitor's retention would report their records as phantom; the caller passes the
// retention it runs with (`janitor_retention`, 0 = no janitor) and a `since` beyond it is
// refused.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace walrelay::audit {

struct AuditOptions {
  std::string source_dsn;
  std::vector<std::string> tables = {"outbox"};  // SQL names, as the relay's source.tables
  std::string event_id_column = "event_id";
  std::string aggregate_id_column = "aggregate_id";
  std::string created_at_column = "created_at";
  std::string dead_letter_table = "walrelay_dead_letter";  // missing table: none
  std::vector<std::string> topics;                         // required
  std::map<std::string, std::string> kafka_properties;     // bootstrap.servers, security...
  std::string event_id_header = "event_id";
  std::string position_header = "walrelay.position";
  bool read_committed = true;
  std::chrono::seconds since{3600};
  std::chrono::seconds grace{300};
  std::chrono::seconds slack{300};
  std::chrono::milliseconds late{60000};
  std::chrono::seconds janitor_retention{0};
  std::chrono::seconds inbox_retention{0};  // the consumers' inbox retention; 0 = not checked
  size_t samples = 10;
  // Called at least every few seconds while records are read: records so far, partitions
  // done of all.
  std::function<void(uint64_t records, size_t partitions_done, size_t partitions)> progress;
};

struct Finding {
  uint64_t count = 0;
  std::vector<std::string> samples;  // event ids (torn: xids)
};

struct AuditReport {
  int64_t window_start_us = 0;  // Unix microseconds
  int64_t window_end_us = 0;
  uint64_t reference_rows = 0;     // rows in the window
  uint64_t records_read = 0;       // records read from Kafka (any time)
  uint64_t records_in_window = 0;  // of them, committed in the window
  uint64_t delivered_rows = 0;     // reference rows with a record
  Finding dead_lettered, missing, phantom, duplicated, out_of_order, torn, late;
  Finding duplicated_beyond_inbox;  // duplicated further apart than inbox_retention
  uint64_t duplicate_copies = 0;  // records beyond the first of each duplicated event
  // Partitions read from their start because the broker did not look offsets up by time.
  uint64_t partitions_read_whole = 0;
  // Outbox tables with no valid index led by the created_at column (and not partitioned):
  // the window is read by a sequential scan of each (`walrelay setup --audit-index`).
  std::vector<std::string> tables_scanned_whole;

  // Findings that break walrelay's guarantees: missing, phantom, out of order, torn, and a
  // duplicate the consumers' inbox no longer remembers. Other duplicates and late
  // deliveries are reported but are not breaches (the default mode repeats; lateness is a
  // service level).
  bool clean() const {
    return missing.count == 0 && phantom.count == 0 && out_of_order.count == 0 &&
           torn.count == 0 && duplicated_beyond_inbox.count == 0;
  }
};

// Runs one audit. Errors: InvalidArgument (options), Unavailable/Internal (database or
// Kafka unreachable), FailedPrecondition (a window the janitor's retention makes unsound).
Result<AuditReport> RunAudit(const AuditOptions& options);

// One paragraph for a terminal, and one JSON object (a line).
std::string FormatReport(const AuditReport& report, const AuditOptions& options);
std::string FormatReportJson(const AuditReport& report);

}  // namespace walrelay::audit
