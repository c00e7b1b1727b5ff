// Dead letters: the inbox_dead_letter row (key and value as bytea, headers as jsonb in
// which any bytes fit) and the dead-letter topic record, in one database transaction.
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "base/headers.h"
#include "base/json.h"
#include "src/inbox/impl.h"
#include "src/inbox/pg.h"

namespace walrelay::inbox {

using namespace std::chrono_literals;

namespace {

// Text that PostgreSQL's jsonb holds as a string: UTF-8 without NUL (jsonb refuses NUL).
bool FitsJsonbString(std::string_view s) {
  return s.find('\0') == std::string_view::npos && simdjson::validate_utf8(s.data(), s.size());
}

std::string Hex(std::string_view s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out += kDigits[c >> 4];
    out += kDigits[c & 0xf];
  }
  return out;
}

// The headers as a jsonb object. A value that is UTF-8 without NUL is a JSON string; any
// other value (binary: a Java client's retry counter, ...) is {"hex": "<bytes in hex>"}, so
// that every byte fits. A name that does not fit is "hex:<name in hex>".
std::string HeadersJson(const std::vector<std::pair<std::string_view, std::string_view>>& h) {
  std::string out = "{";
  for (size_t i = 0; i < h.size(); ++i) {
    if (i > 0) out += ',';
    const auto& [name, value] = h[i];
    AppendJsonQuoted(&out, FitsJsonbString(name) ? std::string(name) : "hex:" + Hex(name));
    out += ':';
    if (FitsJsonbString(value)) {
      AppendJsonQuoted(&out, value);
    } else {
      out += R"({"hex":")" + Hex(value) + R"("})";
    }
  }
  out += '}';
  return out;
}

}  // namespace

Result<Outcome> InboxConsumer::Impl::DeadLetterOnce(const InboxMessage& msg,
                                                    const std::string& reason,
                                                    const std::atomic<bool>& stop, Next* next) {
  Attempt a(pool_, next);
  WALRELAY_RETURN_IF_ERROR(a.Begin(stop));
  const std::string partition = std::to_string(msg.partition);
  const std::string offset = std::to_string(msg.offset);
  if (!msg.event_id.empty()) {
    // The inbox row records the decision, so a redelivery is a duplicate, not a second
    // dead letter.
    const pg::RawParam params[] = {{opt_.consumer_name}, {msg.event_id}};
    WALRELAY_ASSIGN_OR_RETURN(pg::ResultPtr ins, a.Exec(kInsertInbox, params, "inbox: insert"));
    if (std::strcmp(PQcmdTuples(ins.get()), "0") == 0) {
      WALRELAY_RETURN_IF_ERROR(a.Commit());
      return Outcome::kDuplicate;
    }
  } else {
    // No usable event id: the dead-letter row itself records the decision. Processes
    // racing on the same record serialise on an advisory lock of its source position;
    // the same position with the same key and value is this message again.
    const std::string lock_key =
        opt_.consumer_name + "/" + std::string(msg.topic) + "/" + partition + "/" + offset;
    const pg::RawParam lock_params[] = {{lock_key}};
    WALRELAY_RETURN_IF_ERROR(a.Exec("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                                    lock_params, "inbox: lock dead-letter position")
                                 .status());
    const pg::RawParam find_params[] = {{opt_.consumer_name}, {msg.topic},
                                        {partition},          {offset},
                                        {msg.key, true},      {msg.value, true}};
    WALRELAY_ASSIGN_OR_RETURN(
        pg::ResultPtr found,
        a.Exec("SELECT 1 FROM inbox_dead_letter WHERE consumer = $1 AND topic = $2 AND "
               "\"partition\" = $3 AND \"offset\" = $4 AND key IS NOT DISTINCT FROM $5 AND "
               "value IS NOT DISTINCT FROM $6 LIMIT 1",
               find_params, "inbox: find dead letter"));
    if (PQntuples(found.get()) > 0) {
      WALRELAY_RETURN_IF_ERROR(a.Commit());
      return Outcome::kDuplicate;
    }
  }
  const std::string headers = HeadersJson(msg.headers);
  const pg::RawParam params[] = {
      {opt_.consumer_name},
      {msg.event_id.empty() ? std::nullopt : std::optional<std::string_view>(msg.event_id)},
      {msg.topic},
      {partition},
      {offset},
      {msg.key, true},
      {msg.value, true},
      {headers},
      {reason},
  };
  WALRELAY_RETURN_IF_ERROR(
      a.Exec("INSERT INTO inbox_dead_letter (consumer, message_id, topic, \"partition\", "
             "\"offset\", key, value, headers, reason) VALUES ($1, $2, $3, $4, $5, $6, $7, "
             "$8::jsonb, $9)",
             params, "inbox: insert dead letter")
          .status());
  // The topic record is acked before the row commits: a failure in between repeats the
  // topic record (at least once), never loses both.
  if (Status st = ProduceDeadLetter(msg, reason); !st.ok()) {
    return a.Fail(st, slot::PgFault::kTransient);
  }
  WALRELAY_RETURN_IF_ERROR(a.Commit());
  AfterCommit(1);
  spdlog::warn("inbox: dead-lettered {} [{}] @{} to {}: {}", msg.topic, msg.partition, msg.offset,
               opt_.dead_letter_topic, reason);
  return Outcome::kDeadLettered;
}

Status InboxConsumer::Impl::ProduceDeadLetter(const InboxMessage& msg, const std::string& reason) {
  std::lock_guard lock(dlq_mu_);
  const std::string partition = std::to_string(msg.partition);
  const std::string offset = std::to_string(msg.offset);
  std::vector<kafka::Header> out;
  for (const auto& [n, v] : msg.headers) out.push_back({n, v});
  out.push_back({headers::kDlqReason, reason});
  out.push_back({headers::kDlqConsumer, opt_.consumer_name});
  out.push_back({headers::kDlqSourceTopic, msg.topic});
  out.push_back({headers::kDlqSourcePartition, partition});
  out.push_back({headers::kDlqSourceOffset, offset});
  dlq_result_ = UnavailableError("dead letter not acknowledged");
  Status st = dlq_->Produce(opt_.dead_letter_topic, msg.key, msg.value, out, 0);
  if (st.ok()) st = dlq_->Flush(opt_.dead_letter_timeout + 5s);
  if (st.ok()) st = dlq_result_;
  if (!st.ok()) {
    // Whatever the producer says, retrying is the only way that loses nothing.
    return UnavailableError("dead-letter topic " + opt_.dead_letter_topic + ": " + st.ToString());
  }
  return Status::Ok();
}

}  // namespace walrelay::inbox
