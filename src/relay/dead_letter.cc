#include "src/relay/dead_letter.h"

#include <spdlog/spdlog.h>

#include <array>
#include <vector>

#include "src/relay/schema.h"

namespace walrelay::relay {
Status LoggingDeadLetterSink::Write(const DeadLetter& l) {
  ++count_;
  spdlog::warn("dead letter (not stored) {} of {} at {} #{}: {}", l.event_id, l.source,
               l.commit_lsn.ToString(), l.ordinal, l.reason);
  return Status::Ok();
}

Result<std::unique_ptr<DeadLetterWriter>> DeadLetterWriter::Open(const std::string& conninfo,
                                                                 const std::string& table,
                                                                 const std::string& slot) {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgConnPtr conn,
      slot::ConnectPg(conninfo, nullptr, "dead-letter connection", slot::kRelaySession));
  const std::string t = QuoteQualifiedName(table);
  WALRELAY_RETURN_IF_ERROR(slot::CreateTableIfMissing(conn.get(), t, DeadLetterTableDdl(t),
                                                      "creating dead-letter table " + table));
  std::string insert =
      "INSERT INTO " + t +
      " (slot, source, commit_lsn, ordinal, xid, event_id, aggregate_id, event_type, topic,"
      " reason, payload, recovered) VALUES ($1, $2, $3::pg_lsn, $4::int, $5::bigint, $6, $7,"
      " $8, $9, $10, $11, $12::boolean) ON CONFLICT (slot, recovered, commit_lsn, ordinal) DO"
      " NOTHING";
  return std::unique_ptr<DeadLetterWriter>(
      new DeadLetterWriter(std::move(conn), std::move(insert), slot));
}

DeadLetterWriter::DeadLetterWriter(slot::PgConnPtr conn, std::string insert_sql, std::string slot)
    : conn_(std::move(conn)), insert_sql_(std::move(insert_sql)), slot_(std::move(slot)) {}

Status DeadLetterWriter::Write(const DeadLetter& l) {
  const std::string lsn = l.commit_lsn.ToString();
  const std::string ordinal = std::to_string(l.ordinal);
  const std::string xid = std::to_string(l.xid);
  // Text parameters must be NUL-terminated: copy the views.
  const std::array<std::string, 12> values = {slot_,
                                              std::string(l.source),
                                              lsn,
                                              ordinal,
                                              xid,
                                              std::string(l.event_id),
                                              std::string(l.aggregate_id),
                                              std::string(l.event_type),
                                              std::string(l.topic),
                                              std::string(l.reason),
                                              std::string(l.payload),
                                              l.recovered ? "true" : "false"};
  std::vector<const char*> params(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    // Empty optional fields are stored as NULL; slot, source, lsn, reason are never empty.
    params[i] = values[i].empty() ? nullptr : values[i].c_str();
  }
  // Any failure ends the session: the event is not confirmed and will be replayed.
  return slot::ExecPg(conn_.get(), insert_sql_, params, "dead-letter write").status();
}

}  // namespace walrelay::relay
