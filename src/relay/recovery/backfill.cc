#include "src/relay/recovery/backfill.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <cstring>
#include <deque>
#include <map>
#include <memory>

#include "slot/pg_error.h"
#include "src/relay/core/outbox_mapper.h"
#include "base/position.h"
#include "src/relay/core/record_builder.h"
#include "src/relay/core/schema.h"

namespace walrelay::relay {
using Clock = std::chrono::steady_clock;

namespace {

Status Exec(PGconn* conn, const std::string& sql, std::string_view what) {
  return slot::ExecPg(conn, sql, {}, "recovery: " + std::string(what)).status();
}

Result<uint64_t> ParseUint(const char* text, std::string_view what) {
  uint64_t v = 0;
  const char* end = text + std::strlen(text);
  auto [p, ec] = std::from_chars(text, end, v);
  if (ec != std::errc() || p != end) {
    return InternalError("recovery: cannot parse " + std::string(what) + " '" + text + "'");
  }
  return v;
}

constexpr uint64_t kXidSpace = uint64_t{1} << 32;
constexpr uint64_t kMaxSpan = uint64_t{1} << 31;

// A topic that is missing or refuses writes, within its bound (`bounded`: the relay's
// recovery, redone after its backoff) or for a one-shot republish (no bound: its fix).
// kUnavailable either way: nothing past the row is confirmed, the work can be redone.
Status TopicRefusal(const std::string& name, const std::string& topic, const std::string& why,
                    bool bounded) {
  return UnavailableError(
      name + ": kafka topic " + topic + " refused: " + why +
      (bounded ? "; the recovery is redone after the reconnect backoff until the topic works "
                 "or has failed for --kafka-topic-error-timeout-ms, then its rows are "
                 "dead-lettered; create the topic or grant the relay's principal Write on it"
               : "; nothing was lost (the rows stay in the outbox): create the topic or grant "
                 "the principal Write on it, then run the same republish again (rows "
                 "published before this one repeat)"));
}

std::string TopicDeadLetterReason(const std::string& why, const TopicErrors& errors) {
  return "Kafka refused the record's topic: " + why +
         " (failing for longer than --kafka-topic-error-timeout-ms=" +
         std::to_string(errors.timeout().count()) + ")";
}

}  // namespace

Result<uint64_t> CheckBound(const SnapshotBound& bound, uint64_t xmax) {
  const uint64_t xmin = bound.Xmin();
  const std::string fix =
      ": drop the slot, run `walrelay republish --all --create-slot` (it makes the slot anew "
      "and records a new bound; docs/operations.md, lost slot) and restart";
  if (xmin == 0 || xmax == 0) {
    return DataLossError("recovery: cannot read the recorded bound '" + bound.snapshot + "'" + fix);
  }
  if (xmax < xmin) {
    return DataLossError(
        "recovery: the recorded bound (snapshot " + bound.snapshot +
        ") is ahead of the server's transactions (next xid " + std::to_string(xmax) +
        "): the database was restored or replaced under the progress table, so the bound says "
        "nothing about its rows" +
        fix);
  }
  if (xmax - xmin >= kMaxSpan) {
    return DataLossError(
        "recovery: the recorded bound (snapshot " + bound.snapshot + ") is " +
        std::to_string(xmax - xmin) +
        " transactions old, too old to tell the outbox rows after it by their 32-bit xmin "
        "(2^31 at most)" +
        fix);
  }
  return xmax - xmin;
}

Status RecoveryDisabledRefusal(const RelayConfig& config, std::string_view state) {
  const std::string drop = " and the slot (SELECT pg_drop_replication_slot(" +
                           QuoteLiteral(config.slot) + ")) to start fresh knowingly";
  if (config.outbox_cleanup == OutboxCleanup::kSameTransaction) {
    return DataLossError(
        "replication slot " + config.slot + " is " + std::string(state) +
        " and --recovery-enabled is false (outbox.cleanup same-transaction: the writers "
        "deleted the rows, so nothing can be republished): the events committed after the "
        "recorded progress that the slot had not delivered are lost. Find them from the "
        "applications' own records if you can; then drop the progress rows of this slot in " +
        config.progress_table + drop);
  }
  return DataLossError(
      "replication slot " + config.slot + " is " + std::string(state) +
      " and --recovery-enabled is false: events after the recorded progress may be "
      "undelivered. Enable recovery (it republishes from the outbox tables the rows after the "
      "recorded bound), or drop the progress rows of this slot in " +
      config.progress_table + drop);
}

std::string RecoveryPredicate(uint64_t bound_xmin, uint64_t span) {
  // xmin - lo modulo 2^32, as a non-negative bigint; `xid` has no arithmetic of its own.
  return "((xmin::text::bigint - " + std::to_string(bound_xmin % kXidSpace) + ") & " +
         std::to_string(kXidSpace - 1) + ") < " + std::to_string(span);
}

Result<BackfillResult> Backfill(const RelayConfig& config, const slot::ConnInfo& conninfo,
                                const std::string& snapshot, Lsn consistent_point,
                                const SnapshotBound& bound, RecordSink& sink,
                                DeadLetterSink& dead_letters, RelayStats& stats,
                                const BackfillControl& control) {
  WALRELAY_ASSIGN_OR_RETURN(slot::PgConnPtr conn,
                            slot::ConnectPg(conninfo, nullptr, "recovery connection"));
  WALRELAY_RETURN_IF_ERROR(
      Exec(conn.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", "BEGIN"));
  if (!snapshot.empty()) {
    WALRELAY_RETURN_IF_ERROR(Exec(conn.get(), "SET TRANSACTION SNAPSHOT " + QuoteLiteral(snapshot),
                                  "importing the snapshot"));
  }

  // The snapshot N (the transaction snapshot under REPEATABLE READ) and its xmax: every row
  // visible in N was inserted by an xid below it. A fresh N (a kept slot) is taken by this
  // first statement, before the WAL position is read: every transaction visible in it
  // committed at or before that position.
  const uint64_t bound_xmin = bound.Xmin();
  SnapshotBound new_bound;
  new_bound.lsn = consistent_point;
  uint64_t span = 0;
  {
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgResultPtr r,
        slot::ExecPg(conn.get(),
                     "SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text", {},
                     "recovery: reading the snapshot"));
    new_bound.snapshot = PQgetvalue(r.get(), 0, 0);
    if (snapshot.empty()) {
      auto lsn = Lsn::Parse(PQgetvalue(r.get(), 0, 1));
      if (!lsn) return InternalError("recovery: pg_current_wal_insert_lsn() returned no LSN");
      new_bound.lsn = *lsn;
    }
    WALRELAY_ASSIGN_OR_RETURN(span, CheckBound(bound, new_bound.Xmax()));
  }
  RowSelection selection;
  selection.where = RecoveryPredicate(bound_xmin, span);
  if (!control.after_id.empty() && !config.columns.id.empty() && config.tables.size() == 1) {
    selection.where += " AND " + QuoteIdentifier(config.columns.id) + " > " +
                       QuoteLiteral(control.after_id);
  }
  selection.order_by = RowOrder(config, bound_xmin);
  selection.log_name = "recovery";
  selection.what = "inserted by transactions from xid " + std::to_string(bound_xmin) +
                   " on, the oldest one running at the recorded bound" +
                   (control.after_id.empty() ? std::string()
                                             : ", after id " + control.after_id +
                                                   " (an earlier attempt had every row up "
                                                   "to it acked)");
  selection.keep_alive = control.keep_alive;
  selection.on_progress = control.on_progress;
  selection.topic_errors = control.topic_errors;
  WALRELAY_ASSIGN_OR_RETURN(
      BackfillResult result,
      PublishRows(config, conn.get(), selection, consistent_point, sink, dead_letters, stats,
                  control.stop));
  WALRELAY_RETURN_IF_ERROR(Exec(conn.get(), "COMMIT", "COMMIT"));
  result.new_bound = std::move(new_bound);
  return result;
}

std::string RowOrder(const RelayConfig& config, uint64_t from_xid) {
  if (!config.columns.id.empty()) return QuoteIdentifier(config.columns.id);
  // Without an ordering id (a uuid key, Debezium's table): the inserting transaction's
  // place from `from_xid` on (modulo 2^32), then the row's place in the table (insertion
  // order within a transaction, unless the table was vacuumed and space reused).
  return "((xmin::text::bigint - " + std::to_string(from_xid % kXidSpace) + ") & " +
         std::to_string(kXidSpace - 1) + "), ctid";
}

Result<BackfillResult> PublishRows(const RelayConfig& config, PGconn* conn,
                                   const RowSelection& selection, Lsn position_lsn,
                                   RecordSink& sink, DeadLetterSink& dead_letters,
                                   RelayStats& stats, const std::atomic<bool>* stop) {
  const std::string& name = selection.log_name;
  const std::string& where = selection.where;
  const Lsn consistent_point = position_lsn;
  BackfillResult result;
  uint64_t pending = 0;
  // Asked to stop: what was produced is confirmed to no one, so the caller redoes it all.
  auto stopped = [&] { return stop != nullptr && stop->load(std::memory_order_relaxed); };
  auto cancelled = [&] {
    return CancelledError(name + ": stopped with " + std::to_string(pending) + " of " +
                          std::to_string(result.published) +
                          " produced rows not yet acknowledged by Kafka; the next run publishes "
                          "the whole selection again (duplicates, nothing lost)");
  };
  Status failure;
  // A record the broker refused for good (e.g. larger than its limit) is dead-lettered
  // from its own headers, like the pipeline does (invariant 7): one bad row must not stop
  // the recovery, which would then be redone, and refused, forever.
  // The acked prefix (selection.on_progress): the rows in the order read, index = their
  // ordinal, each done once acked or dead-lettered; the id of the last row of the done
  // prefix is what a redo may resume after.
  // One table only: ids of different tables do not order one another.
  const bool track =
      selection.on_progress && !config.columns.id.empty() && config.tables.size() == 1;
  std::deque<std::pair<std::string, bool>> window;  // (id, done)
  uint64_t window_first = 0;                        // ordinal of window.front()
  std::string acked_through, reported_through;
  auto mark_done = [&](uint64_t cookie) {  // cookie = ordinal + 1 (below)
    if (!track || cookie == 0 || cookie - 1 < window_first) return;
    const uint64_t at = cookie - 1 - window_first;
    if (at < window.size()) window[at].second = true;
  };
  auto advance = [&] {
    while (!window.empty() && window.front().second) {
      acked_through = std::move(window.front().first);
      window.pop_front();
      ++window_first;
    }
  };
  auto save_progress = [&]() -> Status {
    advance();
    if (!track || acked_through == reported_through) return Status::Ok();
    WALRELAY_RETURN_IF_ERROR(selection.on_progress(acked_through));
    reported_through = acked_through;
    return Status::Ok();
  };
  // Every loop turn: the watchdog sees the relay move. Twice a second: the caller's idle
  // connections get a statement, and the acked prefix is recorded (invariant 12).
  constexpr auto kKeepAliveEvery = std::chrono::milliseconds(500);
  Clock::time_point next_keep_alive = Clock::now() + kKeepAliveEvery;
  auto alive = [&]() -> Status {
    stats.loop_ticks.fetch_add(1, std::memory_order_relaxed);
    if (Clock::now() < next_keep_alive) return Status::Ok();
    next_keep_alive = Clock::now() + kKeepAliveEvery;
    if (selection.keep_alive) WALRELAY_RETURN_IF_ERROR(selection.keep_alive());
    return save_progress();
  };
  // A produced record dead-lettered from its own headers (recovered), as the pipeline does;
  // a letter that cannot be written ends the work.
  auto dead_letter_delivered = [&](uint64_t cookie, const kafka::DeliveredRecord& record,
                                   std::string reason) {
    DeadLetter l;
    const auto position = ParsePosition(record.Header(config.header_names.position));
    if (position) {
      l.source = position->source;
      l.ordinal = position->ordinal;
    }
    l.recovered = true;
    l.commit_lsn = consistent_point;
    SetRecordFields(record, config.header_names, &l);
    l.reason = reason;  // a view: alive through the Write
    Status written = dead_letters.Write(l);
    if (!written.ok()) {
      failure = written;
      return;
    }
    stats.events_dead_lettered.fetch_add(1, std::memory_order_relaxed);
    --result.published;
    ++result.dead_lettered;
    mark_done(cookie);
  };
  ScopedDeliveryHandler handler(
      sink, [&](uint64_t cookie, const Status& st, size_t, const kafka::DeliveredRecord* record) {
        --pending;
        if (st.ok()) {
          stats.events_acked.fetch_add(1, std::memory_order_relaxed);
          mark_done(cookie);
          return;
        }
        if (!failure.ok()) return;
        if (st.code() == StatusCode::kInvalidArgument && record != nullptr) {
          dead_letter_delivered(cookie, *record, "Kafka refused the record: " + st.message());
          return;
        }
        if (record != nullptr && record->topic_error()) {
          // The topic's own fault (missing, or Write refused by an ACL).
          const std::string topic(record->topic());
          if (selection.topic_errors != nullptr &&
              selection.topic_errors->Fail(topic, st.message())) {
            dead_letter_delivered(cookie, *record,
                                  TopicDeadLetterReason(st.message(), *selection.topic_errors));
            return;
          }
          failure = TopicRefusal(name, topic, st.message(), selection.topic_errors != nullptr);
          return;
        }
        failure = st.WithContext(name + ": delivery failed");
      });
  // The topic check before a topic's first record (once per topic and run): a missing or
  // unwritable topic is known at once instead of after a produce's metadata wait.
  // (Kept short below: RelayProcessTest.RecoveryPetsTheWatchdogWhileBrokersAreDown.)
  std::map<std::string, Status, std::less<>> topic_checks;

  // The count, under the same snapshot: what the log promises and the progress lines
  // measure against.
  for (const std::string& table : config.tables) {
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgResultPtr r,
        slot::ExecPg(conn,
                     "SELECT count(*) FROM " + QuoteQualifiedName(table) + " WHERE " + where, {},
                     name + ": counting the rows of " + table));
    WALRELAY_ASSIGN_OR_RETURN(uint64_t n, ParseUint(PQgetvalue(r.get(), 0, 0), "a count"));
    result.expected += n;
    spdlog::warn("{}: {} rows of {} to republish ({})", name, n, table, selection.what);
  }
  spdlog::warn("{}: {} rows to republish in all", name, result.expected);
  stats.recovery_rows_expected.store(result.expected, std::memory_order_relaxed);
  stats.recovery_rows_done.store(0, std::memory_order_relaxed);
  if (selection.count_only) return result;

  OutboxMapper mapper(config);
  OutboxEvent event;
  RecordBuilder record(config);
  uint32_t ordinal = 0;
  // A row dead-lettered before (or instead of) producing its record: `event` as mapped,
  // under the row's ordinal (recovered, at the consistent point); done in the acked prefix.
  auto dead_letter_row = [&](const std::string& table, uint32_t row_ordinal,
                             std::string_view payload, std::string reason) -> Status {
    DeadLetter l;
    l.source = table;
    l.recovered = true;
    l.commit_lsn = consistent_point;
    l.ordinal = row_ordinal;
    SetEventFields(event, &l);
    l.payload = payload;  // views: alive through the Write
    l.reason = reason;
    WALRELAY_RETURN_IF_ERROR(dead_letters.Write(l));
    stats.events_dead_lettered.fetch_add(1, std::memory_order_relaxed);
    ++result.dead_lettered;
    mark_done(uint64_t{row_ordinal} + 1);  // cookie = ordinal + 1
    return Status::Ok();
  };
  const Clock::time_point started = Clock::now();
  Clock::time_point last_report = started;
  uint64_t last_report_done = 0;
  auto done = [&] { return result.published + result.dead_lettered; };
  auto report = [&](bool final) {
    const Clock::time_point now = Clock::now();
    const double total_s = std::chrono::duration<double>(now - started).count();
    const double step_s = std::chrono::duration<double>(now - last_report).count();
    const double rate = step_s > 0 ? (done() - last_report_done) / step_s : 0.0;
    spdlog::warn("{}: {} {} of {} rows ({} published, {} dead-lettered), {:.0f} rows/s{}", name,
                 final ? "done:" : "progress:", done(), result.expected, result.published,
                 result.dead_lettered, final && total_s > 0 ? done() / total_s : rate,
                 final ? " on average" : "");
    last_report = now;
    last_report_done = done();
    stats.recovery_rows_done.store(done(), std::memory_order_relaxed);
  };
  constexpr auto kReportEvery = std::chrono::seconds(10);

  for (const std::string& table : config.tables) {
    WALRELAY_ASSIGN_OR_RETURN(const bool payload_is_bytea,
                              PayloadIsBytea(conn, table, config.columns));
    // Columns 0-6 the mapped fields, 7 the row's created_at in microseconds (the
    // event's time on the record: the inbox refuses what is older than its retention),
    // 8 the id (the acked prefix).
    const std::string created_at_us =
        config.columns.created_at.empty()
            ? std::string("NULL::text")
            : "(extract(epoch FROM " + QuoteIdentifier(config.columns.created_at) +
                  ") * 1000000)::bigint::text";
    const std::string select = "DECLARE backfill NO SCROLL CURSOR FOR SELECT " +
                               OutboxRowSelectList(config.columns) + ", " + created_at_us +
                               // Named apart: ORDER BY "id" would take an output
                               // column called id (text order) for the table's.
                               (track ? ", " + QuoteIdentifier(config.columns.id) +
                                            "::text AS walrelay_backfill_id"
                                      : "") +
                               " FROM " +
                               QuoteQualifiedName(table) + " WHERE " + where + " ORDER BY " +
                               selection.order_by;
    WALRELAY_RETURN_IF_ERROR(Exec(conn, select, "reading " + table));
    while (true) {
      WALRELAY_ASSIGN_OR_RETURN(
          slot::PgResultPtr rows,
          slot::ExecPg(conn, "FETCH 1000 FROM backfill", {}, name + ": reading " + table));
      const int n = PQntuples(rows.get());
      if (n == 0) break;
      for (int i = 0; i < n; ++i) {
        const OutboxRow row = OutboxRowAt(rows.get(), i, payload_is_bytea);
        if (track) window.emplace_back(PQgetvalue(rows.get(), i, 8), false);
        Status mapped = mapper.MapRow(table, row, &event);
        if (!mapped.ok()) {
          WALRELAY_RETURN_IF_ERROR(
              dead_letter_row(table, ordinal++, row.payload.value_or(""), mapped.message()));
          continue;
        }
        SourcePosition position;
        position.lsn = consistent_point;
        position.ordinal = ordinal;
        position.recovered = true;
        position.source = table;
        position.commit_time_us = 0;
        if (!PQgetisnull(rows.get(), i, 7)) {
          const char* us = PQgetvalue(rows.get(), i, 7);
          std::from_chars(us, us + std::strlen(us), position.commit_time_us);
        }
        auto check = topic_checks.find(event.topic);
        if (check == topic_checks.end()) {
          // A second at most: the loop stands still meanwhile (no watchdog pet), and brokers
          // that are down make a check wait its whole timeout; then the reports decide.
          Status st = sink.CheckTopic(event.topic, std::chrono::seconds(1));
          if (st.code() != StatusCode::kNotFound && st.code() != StatusCode::kPermissionDenied) {
            st = Status::Ok();  // usable, or the cluster cannot tell now: the reports decide
          }
          check = topic_checks.emplace(std::string(event.topic), std::move(st)).first;
        }
        if (!check->second.ok()) {
          if (selection.topic_errors == nullptr ||
              !selection.topic_errors->Fail(event.topic, check->second.message())) {
            return TopicRefusal(name, std::string(event.topic), check->second.message(),
                                selection.topic_errors != nullptr);
          }
          WALRELAY_RETURN_IF_ERROR(dead_letter_row(
              table, ordinal++, event.value,
              TopicDeadLetterReason(check->second.message(), *selection.topic_errors)));
          continue;
        }
        record.Build(event, position);
        ++ordinal;
        // The in-flight cap; the acked-prefix window is capped too (a partition whose
        // acks stall must not make it grow with every row read behind it).
        const uint64_t cap = static_cast<uint64_t>(config.max_in_flight_events);
        while (pending >= cap || (track && window.size() > 4 * cap)) {
          sink.Poll(std::chrono::milliseconds(10));
          if (!failure.ok()) return failure;
          if (stopped()) return cancelled();
          WALRELAY_RETURN_IF_ERROR(alive());
          advance();
          if (Clock::now() - last_report >= kReportEvery) report(false);
        }
        Status produced = sink.Produce(event.topic, event.key, record.value(), record.headers(),
                                       ordinal, /*timestamp_ms=*/0);  // commit time unknown
        if (produced.code() == StatusCode::kInvalidArgument) {  // can never be delivered
          WALRELAY_RETURN_IF_ERROR(
              dead_letter_row(table, ordinal - 1, event.value, produced.message()));
          continue;
        }
        WALRELAY_RETURN_IF_ERROR(produced);
        ++pending;
        ++result.published;
        stats.events_produced.fetch_add(1, std::memory_order_relaxed);
      }
      sink.Poll(std::chrono::milliseconds(0));
      if (!failure.ok()) return failure;
      if (stopped()) return cancelled();
      WALRELAY_RETURN_IF_ERROR(alive());
      if (Clock::now() - last_report >= kReportEvery) report(false);
    }
    WALRELAY_RETURN_IF_ERROR(Exec(conn, "CLOSE backfill", "closing the cursor"));
  }
  // Waiting for the acks: progress lines go on while the producer drains.
  while (pending != 0 && failure.ok()) {
    sink.Poll(std::chrono::milliseconds(100));
    WALRELAY_RETURN_IF_ERROR(sink.Fatal());
    if (stopped()) return cancelled();
    WALRELAY_RETURN_IF_ERROR(alive());
    if (Clock::now() - last_report >= kReportEvery) {
      spdlog::warn("{}: waiting for {} acks", name, pending);
      last_report = Clock::now();
    }
  }
  if (!failure.ok()) return failure;
  report(true);
  WALRELAY_RETURN_IF_ERROR(save_progress());
  return result;
}

}  // namespace walrelay::relay
