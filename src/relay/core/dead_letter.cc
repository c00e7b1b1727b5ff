#include "src/relay/core/dead_letter.h"

#include <spdlog/spdlog.h>

#include <array>
#include <vector>

#include "src/kafka/producer.h"
#include "src/relay/core/config.h"
#include "src/relay/core/outbox_mapper.h"
#include "src/relay/core/schema.h"

namespace walrelay::relay {

void SetEventFields(const OutboxEvent& event, DeadLetter* letter) {
  letter->event_id = event.event_id;
  letter->aggregate_id = event.key;
  letter->event_type = event.event_type;
  letter->topic = event.topic;
}

void SetRecordFields(const kafka::DeliveredRecord& record, const HeaderNames& names,
                     DeadLetter* letter) {
  letter->event_id = record.Header(names.event_id);
  letter->aggregate_id = record.key();
  letter->event_type = record.Header(names.event_type);
  letter->topic = record.topic();
  letter->payload = record.value();
}


namespace {

// Length of the valid UTF-8 sequence at the front of `s` (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF), or 0 when it is not one. NUL counts as invalid
// (PostgreSQL text cannot hold it).
size_t Utf8SequenceLength(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c == 0) return 0;
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  }
  return n;
}

constexpr char kHex[] = "0123456789abcdef";

}  // namespace

std::string SanitizeText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t n = Utf8SequenceLength(text);
    if (n > 0) {
      out.append(text.substr(0, n));
      text.remove_prefix(n);
      continue;
    }
    const auto c = static_cast<unsigned char>(text[0]);
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
    text.remove_prefix(1);
  }
  return out;
}

Status LoggingDeadLetterSink::Write(const DeadLetter& l) {
  ++count_;
  spdlog::warn("dead letter (not stored) {} of {} at {} #{}: {}", l.event_id, l.source,
               l.commit_lsn.ToString(), l.ordinal, l.reason);
  return Status::Ok();
}

Result<std::unique_ptr<DeadLetterWriter>> DeadLetterWriter::Open(const slot::ConnInfo& conninfo,
                                                                 const std::string& table,
                                                                 const std::string& slot) {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgConnPtr conn,
      slot::ConnectPg(conninfo, nullptr, "dead-letter connection", slot::kRelaySession));
  const std::string t = QuoteQualifiedName(table);
  WALRELAY_RETURN_IF_ERROR(slot::CreateTableIfMissing(conn.get(), t, DeadLetterTableDdl(t),
                                                      "creating dead-letter table " + table));
  WALRELAY_RETURN_IF_ERROR(slot::ExecPg(conn.get(), DeadLetterTableUpgradeSql(t), {},
                                        "upgrading dead-letter table " + table)
                               .status());
  std::string insert =
      "INSERT INTO " + t +
      " (slot, source, commit_lsn, ordinal, xid, event_id, aggregate_id, event_type, topic,"
      " reason, payload, recovered) VALUES ($1, $2, $3::pg_lsn, $4::int, $5::bigint, $6, $7,"
      " $8, $9, $10, decode($11, 'hex'), $12::boolean) ON CONFLICT (slot, recovered,"
      " commit_lsn, ordinal) DO NOTHING";
  return std::unique_ptr<DeadLetterWriter>(
      new DeadLetterWriter(std::move(conn), std::move(insert), slot));
}

DeadLetterWriter::DeadLetterWriter(slot::PgConnPtr conn, std::string insert_sql, std::string slot)
    : conn_(std::move(conn)), insert_sql_(std::move(insert_sql)), slot_(std::move(slot)) {}

Status DeadLetterWriter::KeepAlive() {
  return slot::ExecPg(conn_.get(), "SELECT 1", {}, "keeping the dead-letter connection alive")
      .status();
}

Status DeadLetterWriter::Write(const DeadLetter& l) {
  const std::string lsn = l.commit_lsn.ToString();
  const std::string ordinal = std::to_string(l.ordinal);
  const std::string xid = std::to_string(l.xid);
  // Text parameters must be NUL-terminated valid UTF-8: sanitized copies; the payload
  // travels as hex and is stored as its exact bytes.
  std::string payload_hex;
  payload_hex.reserve(l.payload.size() * 2);
  for (char ch : l.payload) {
    payload_hex += kHex[static_cast<unsigned char>(ch) >> 4];
    payload_hex += kHex[static_cast<unsigned char>(ch) & 15];
  }
  const std::array<std::string, 12> values = {SanitizeText(slot_),
                                              SanitizeText(l.source),
                                              lsn,
                                              ordinal,
                                              xid,
                                              SanitizeText(l.event_id),
                                              SanitizeText(l.aggregate_id),
                                              SanitizeText(l.event_type),
                                              SanitizeText(l.topic),
                                              SanitizeText(l.reason),
                                              std::move(payload_hex),
                                              l.recovered ? "true" : "false"};
  std::vector<const char*> params(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    // Empty optional fields are stored as NULL; slot, source, lsn, reason are never empty.
    params[i] = values[i].empty() ? nullptr : values[i].c_str();
  }
  // Any failure ends the session: the event is not confirmed and will be replayed. With
  // sanitized input no failure is the data's, so none is final (invariant 7).
  Status st = slot::ExecPg(conn_.get(), insert_sql_, params, "dead-letter write").status();
  if (st.ok() || st.code() == StatusCode::kUnavailable) return st;
  return UnavailableError(st.ToString() +
                          " (the event stays unconfirmed; the session restarts and writes it "
                          "again)");
}

}  // namespace walrelay::relay
