#include "src/relay/commands/redrive.h"

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <set>

#include "base/sql.h"
#include "slot/pg_error.h"
#include "src/relay/core/outbox_mapper.h"
#include "src/relay/core/pipeline.h"
#include "base/position.h"
#include "src/relay/core/record_builder.h"
#include "src/relay/recovery/backfill.h"
#include "src/relay/commands/republish.h"

namespace walrelay::relay {
namespace {

// redrive_outcome of a letter whose record was produced and whose outcome is unknown yet.
constexpr const char* kAttempted = "attempted";

std::optional<std::string> Text(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return std::nullopt;
  return std::string(PQgetvalue(r, row, col), PQgetlength(r, row, col));
}

// The WHERE clause of a selection.
std::string Where(const DeadLetterSelection& s) {
  std::string where = s.include_published ? "true" : "redrive_outcome IS DISTINCT FROM 'published'";
  if (!s.ids.empty()) {
    std::string list;
    for (int64_t id : s.ids) list += (list.empty() ? "" : ", ") + std::to_string(id);
    where += " AND id IN (" + list + ")";
  }
  if (!s.since.empty()) where += " AND dead_at >= " + QuoteLiteral(s.since) + "::timestamptz";
  return where;
}

Result<std::vector<DeadLetterInfo>> Select(PGconn* conn, const RelayConfig& config,
                                           const DeadLetterSelection& selection, int limit) {
  const std::string sql =
      "SELECT id, dead_at::text, slot, source, recovered, commit_lsn::text, ordinal, xid, "
      "event_id, aggregate_id, event_type, topic, payload, reason, redriven_at::text, "
      "redrive_outcome FROM " +
      QuoteQualifiedName(config.dead_letter_table) + " WHERE " + Where(selection) +
      " ORDER BY id" + (limit > 0 ? " LIMIT " + std::to_string(limit) : std::string());
  WALRELAY_ASSIGN_OR_RETURN(slot::PgResultPtr r,
                            slot::ExecPg(conn, sql, {}, "reading the dead letters"));
  std::vector<DeadLetterInfo> out;
  const PGresult* res = r.get();
  for (int i = 0; i < PQntuples(res); ++i) {
    DeadLetterInfo l;
    l.id = std::stoll(PQgetvalue(res, i, 0));
    l.dead_at = PQgetvalue(res, i, 1);
    l.slot = PQgetvalue(res, i, 2);
    l.source = PQgetvalue(res, i, 3);
    l.recovered = std::string_view(PQgetvalue(res, i, 4)) == "t";
    l.commit_lsn = PQgetvalue(res, i, 5);
    l.ordinal = std::stoi(PQgetvalue(res, i, 6));
    l.xid = PQgetisnull(res, i, 7) ? 0 : std::stoll(PQgetvalue(res, i, 7));
    l.event_id = Text(res, i, 8);
    l.aggregate_id = Text(res, i, 9);
    l.event_type = Text(res, i, 10);
    l.topic = Text(res, i, 11);
    if (auto hex = Text(res, i, 12)) {  // bytea in hex text form
      std::string bytes;
      if (DecodeByteaText(*hex, &bytes).ok()) l.payload = std::move(bytes);
    }
    l.reason = PQgetvalue(res, i, 13);
    l.redriven_at = Text(res, i, 14);
    l.redrive_outcome = Text(res, i, 15);
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace

Result<std::vector<DeadLetterInfo>> ListDeadLetters(const RelayConfig& config,
                                                    const DeadLetterSelection& selection) {
  WALRELAY_ASSIGN_OR_RETURN(slot::PgConnPtr conn,
                            slot::ConnectPg(config.SourceConninfo(), nullptr, "dead letters"));
  return Select(conn.get(), config, selection, selection.limit);
}

Result<RedriveResult> RedriveDeadLetters(const RelayConfig& config,
                                         const DeadLetterSelection& selection) {
  if (config.embedded_kafka) {
    return InvalidArgumentError(
        "dead-letters retry: --kafka-embedded true would publish into a cluster that vanishes "
        "with this process; give --kafka-bootstrap-servers");
  }
  const slot::ConnInfo conninfo = config.SourceConninfo();
  WALRELAY_ASSIGN_OR_RETURN(slot::PgConnPtr conn,
                            slot::ConnectPg(conninfo, nullptr, "dead-letter re-drive"));
  DeadLetterSelection pending = selection;
  pending.include_published = false;
  WALRELAY_ASSIGN_OR_RETURN(std::vector<DeadLetterInfo> selected,
                            Select(conn.get(), config, pending, /*limit=*/0));
  RedriveResult result;
  std::vector<DeadLetterInfo> letters;
  std::set<int64_t> attempted_before;
  for (DeadLetterInfo& l : selected) {
    if (l.redrive_outcome == std::optional<std::string>(kAttempted)) {
      if (!selection.include_attempted) {
        result.skipped_attempted.push_back(l.id);
        spdlog::warn(
            "dead letter {}: skipped: an earlier re-drive (at {}) produced it but never "
            "recorded the outcome (a crash or a refused UPDATE in between), so it may be in "
            "Kafka already. Check the topic for event {}; to publish it again knowingly (a "
            "consumer may see it twice, with the same event id) retry with "
            "--include-attempted",
            l.id, l.redriven_at.value_or("?"), l.event_id.value_or("-"));
        continue;
      }
      attempted_before.insert(l.id);
    }
    letters.push_back(std::move(l));
  }
  WALRELAY_ASSIGN_OR_RETURN(std::unique_ptr<KafkaSink> sink, StandaloneKafkaSink(config));

  // Outcome per letter id: "" while in flight, "published", or the failure reason.
  std::map<int64_t, std::string> outcome;
  ScopedDeliveryHandler handler(*sink, [&](uint64_t cookie, const Status& st, size_t,
                                           const kafka::DeliveredRecord*) {
    outcome[static_cast<int64_t>(cookie)] =
        st.ok() ? "published" : "Kafka refused the re-driven record: " + st.message();
  });
  OutboxMapper mapper(config);
  OutboxEvent event;
  RecordBuilder record(config);
  std::map<std::string, bool> bytea_tables;
  const std::string mark_attempted = "UPDATE " + QuoteQualifiedName(config.dead_letter_table) +
                                     " SET redriven_at = now(), redrive_outcome = '" +
                                     std::string(kAttempted) + "' WHERE id = $1::bigint";
  Status stopped;  // the first error that ended the loop; outcomes so far are still recorded
  for (const DeadLetterInfo& l : letters) {
    // The row, when it is a configured outbox table's and still there.
    Status mapped = InvalidArgumentError("not mapped");
    slot::PgResultPtr row;  // keeps the row's text alive while `event` views it
    const bool from_table = !l.source.starts_with("message:") && l.event_id.has_value() &&
                            !config.columns.event_id.empty();
    if (from_table) {
      const size_t dot = l.source.find('.');
      const std::string table = dot == std::string::npos
                                    ? QuoteIdentifier(l.source)
                                    : QuoteIdentifier(l.source.substr(0, dot)) + "." +
                                          QuoteIdentifier(l.source.substr(dot + 1));
      auto found = slot::ExecPg(conn.get(),
                                "SELECT " + OutboxRowSelectList(config.columns) + " FROM " +
                                    table + " WHERE " + QuoteIdentifier(config.columns.event_id) +
                                    "::text = $1 LIMIT 1",
                                {l.event_id->c_str()}, "re-drive: reading the row of " + l.source);
      if (found.ok() && PQntuples(found->get()) == 1) {
        if (!bytea_tables.count(table)) {
          auto is_bytea = PayloadIsBytea(conn.get(), table, config.columns);
          bytea_tables[table] = is_bytea.ok() && *is_bytea;
        }
        row = std::move(*found);
        mapped = mapper.MapRow(l.source, OutboxRowAt(row.get(), 0, bytea_tables[table]), &event);
      }
    }
    if (!row) {
      OutboxRow fields;
      fields.event_id = l.event_id;
      fields.aggregate_id = l.aggregate_id;
      fields.event_type = l.event_type;
      fields.topic = l.topic;
      fields.payload = l.payload;
      mapped = mapper.MapRow(l.source, fields, &event);
    }
    if (mapped.ok()) {
      Status topic = sink->CheckTopic(event.topic, std::chrono::seconds(5));
      if (topic.code() == StatusCode::kNotFound || topic.code() == StatusCode::kPermissionDenied) {
        mapped = InvalidArgumentError(topic.message());
      }
    }
    if (!mapped.ok()) {
      outcome[l.id] = mapped.message();
      continue;
    }
    SourcePosition position;
    position.lsn = Lsn::Parse(l.commit_lsn).value_or(Lsn());
    position.ordinal = static_cast<uint32_t>(l.ordinal);
    position.xid = static_cast<uint32_t>(l.xid);
    position.recovered = l.recovered;
    position.source = l.source;
    record.Build(event, position);
    // The attempt, recorded before the record can reach Kafka: whatever happens after
    // this, the next retry will not publish it again without saying so.
    const std::string id_text = std::to_string(l.id);
    Status marked = slot::ExecPg(conn.get(), mark_attempted, {id_text.c_str()},
                                 "re-drive: recording the attempt on letter " + id_text +
                                     " before publishing it (nothing of it was published)")
                        .status();
    if (!marked.ok()) {
      stopped = marked;
      break;
    }
    outcome[l.id] = "";
    Status produced = sink->Produce(event.topic, event.key, record.value(), record.headers(),
                                    static_cast<uint64_t>(l.id), /*timestamp_ms=*/0);
    if (!produced.ok()) outcome[l.id] = "Kafka refused the re-driven record: " + produced.message();
  }
  WALRELAY_RETURN_IF_ERROR(sink->Flush(std::chrono::seconds(60)));

  const std::string update =
      "UPDATE " + QuoteQualifiedName(config.dead_letter_table) +
      " SET redriven_at = now(), redrive_outcome = CASE WHEN $2 = 'published' THEN 'published' "
      "ELSE 'failed' END, reason = CASE WHEN $2 = 'published' THEN reason ELSE $2 END "
      "WHERE id = $1::bigint";
  for (const auto& [id, what] : outcome) {
    if (what.empty()) continue;  // no report (cannot happen after Flush): left as it was
    const std::string id_text = std::to_string(id);
    WALRELAY_RETURN_IF_ERROR(slot::ExecPg(conn.get(), update, {id_text.c_str(), what.c_str()},
                                          "re-drive: recording the outcome of letter " + id_text)
                                 .status());
    if (what == "published") {
      ++result.published;
      if (attempted_before.contains(id)) {
        ++result.published_again;
        spdlog::warn("dead letter {}: published again after an earlier attempt whose outcome "
                     "was unknown: a consumer may see it twice (same event id)",
                     id);
      }
    } else {
      ++result.failed;
      spdlog::warn("dead letter {}: re-drive failed: {}", id, what);
    }
  }
  if (!stopped.ok()) {
    return Status(stopped.code(),
                  stopped.message() + " (" + std::to_string(result.published) +
                      " letters published and recorded before it; the rest untouched: retry "
                      "once this is fixed)");
  }
  return result;
}

}  // namespace walrelay::relay
