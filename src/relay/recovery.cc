#include "src/relay/recovery.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <memory>

#include "slot/pg_error.h"
#include "src/relay/outbox_mapper.h"
#include "src/relay/position.h"
#include "src/relay/schema.h"

namespace walrelay::relay {
namespace {

Status Exec(PGconn* conn, const std::string& sql, std::string_view what) {
  return slot::ExecPg(conn, sql, {}, "recovery: " + std::string(what)).status();
}

std::string Column(const std::string& name) {
  return name.empty() ? "NULL::text" : QuoteIdentifier(name) + "::text";
}

}  // namespace

Result<BackfillResult> Backfill(const RelayConfig& config, const std::string& conninfo,
                                const std::string& snapshot, Lsn consistent_point,
                                const Progress& progress, RecordSink& sink,
                                DeadLetterSink& dead_letters, RelayStats& stats) {
  WALRELAY_ASSIGN_OR_RETURN(slot::PgConnPtr conn,
                            slot::ConnectPg(conninfo, nullptr, "recovery connection"));
  WALRELAY_RETURN_IF_ERROR(
      Exec(conn.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", "BEGIN"));
  WALRELAY_RETURN_IF_ERROR(Exec(conn.get(), "SET TRANSACTION SNAPSHOT " + QuoteLiteral(snapshot),
                                "importing the snapshot"));

  BackfillResult result;
  uint64_t pending = 0;
  Status failure;
  // The handler captures locals: unset it on every way out.
  struct Unset {
    RecordSink& sink;
    ~Unset() { sink.SetDeliveryHandler(nullptr); }
  } unset{sink};
  sink.SetDeliveryHandler([&](uint64_t, const Status& st, size_t, const kafka::DeliveredRecord*) {
    --pending;
    if (st.ok()) {
      stats.events_acked.fetch_add(1, std::memory_order_relaxed);
    } else if (failure.ok()) {
      failure = st.WithContext("recovery: delivery failed");
    }
  });

  OutboxMapper mapper(config);
  OutboxEvent event;
  std::vector<kafka::Header> headers;
  std::string position_text;
  uint32_t ordinal = 0;
  const auto& c = config.columns;
  const int64_t since_unix =
      progress.updated_at_unix -
      std::chrono::duration_cast<std::chrono::seconds>(config.recovery_lookback).count();

  for (const std::string& table : config.tables) {
    auto it = progress.last_id.find(table);
    const int64_t last_id = it == progress.last_id.end() ? 0 : it->second;
    std::string where = QuoteIdentifier(c.id) + " > " + std::to_string(last_id);
    if (!c.created_at.empty()) {
      where += " OR " + QuoteIdentifier(c.created_at) + " > to_timestamp(" +
               std::to_string(since_unix) + ")";
    }
    const std::string select = "DECLARE backfill NO SCROLL CURSOR FOR SELECT " + Column(c.id) +
                               ", " + Column(c.event_id) + ", " + Column(c.aggregate_type) + ", " +
                               Column(c.aggregate_id) + ", " + Column(c.topic) + ", " +
                               Column(c.event_type) + ", " + Column(c.payload) + ", " +
                               Column(c.headers) + " FROM " + QuoteQualifiedIdentifier(table) +
                               " WHERE " + where + " ORDER BY " + QuoteIdentifier(c.id);
    WALRELAY_RETURN_IF_ERROR(Exec(conn.get(), select, "reading " + table));
    spdlog::warn("recovery: republishing rows of {} with id > {}{}", table, last_id,
                 c.created_at.empty() ? "" : " or created in the lookback window");
    while (true) {
      WALRELAY_ASSIGN_OR_RETURN(
          slot::PgResultPtr rows,
          slot::ExecPg(conn.get(), "FETCH 1000 FROM backfill", {}, "recovery: reading " + table));
      const int n = PQntuples(rows.get());
      if (n == 0) break;
      for (int i = 0; i < n; ++i) {
        auto field = [&](int col) -> std::optional<std::string_view> {
          if (PQgetisnull(rows.get(), i, col)) return std::nullopt;
          return std::string_view(PQgetvalue(rows.get(), i, col), PQgetlength(rows.get(), i, col));
        };
        OutboxRow row{field(0), field(1), field(2), field(3),
                      field(4), field(5), field(6), field(7)};
        int64_t id = 0;
        if (row.id) std::from_chars(row.id->data(), row.id->data() + row.id->size(), id);
        result.max_id[table] = std::max(result.max_id[table], id);
        Status mapped = mapper.MapRow(table, row, &event);
        if (!mapped.ok()) {
          DeadLetter l;
          l.source = table;
          l.recovered = true;
          l.commit_lsn = consistent_point;
          l.ordinal = ordinal++;
          l.event_id = event.event_id;
          l.aggregate_id = event.key;
          l.event_type = event.event_type;
          l.topic = event.topic;
          l.payload = row.payload.value_or("");
          l.reason = mapped.message();
          WALRELAY_RETURN_IF_ERROR(dead_letters.Write(l));
          stats.events_dead_lettered.fetch_add(1, std::memory_order_relaxed);
          ++result.dead_lettered;
          continue;
        }
        headers.clear();
        headers.push_back({"event_id", event.event_id});
        headers.push_back({"event_type", event.event_type});
        if (!event.aggregate_type.empty())
          headers.push_back({"aggregate_type", event.aggregate_type});
        for (const auto& [name, value] : event.extra_headers) headers.push_back({name, value});
        SourcePosition position;
        position.lsn = consistent_point;
        position.ordinal = ordinal;
        position.recovered = true;
        position.source = table;
        FormatPosition(position, &position_text);
        headers.push_back({kPositionHeader, position_text});
        ++ordinal;
        while (pending >= static_cast<uint64_t>(config.max_in_flight_events)) {
          sink.Poll(std::chrono::milliseconds(10));
          if (!failure.ok()) return failure;
        }
        Status produced = sink.Produce(event.topic, event.key, event.value, headers, ordinal);
        if (produced.code() == StatusCode::kInvalidArgument) {  // can never be delivered
          DeadLetter l;
          l.source = table;
          l.recovered = true;
          l.commit_lsn = consistent_point;
          l.ordinal = ordinal - 1;
          l.event_id = event.event_id;
          l.aggregate_id = event.key;
          l.event_type = event.event_type;
          l.topic = event.topic;
          l.payload = event.value;
          l.reason = produced.message();
          WALRELAY_RETURN_IF_ERROR(dead_letters.Write(l));
          stats.events_dead_lettered.fetch_add(1, std::memory_order_relaxed);
          ++result.dead_lettered;
          continue;
        }
        WALRELAY_RETURN_IF_ERROR(produced);
        ++pending;
        ++result.published;
        stats.events_produced.fetch_add(1, std::memory_order_relaxed);
      }
      sink.Poll(std::chrono::milliseconds(0));
      if (!failure.ok()) return failure;
    }
    WALRELAY_RETURN_IF_ERROR(Exec(conn.get(), "CLOSE backfill", "closing the cursor"));
  }
  WALRELAY_RETURN_IF_ERROR(Exec(conn.get(), "COMMIT", "COMMIT"));
  WALRELAY_RETURN_IF_ERROR(sink.Flush(std::chrono::minutes(5)));
  if (!failure.ok()) return failure;
  if (pending != 0) return DeadlineExceededError("recovery: not every event was acked");
  return result;
}

}  // namespace walrelay::relay
