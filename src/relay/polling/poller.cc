#include "src/relay/polling/poller.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <chrono>
#include <map>
#include <set>

#include "base/sql.h"
#include "base/position.h"
#include "src/relay/core/record_builder.h"
#include "src/relay/core/outbox_rows.h"
#include "src/relay/core/schema.h"

namespace walrelay::relay {
using Clock = std::chrono::steady_clock;

namespace {

// Columns of the poll's SELECT before OutboxRowSelectList's seven. A row is named by
// (tableoid, ctid): in a partitioned outbox every partition has a row at (0,1), (0,2), ...
// (invariant 10).
constexpr int kTableOid = 0, kCtid = 1, kId = 2, kRetryCount = 3, kXmin = 4, kFirstMapped = 5;

Status Exec(PGconn* conn, const std::string& sql, std::string_view what,
            const std::vector<const char*>& params = {}) {
  return slot::ExecPg(conn, sql, params, "poll: " + std::string(what)).status();
}

template <typename T>
bool ParseNumber(std::string_view text, T* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && p == text.data() + text.size();
}

// A PostgreSQL array literal of tids: {"(0,1)","(0,2)"}.
std::string TidArray(const std::vector<std::string>& tids) {
  std::string out = "{";
  for (size_t i = 0; i < tids.size(); ++i) {
    if (i != 0) out += ',';
    out += '"';
    out += tids[i];
    out += '"';
  }
  out += '}';
  return out;
}

// A letter with the event's fields and `payload`.
DeadLetter LetterOf(const OutboxEvent& event, std::string_view payload) {
  DeadLetter l;
  SetEventFields(event, &l);
  l.payload = payload;
  return l;
}

}  // namespace

std::string PollShardPredicate(const std::string& aggregate_id_column, const PollShard& shard) {
  if (shard.count <= 1) return "";
  // hashtext() is signed and % keeps the sign: the mask makes every hash non-negative.
  return "(hashtext(" + QuoteIdentifier(aggregate_id_column) + "::text) & 2147483647) % " +
         std::to_string(shard.count) + " = " + std::to_string(shard.index);
}

std::string PollWaitingPredicate(std::string_view alias) {
  const std::string a(alias);
  return a + "." + std::string(kPublishedAtColumn) + " IS NULL AND " + a + "." +
         std::string(kRetryAtColumn) + " IS NOT NULL";
}

std::string PollSelectSql(const RelayConfig& config, const std::string& table,
                          const PollShard& shard) {
  const std::string id = QuoteIdentifier(config.columns.id);
  std::string where = std::string(QuoteIdentifier(kPublishedAtColumn)) + " IS NULL AND (" +
                      "retry_at IS NULL OR retry_at <= now())";
  if (const std::string s = PollShardPredicate(config.columns.aggregate_id, shard); !s.empty()) {
    where += " AND " + s;
  }
  // Order per aggregate: a row waiting for its retry holds back the later rows of its
  // aggregate (read through the partial index PollWaitingIndexSql makes).
  where += " AND NOT EXISTS (SELECT 1 FROM " + QuoteQualifiedName(table) + " AS w WHERE " +
           PollWaitingPredicate("w") + " AND w." + QuoteIdentifier(config.columns.aggregate_id) +
           " = o." + QuoteIdentifier(config.columns.aggregate_id) + " AND w." + id + " < o." + id +
           ")";
  if (config.poll_wait_for_older_transactions) {
    // The row's inserting transaction precedes the oldest one still running (age() of a
    // frozen xmin is the largest there is, so old rows pass too).
    where +=
        " AND age(xmin) > age((pg_snapshot_xmin(pg_current_snapshot())::text::bigint % "
        "4294967296)::text::xid)";
  }
  // ORDER BY o.id: unqualified, "id" would name the text output column and sort as text.
  return "SELECT tableoid::oid::text, ctid::text, " + id + "::text, " + QuoteIdentifier(kRetryCountColumn) +
         ", xmin::text, " + OutboxRowSelectList(config.columns) + " FROM " +
         QuoteQualifiedName(table) + " AS o WHERE " + where + " ORDER BY o." + id + " LIMIT " +
         std::to_string(config.poll_batch_rows) + " FOR UPDATE SKIP LOCKED";
}

Poller::Poller(const RelayConfig& config, PGconn* conn, RecordSink& sink,
               DeadLetterSink& dead_letters, RelayStats& stats, metrics::Histogram* rows_per_poll,
               metrics::Histogram* produce_latency)
    : config_(config),
      conn_(conn),
      sink_(sink),
      dead_letters_(dead_letters),
      stats_(stats),
      rows_per_poll_(rows_per_poll),
      produce_latency_(produce_latency),
      mapper_(config),
      reach_(sink, stats, config.bootstrap_servers) {}

Poller::~Poller() = default;

std::string PollDeadLetterSlot(const RelayConfig& config) { return "poll:" + config.slot; }

Status Poller::Prepare() {
  WALRELAY_ASSIGN_OR_RETURN(shard_, ParsePollShard(config_.poll_shard));
  payload_is_bytea_.clear();
  select_sql_.clear();
  // The poll must walk the partial index in id order and stop after poll_batch_rows. On a
  // table whose statistics are missing or stale (new, just bulk-loaded) the planner
  // estimates a handful of unpublished rows and reads *all* of them (bitmap scan + sort)
  // in every poll: O(backlog) per batch, measured 16 ms per 100 rows with 10,000 waiting
  // (bench/poll_vs_wal.sh). This connection runs only the poller's statements.
  WALRELAY_RETURN_IF_ERROR(
      Exec(conn_,
           "SELECT set_config('enable_seqscan', 'off', false), "
           "set_config('enable_bitmapscan', 'off', false)",
           "planner settings"));
  for (const std::string& table : config_.tables) {
    const std::string quoted = QuoteQualifiedName(table);
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgResultPtr r,
        slot::ExecPg(conn_,
                     "SELECT count(*) FROM pg_attribute WHERE attrelid = $1::regclass AND "
                     "attname IN ('published_at', 'retry_count', 'last_error', 'retry_at') AND "
                     "NOT attisdropped",
                     {quoted.c_str()}, "poll: reading the columns of " + table));
    if (std::string_view(PQgetvalue(r.get(), 0, 0)) != "4") {
      return InvalidArgumentError(
          "poll mode: " + table +
          " lacks the columns the polling publisher keeps its state in (published_at, "
          "retry_count, last_error, retry_at). Fix: run `walrelay setup --source-mode poll` "
          "with the same options (it adds them and the partial index, idempotently)");
    }
    // The index of the rows waiting for a retry (an upgrade from a version without it):
    // without it, each poll's hold-back check reads the unpublished rows instead.
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgResultPtr waiting,
        slot::ExecPg(conn_,
                     "SELECT count(*) FROM pg_index WHERE indrelid = $1::regclass AND "
                     "pg_get_expr(indpred, indrelid) LIKE '%retry_at IS NOT NULL%'",
                     {quoted.c_str()}, "poll: reading the indexes of " + table));
    if (std::string_view(PQgetvalue(waiting.get(), 0, 0)) == "0") {
      spdlog::warn("poll: {} has no index of the rows waiting for a retry, so every poll reads "
                   "its unpublished rows to keep order per aggregate (slow with a backlog). "
                   "Fix: run `walrelay setup --source-mode poll` with the same options (it "
                   "adds {})",
                   table, PollIndexName(table, "_waiting"));
    }
    WALRELAY_ASSIGN_OR_RETURN(bool bytea, PayloadIsBytea(conn_, table, config_.columns));
    payload_is_bytea_.push_back(bytea);
    select_sql_.push_back(PollSelectSql(config_, table, shard_));
  }
  return Status::Ok();
}

Result<uint64_t> Poller::PollOnce(const std::atomic<bool>& stop) {
  uint64_t handled = 0;
  reach_.Check();
  for (size_t i = 0; i < config_.tables.size(); ++i) {
    WALRELAY_ASSIGN_OR_RETURN(uint64_t n, PollTable(i, stop));
    handled += n;
  }
  return handled;
}

Result<uint64_t> Poller::PollTable(size_t table_index, const std::atomic<bool>& stop) {
  const std::string& table = config_.tables[table_index];
  WALRELAY_RETURN_IF_ERROR(Exec(conn_, "BEGIN", "BEGIN"));
  WALRELAY_ASSIGN_OR_RETURN(slot::PgResultPtr rows,
                            slot::ExecPg(conn_, select_sql_[table_index], {},
                                         "poll: reading the unpublished rows of " + table));
  const int n = PQntuples(rows.get());
  if (rows_per_poll_ != nullptr) rows_per_poll_->Observe(n);
  if (n == 0) {
    WALRELAY_RETURN_IF_ERROR(Exec(conn_, "COMMIT", "COMMIT"));
    return uint64_t{0};
  }
  // kHeld: a later row of an aggregate whose earlier row failed in this poll; left as it
  // was (unpublished, no attempt counted), so it follows that row when it is published.
  enum class State { kPending, kPublished, kDeadLettered, kFailed, kHeld };
  struct Row {
    State state = State::kPending;
    int64_t id = 0;
    std::string error;  // kFailed: why
    Clock::time_point produced_at;
  };
  std::vector<Row> batch(n);
  uint64_t pending = 0;
  Status failure;
  // Aggregates with a row that failed in this poll: their later rows are held back,
  // whatever their topic (a refused delivery as well as a refused topic check).
  std::set<std::string, std::less<>> failed_aggregates;

  // A dead letter of row i (its id keys it: written twice, kept once), with the event
  // fields set by the caller.
  auto dead_letter = [&](int i, DeadLetter l, std::string_view reason) -> Status {
    l.source = table;
    l.commit_lsn = Lsn(static_cast<uint64_t>(batch[i].id));
    l.ordinal = static_cast<uint32_t>(table_index);
    uint32_t xid = 0;
    ParseNumber(std::string_view(PQgetvalue(rows.get(), i, kXmin)), &xid);
    l.xid = xid;
    l.reason = reason;
    Status written = dead_letters_.Write(l);
    if (!written.ok()) {
      stats_.dead_letter_write_failures.fetch_add(1, std::memory_order_relaxed);
      return written;
    }
    stats_.events_dead_lettered.fetch_add(1, std::memory_order_relaxed);
    batch[i].state = State::kDeadLettered;
    return Status::Ok();
  };
  auto mapped_row = [&](int i) {
    return OutboxRowAt(rows.get(), i, payload_is_bytea_[table_index], kFirstMapped);
  };

  ScopedDeliveryHandler handler(sink_, [&](uint64_t cookie, const Status& st, size_t,
                                           const kafka::DeliveredRecord* record) {
    --pending;
    Row& row = batch[cookie];
    if (st.ok()) {
      row.state = State::kPublished;
      stats_.events_acked.fetch_add(1, std::memory_order_relaxed);
      if (produce_latency_ != nullptr) {
        produce_latency_->Observe(
            std::chrono::duration<double>(Clock::now() - row.produced_at).count());
      }
      return;
    }
    if (!failure.ok()) return;
    if (st.code() == StatusCode::kInvalidArgument && record != nullptr) {
      DeadLetter l;
      SetRecordFields(*record, config_.header_names, &l);
      Status written =
          dead_letter(static_cast<int>(cookie), l, "Kafka refused the record: " + st.message());
      if (!written.ok()) failure = written;
      return;
    }
    if (st.code() == StatusCode::kNotFound || st.code() == StatusCode::kPermissionDenied) {
      row.state = State::kFailed;
      row.error = st.message();
      if (const OutboxRow refused = mapped_row(static_cast<int>(cookie)); refused.aggregate_id) {
        failed_aggregates.emplace(*refused.aggregate_id);
      }
      return;
    }
    failure = st.WithContext("poll: delivery failed");
  });
  // Every record produced so far acked or refused (records never time out: a broker
  // outage is waited out, invariant 9; a stop request waits shutdown_timeout).
  std::optional<Clock::time_point> stop_deadline;
  auto await_deliveries = [&]() -> Status {
    while (pending != 0) {
      sink_.Poll(std::chrono::milliseconds(50));
      reach_.Check();
      stats_.loop_ticks.fetch_add(1, std::memory_order_relaxed);
      if (!failure.ok()) return failure;
      WALRELAY_RETURN_IF_ERROR(sink_.Fatal());
      if (stop.load(std::memory_order_relaxed)) {
        if (!stop_deadline) stop_deadline = Clock::now() + config_.shutdown_timeout;
        if (Clock::now() >= *stop_deadline) {
          return UnavailableError("poll: stopped with " + std::to_string(pending) +
                                  " records of " + table +
                                  " not acknowledged by Kafka: their rows stay unpublished "
                                  "and are published again at the next start");
        }
      }
    }
    return failure;
  };

  OutboxEvent event;
  RecordBuilder record(config_);
  std::map<std::string, Status, std::less<>> topics;  // checked in this poll
  // A topic that exists and may be written is believed for a while: asking costs a
  // metadata round trip to the broker, which per poll halved the throughput or worse.
  auto check_topic = [&](std::string_view topic) -> Status {
    const Clock::time_point now = Clock::now();
    if (auto ok = topics_ok_.find(topic); ok != topics_ok_.end() && ok->second > now) {
      return Status::Ok();
    }
    Status st = sink_.CheckTopic(topic, std::chrono::seconds(5));
    if (st.ok()) topics_ok_[std::string(topic)] = now + std::chrono::seconds(30);
    return st;
  };
  // Per aggregate, the topic of its latest row produced in this poll: a row of the same
  // aggregate for another topic waits until the earlier one is acknowledged or refused (no
  // partition orders records of two topics), and is held back if it was refused.
  // (Keys view the rows' result, alive for the whole poll.)
  std::map<std::string_view, std::string, std::less<>> produced_topic;
  for (int i = 0; i < n; ++i) {
    if (!ParseNumber(std::string_view(PQgetvalue(rows.get(), i, kId)), &batch[i].id)) {
      return InvalidArgumentError("poll mode: the id column " + config_.columns.id + " of " +
                                     table + " holds '" + PQgetvalue(rows.get(), i, kId) +
                                     "', not an integer: poll mode orders rows by an integer id "
                                     "(an identity column)");
    }
    const OutboxRow row = mapped_row(i);
    if (row.aggregate_id && failed_aggregates.contains(*row.aggregate_id)) {
      batch[i].state = State::kHeld;
      continue;
    }
    Status mapped = mapper_.MapRow(table, row, &event);
    if (!mapped.ok()) {
      WALRELAY_RETURN_IF_ERROR(
          dead_letter(i, LetterOf(event, row.payload.value_or("")), mapped.message()));
      continue;
    }
    auto topic = topics.find(event.topic);
    if (topic == topics.end()) {
      topic = topics.emplace(std::string(event.topic), check_topic(event.topic)).first;
    }
    if (topic->second.code() == StatusCode::kNotFound ||
        topic->second.code() == StatusCode::kPermissionDenied) {
      batch[i].state = State::kFailed;
      batch[i].error = topic->second.message();
      if (row.aggregate_id) failed_aggregates.emplace(*row.aggregate_id);
      continue;
    }
    if (row.aggregate_id) {
      auto earlier = produced_topic.find(*row.aggregate_id);
      if (earlier != produced_topic.end() && earlier->second != event.topic && pending != 0) {
        WALRELAY_RETURN_IF_ERROR(await_deliveries());
      }
      if (failed_aggregates.contains(*row.aggregate_id)) {
        batch[i].state = State::kHeld;
        continue;
      }
      if (earlier == produced_topic.end()) {
        produced_topic.emplace(*row.aggregate_id, event.topic);
      } else if (earlier->second != event.topic) {
        earlier->second = event.topic;
      }
    }
    SourcePosition position;
    position.xid = 0;
    ParseNumber(std::string_view(PQgetvalue(rows.get(), i, kXmin)), &position.xid);
    position.source = table;
    record.Build(event, position);
    batch[i].produced_at = Clock::now();
    Status produced = sink_.Produce(event.topic, event.key, record.value(), record.headers(),
                                    static_cast<uint64_t>(i), /*timestamp_ms=*/0);
    if (produced.code() == StatusCode::kInvalidArgument) {  // can never be delivered
      WALRELAY_RETURN_IF_ERROR(dead_letter(i, LetterOf(event, event.value), produced.message()));
      continue;
    }
    WALRELAY_RETURN_IF_ERROR(produced);
    ++pending;
    stats_.events_produced.fetch_add(1, std::memory_order_relaxed);
    stats_.in_flight_events.store(pending, std::memory_order_relaxed);
    sink_.Poll(std::chrono::milliseconds(0));
    if (!failure.ok()) return failure;
  }

  // Every record acked or refused before anything is marked.
  WALRELAY_RETURN_IF_ERROR(await_deliveries());
  stats_.in_flight_events.store(0, std::memory_order_relaxed);

  // Rows that failed: counted, and dead-lettered once they used up their attempts.
  const auto retry_after = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(100),
      config_.kafka_topic_error_timeout / std::max<int64_t>(1, config_.poll_max_attempts));
  const std::string retry_interval = std::to_string(retry_after.count()) + " milliseconds";
  for (int i = 0; i < n; ++i) {
    if (batch[i].state != State::kFailed) continue;
    int64_t attempts = 0;
    ParseNumber(std::string_view(PQgetvalue(rows.get(), i, kRetryCount)), &attempts);
    ++attempts;
    stats_.poll_failed_produces.fetch_add(1, std::memory_order_relaxed);
    if (attempts >= config_.poll_max_attempts) {
      const OutboxRow row = mapped_row(i);
      Status mapped = mapper_.MapRow(table, row, &event);
      const std::string reason = "failed to publish " + std::to_string(attempts) +
                                 " times (poll.max_attempts), last: " + batch[i].error;
      WALRELAY_RETURN_IF_ERROR(dead_letter(
          i, LetterOf(event, mapped.ok() ? event.value : row.payload.value_or("")), reason));
      spdlog::error("poll: row {} of {} dead-lettered: {}", batch[i].id, table, reason);
      continue;
    }
    spdlog::warn("poll: row {} of {} not published (attempt {} of {}, retried in {} ms): {}",
                 batch[i].id, table, attempts, config_.poll_max_attempts, retry_after.count(),
                 batch[i].error);
    const std::string error = SanitizeText(batch[i].error);
    WALRELAY_RETURN_IF_ERROR(Exec(
        conn_,
        "UPDATE " + QuoteQualifiedName(table) +
            " SET retry_count = retry_count + 1, last_error = $3, retry_at = now() + "
            "$4::interval WHERE tableoid = $1::oid AND ctid = $2::tid",
        "counting a failed attempt",
        {PQgetvalue(rows.get(), i, kTableOid), PQgetvalue(rows.get(), i, kCtid), error.c_str(),
         retry_interval.c_str()}));
  }
  // Marked per partition (tableoid): one statement for a plain table.
  std::map<std::string, std::vector<std::string>> done;  // tableoid -> ctids
  for (int i = 0; i < n; ++i) {
    if (batch[i].state == State::kPublished || batch[i].state == State::kDeadLettered) {
      done[PQgetvalue(rows.get(), i, kTableOid)].emplace_back(PQgetvalue(rows.get(), i, kCtid));
    }
  }
  for (const auto& [table_oid, ctids] : done) {
    const std::string tids = TidArray(ctids);
    WALRELAY_RETURN_IF_ERROR(Exec(conn_,
                                  "UPDATE " + QuoteQualifiedName(table) +
                                      " SET published_at = now() WHERE tableoid = $1::oid AND "
                                      "ctid = ANY($2::tid[])",
                                  "marking published rows", {table_oid.c_str(), tids.c_str()}));
  }
  WALRELAY_RETURN_IF_ERROR(Exec(conn_, "COMMIT", "COMMIT"));
  return static_cast<uint64_t>(n);
}

Result<PollBacklog> Poller::ReadBacklog() {
  PollBacklog backlog;
  const std::string shard = PollShardPredicate(config_.columns.aggregate_id, shard_);
  for (const std::string& table : config_.tables) {
    const std::string age =
        config_.columns.created_at.empty()
            ? std::string("0")
            : "coalesce(extract(epoch FROM now() - min(" +
                  QuoteIdentifier(config_.columns.created_at) + ")), 0)";
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgResultPtr r,
        slot::ExecPg(conn_,
                     "SELECT count(*), " + age + ", count(*) FILTER (WHERE retry_count > 0) FROM " +
                         QuoteQualifiedName(table) + " WHERE published_at IS NULL" +
                         (shard.empty() ? "" : " AND " + shard),
                     {}, "poll: reading the backlog of " + table));
    uint64_t rows = 0, retrying = 0;
    ParseNumber(std::string_view(PQgetvalue(r.get(), 0, 0)), &rows);
    ParseNumber(std::string_view(PQgetvalue(r.get(), 0, 2)), &retrying);
    const double age_s = std::strtod(PQgetvalue(r.get(), 0, 1), nullptr);
    backlog.rows += rows;
    backlog.retrying_rows += retrying;
    backlog.oldest_age_seconds = std::max(backlog.oldest_age_seconds, age_s);
  }
  return backlog;
}

}  // namespace walrelay::relay
