// DeadLetterWriter: the table in the source database that receives every event walrelay
// cannot publish (unmappable row, invalid envelope, record over Kafka's size limit), with
// the reason and the source position. Writing it is synchronous: an event counts as
// handled only once its dead-letter row is committed, so nothing vanishes.
//
// Replays after a restart write the same rows again; (slot, recovered, commit_lsn,
// ordinal) is unique and the insert is ON CONFLICT DO NOTHING, so each event has one row.
// `recovered` keeps the letters of lost-slot recovery (keyed by the new slot's consistent
// point and the row's place in the backfill) apart from streamed ones at the same LSN.
//
// Any bytes fit (invariant 7): the payload is stored exactly, as bytea; the text columns
// keep valid UTF-8 as is and write a NUL byte or a byte of an invalid UTF-8 sequence as the
// four characters \xNN. A failed write is therefore never the data's fault: it is
// kUnavailable (the session restarts, the event is not confirmed and is written again).
//
// Table (created when missing; a text payload column of an older walrelay is converted):
//   id bigint identity PK, dead_at timestamptz, slot text, source text, recovered boolean,
//   commit_lsn pg_lsn, ordinal int (position of the event in its transaction), xid bigint,
//   event_id text, aggregate_id text, event_type text, topic text, reason text,
//   payload bytea, UNIQUE (slot, recovered, commit_lsn, ordinal)
//
// Thread safety: not thread-safe; one per relay session.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/lsn.h"
#include "base/status.h"
#include "slot/pg_error.h"

namespace walrelay::relay {

struct DeadLetter {
  std::string_view source;  // "schema.table" or "message:<prefix>"
  bool recovered = false;   // written by lost-slot recovery (commit_lsn: the new slot's start)
  Lsn commit_lsn;           // the transaction's commit LSN (final_lsn of its Begin)
  uint32_t ordinal = 0;     // event position within the transaction, from 0
  uint32_t xid = 0;
  std::string_view event_id, aggregate_id, event_type, topic, payload;
  std::string_view reason;
};

struct OutboxEvent;  // outbox_mapper.h
struct HeaderNames;  // config.h
}  // namespace walrelay::relay
namespace walrelay::kafka {
class DeliveredRecord;  // producer.h
}  // namespace walrelay::kafka
namespace walrelay::relay {

// The letter's event fields (event id, key, event type, topic) from a mapped, or partly
// mapped, event; views into `event`, which must outlive the letter's use.
void SetEventFields(const OutboxEvent& event, DeadLetter* letter);
// The same fields and the payload from a record Kafka refused, read from its key, value
// and the headers named by `names`; views into `record`.
void SetRecordFields(const kafka::DeliveredRecord& record, const HeaderNames& names,
                     DeadLetter* letter);

// Where unpublishable events go. Write() returns once the letter is durable.
class DeadLetterSink {
 public:
  virtual ~DeadLetterSink() = default;
  virtual Status Write(const DeadLetter& letter) = 0;
  // A statement on the sink's connection, if it has one, so that it does not sit idle
  // through long work (idle_session_timeout, NAT idle cutoffs).
  virtual Status KeepAlive() { return Status::Ok(); }
};

// Counts and logs letters without storing them: for replaying recordings, where no source
// database is at hand.
class LoggingDeadLetterSink : public DeadLetterSink {
 public:
  Status Write(const DeadLetter& letter) override;
  uint64_t count() const { return count_; }

 private:
  uint64_t count_ = 0;
};

// `text` as valid UTF-8 without NUL: valid sequences kept, any other byte as \xNN.
std::string SanitizeText(std::string_view text);

class DeadLetterWriter : public DeadLetterSink {
 public:
  // Connects (normal connection, slot::kRelaySession) and creates the table only when it
  // is missing (a role with INSERT and SELECT on an existing table needs no CREATE on its
  // schema). `table` may be schema-qualified.
  static Result<std::unique_ptr<DeadLetterWriter>> Open(const slot::ConnInfo& conninfo,
                                                        const std::string& table,
                                                        const std::string& slot);
  DeadLetterWriter(const DeadLetterWriter&) = delete;
  DeadLetterWriter& operator=(const DeadLetterWriter&) = delete;

  // Inserts and commits one row (idempotent per slot/recovered/commit_lsn/ordinal). Any
  // failure is kUnavailable with the server's reason (the session restarts and writes it
  // again).
  Status Write(const DeadLetter& letter) override;
  Status KeepAlive() override;

 private:
  DeadLetterWriter(slot::PgConnPtr conn, std::string insert_sql, std::string slot);
  slot::PgConnPtr conn_;
  std::string insert_sql_;
  std::string slot_;
};

}  // namespace walrelay::relay
