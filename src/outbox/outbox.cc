#include "src/outbox/outbox.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "slot/pg_error.h"
#include "src/relay/core/schema.h"

namespace walrelay::outbox {
namespace {

constexpr uint64_t kMaxTimestampMs = (uint64_t{1} << 48) - 1;

// ---- process-wide generator

std::mutex g_mu;
UuidV7Generator* g_generator = nullptr;  // leaked on purpose: usable during static destruction

// fork(): hold the mutex across it so the child never inherits it locked by a thread that
// does not exist there, and give the child a fresh state (no shared random bytes).
void BeforeFork() { g_mu.lock(); }
void AfterForkInParent() { g_mu.unlock(); }
void AfterForkInChild() {
  g_generator->Reset();
  g_mu.unlock();
}

UuidV7Generator& Generator() {
  static UuidV7Generator* generator = [] {
    g_generator = new UuidV7Generator();
    pthread_atfork(&BeforeFork, &AfterForkInParent, &AfterForkInChild);
    return g_generator;
  }();
  return *generator;
}

uint64_t NowUnixMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// ---- libpq helpers

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// slot/pg_error.h's SQLSTATE table, in the terms of this helper's contract (outbox.h):
// the writer's values -> kInvalidArgument, the connection or server right now ->
// kUnavailable, an aborted transaction or other server state -> kFailedPrecondition, a
// missing privilege -> kPermissionDenied, the SQL or schema -> kInternal.
Status MapError(PGconn* conn, const PGresult* res, std::string_view context) {
  const slot::PgFailure f = slot::FailureFromResult(conn, res, context);
  const std::string& text = f.status.message();
  switch (f.fault) {
    case slot::PgFault::kTransient:
      return UnavailableError(text);
    case slot::PgFault::kData:
      return InvalidArgumentError(text);
    case slot::PgFault::kServerState:
      return FailedPreconditionError(text);
    case slot::PgFault::kStatement:
      break;
  }
  if (f.status.code() == StatusCode::kPermissionDenied) return f.status;
  return InternalError(text);
}

Status CheckTransaction(PGconn* conn) {
  if (conn == nullptr) return InvalidArgumentError("outbox: null PGconn");
  switch (PQtransactionStatus(conn)) {
    case PQTRANS_INTRANS:
      return Status::Ok();
    case PQTRANS_IDLE:
      return FailedPreconditionError(
          "outbox: the connection is not inside a transaction: run BEGIN first (an event "
          "written in autocommit is not atomic with the business write)");
    case PQTRANS_INERROR:
      return FailedPreconditionError(
          "outbox: the transaction is aborted by an earlier error: roll it back");
    case PQTRANS_ACTIVE:
      return FailedPreconditionError("outbox: a command is in progress on the connection");
    case PQTRANS_UNKNOWN:
    default:
      return UnavailableError(std::string("outbox: connection is bad: ") + PQerrorMessage(conn));
  }
}

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

Result<ResultPtr> ExecResult(PGconn* conn, const std::string& sql,
                             const std::vector<const char*>& values, std::string_view context) {
  ResultPtr res(PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                             values.data(), nullptr, nullptr, 0));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return res;
  return MapError(conn, res.get(), context);
}

Status Exec(PGconn* conn, const std::string& sql, const std::vector<const char*>& values,
            std::string_view context) {
  return ExecResult(conn, sql, values, context).status();
}

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The event's headers, with its trace context (checked by Check) added.
std::string HeadersJson(const OutboxEvent& event) {
  std::map<std::string, std::string> headers = event.headers;
  if (event.trace) {
    headers[std::string(headers::kTraceparent)] = event.trace->traceparent;
    if (!event.trace->tracestate.empty()) {
      headers[std::string(headers::kTracestate)] = event.trace->tracestate;
    }
  }
  std::string out = "{";
  for (const auto& [name, value] : headers) {
    if (out.size() > 1) out += ',';
    out += JsonQuote(name);
    out += ':';
    out += JsonQuote(value);
  }
  out += '}';
  return out;
}

}  // namespace

// ------------------------------------------------------------------------------ UUIDv7

void UuidV7Generator::FillRandom(uint8_t* out, size_t n) {
  while (n > 0) {
    if (pool_pos_ == pool_.size()) {
      size_t got = 0;
      while (got < pool_.size()) {
        ssize_t r = getrandom(pool_.data() + got, pool_.size() - got, 0);
        if (r < 0) {
          if (errno == EINTR) continue;
          // No CSPRNG: ids could collide, which would silently merge events downstream.
          std::fprintf(stderr, "walrelay outbox: getrandom failed: %s\n", std::strerror(errno));
          std::abort();
        }
        got += static_cast<size_t>(r);
      }
      pool_pos_ = 0;
    }
    const size_t take = std::min(n, pool_.size() - pool_pos_);
    std::memcpy(out, pool_.data() + pool_pos_, take);
    // Bytes handed out are wiped from the pool so they can never be handed out twice.
    std::memset(pool_.data() + pool_pos_, 0, take);
    pool_pos_ += take;
    out += take;
    n -= take;
  }
}

void UuidV7Generator::Reset() {
  have_last_ = false;
  last_ms_ = last_rand_hi_ = last_rand_lo_ = 0;
  pool_.fill(0);
  pool_pos_ = pool_.size();
}

UuidBytes UuidV7Generator::Next(uint64_t unix_ms) {
  if (unix_ms > kMaxTimestampMs) unix_ms = kMaxTimestampMs;
  auto draw_fresh = [this](uint64_t ms) {
    uint8_t r[10];
    FillRandom(r, sizeof r);
    last_ms_ = ms;
    last_rand_hi_ = ((uint64_t{r[0]} << 8) | r[1]) & 0x3ff;
    uint64_t lo = 0;
    for (int i = 2; i < 10; ++i) lo = (lo << 8) | r[i];
    last_rand_lo_ = lo;
    have_last_ = true;
  };
  if (!have_last_ || unix_ms > last_ms_) {
    draw_fresh(unix_ms);
  } else {
    // Same or earlier millisecond: keep the previous timestamp, add a random increment
    // in [1, 2^32] to the 74-bit counter.
    uint8_t r[4];
    FillRandom(r, sizeof r);
    const uint64_t inc =
        ((uint64_t{r[0]} << 24) | (uint64_t{r[1]} << 16) | (uint64_t{r[2]} << 8) | r[3]) + 1;
    const uint64_t lo = last_rand_lo_ + inc;
    uint64_t hi = last_rand_hi_ + (lo < last_rand_lo_ ? 1 : 0);
    if (hi > 0x3ff) {
      // Counter overflow: move to the next millisecond (the clamp at the 48-bit maximum,
      // year 10889, is not a practical concern).
      draw_fresh(last_ms_ < kMaxTimestampMs ? last_ms_ + 1 : last_ms_);
    } else {
      last_rand_lo_ = lo;
      last_rand_hi_ = hi;
    }
  }
  UuidBytes b{};
  for (int i = 0; i < 6; ++i) b[i] = static_cast<uint8_t>(last_ms_ >> (8 * (5 - i)));
  // 74-bit counter C = hi(10) : lo(64); rand_a = C >> 62 (12 bits), rand_b = C & (2^62-1).
  const uint64_t rand_a = (last_rand_hi_ << 2) | (last_rand_lo_ >> 62);
  const uint64_t rand_b = last_rand_lo_ & ((uint64_t{1} << 62) - 1);
  b[6] = static_cast<uint8_t>(0x70 | ((rand_a >> 8) & 0x0f));
  b[7] = static_cast<uint8_t>(rand_a & 0xff);
  b[8] = static_cast<uint8_t>(0x80 | ((rand_b >> 56) & 0x3f));
  for (int i = 9; i < 16; ++i) b[i] = static_cast<uint8_t>(rand_b >> (8 * (15 - i)));
  return b;
}

std::string FormatUuid(const UuidBytes& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += kHex[bytes[i] >> 4];
    s += kHex[bytes[i] & 0x0f];
  }
  return s;
}

UuidBytes NewUuidV7Bytes() {
  UuidV7Generator& gen = Generator();
  std::lock_guard<std::mutex> lock(g_mu);
  return gen.Next(NowUnixMs());
}

std::string NewUuidV7() { return FormatUuid(NewUuidV7Bytes()); }

// ------------------------------------------------------------------------------ JSON

// ------------------------------------------------------------------------------ writer

OutboxWriter::OutboxWriter(OutboxTarget target) : target_(std::move(target)) {
  const relay::OutboxColumns& c = target_.columns;
  std::vector<std::string> cols = {c.event_id};
  if (!c.aggregate_type.empty()) cols.push_back(c.aggregate_type);
  cols.push_back(c.aggregate_id);
  if (!c.topic.empty()) cols.push_back(c.topic);
  cols.push_back(c.event_type);
  cols.push_back(c.payload);
  if (!c.headers.empty()) cols.push_back(c.headers);
  std::string names, params;
  for (size_t i = 0; i < cols.size(); ++i) {
    if (i > 0) {
      names += ", ";
      params += ", ";
    }
    names += QuoteIdentifier(cols[i]);
    // Untyped parameters: PostgreSQL coerces them to the column's type (uuid, jsonb, ...),
    // so remapped columns of other types (text event_id, json payload) work too.
    params += "$" + std::to_string(i + 1);
  }
  insert_sql_ = "INSERT INTO " + QuoteQualifiedName(target_.table) + " (" + names +
                ") VALUES (" + params + ")";
  if (target_.delete_in_same_transaction) {
    // The row's physical address, stable within the inserting transaction (no one else
    // sees the row before it commits): the DELETE needs no index.
    // With the tableoid: in a partitioned outbox every partition has a row at (0,1).
    insert_sql_ += " RETURNING tableoid, ctid";
    delete_sql_ = "DELETE FROM " + QuoteQualifiedName(target_.table) +
                  " WHERE tableoid = $1::oid AND ctid = $2::tid";
  }
}

Status CheckTraceContext(const TraceContext& trace) {
  const std::string_view tp = trace.traceparent;
  auto refuse = [&](std::string_view why) {
    return InvalidArgumentError("outbox: traceparent \"" + std::string(tp.substr(0, 80)) +
                                "\" is not a W3C traceparent: " + std::string(why));
  };
  // version "-" trace-id "-" parent-id "-" flags, and for versions after 00 maybe more.
  if (tp.size() < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-') {
    return refuse("want 00-<32 hex>-<16 hex>-<2 hex>");
  }
  const std::string_view version = tp.substr(0, 2), trace_id = tp.substr(3, 32),
                         parent_id = tp.substr(36, 16), flags = tp.substr(53, 2);
  if (!IsLowerHex(version) || !IsLowerHex(trace_id) || !IsLowerHex(parent_id) ||
      !IsLowerHex(flags)) {
    return refuse("fields must be lower-case hex");
  }
  if (version == "ff") return refuse("version ff is invalid");
  if (version == "00" && tp.size() != 55) return refuse("version 00 is exactly 55 characters");
  if (version != "00" && tp.size() > 55 && tp[55] != '-') return refuse("bad field after flags");
  if (trace_id == std::string(32, '0')) return refuse("the trace id is all zeros");
  if (parent_id == std::string(16, '0')) return refuse("the parent id is all zeros");
  if (trace.tracestate.size() > 512) {
    return InvalidArgumentError("outbox: tracestate is longer than 512 characters");
  }
  for (unsigned char c : trace.tracestate) {
    if (c < 0x20 || c > 0x7e) {
      return InvalidArgumentError("outbox: tracestate has a character outside printable ASCII");
    }
  }
  return Status::Ok();
}

Status OutboxWriter::Check(PGconn* conn, const OutboxEvent& event, bool table_path) const {
  WALRELAY_RETURN_IF_ERROR(CheckTransaction(conn));
  if (event.aggregate_id.empty()) return InvalidArgumentError("outbox: aggregate_id is empty");
  if (event.event_type.empty()) return InvalidArgumentError("outbox: event_type is empty");
  if (event.payload.empty()) return InvalidArgumentError("outbox: payload is empty (need JSON)");
  bool nul = HasNul(event.event_id) || HasNul(event.aggregate_type) || HasNul(event.aggregate_id) ||
             HasNul(event.event_type) || HasNul(event.payload) ||
             (event.topic && HasNul(*event.topic));
  for (const auto& [k, v] : event.headers) nul = nul || HasNul(k) || HasNul(v);
  if (nul) return InvalidArgumentError("outbox: a field contains a NUL byte");
  if (event.trace) {
    WALRELAY_RETURN_IF_ERROR(CheckTraceContext(*event.trace));
    for (const auto& [k, v] : event.headers) {
      if (headers::SameNameIgnoringCase(k, headers::kTraceparent) ||
          headers::SameNameIgnoringCase(k, headers::kTracestate)) {
        return InvalidArgumentError("outbox: header " + k +
                                    " is set and so is the event's trace context: set one");
      }
    }
  }
  if (table_path) {
    const relay::OutboxColumns& c = target_.columns;
    if (c.event_id.empty() || c.aggregate_id.empty() || c.event_type.empty() || c.payload.empty()) {
      return InvalidArgumentError(
          "outbox: event_id, aggregate_id, event_type and payload columns cannot be absent");
    }
    if (c.aggregate_type.empty() && !event.aggregate_type.empty()) {
      return InvalidArgumentError("outbox: aggregate_type set but the table has no such column");
    }
    if (c.topic.empty() && event.topic) {
      return InvalidArgumentError("outbox: topic set but the table has no topic column");
    }
    if (c.headers.empty() && (!event.headers.empty() || event.trace)) {
      return InvalidArgumentError(
          "outbox: headers or a trace context set but the table has no headers column");
    }
  }
  return Status::Ok();
}

Status OutboxWriter::Append(PGconn* conn, const OutboxEvent& event,
                            std::string* event_id_out) const {
  WALRELAY_RETURN_IF_ERROR(Check(conn, event, /*table_path=*/true));
  const std::string id = event.event_id.empty() ? NewUuidV7() : event.event_id;
  const std::string headers = HeadersJson(event);
  const bool no_headers = event.headers.empty() && !event.trace;
  const relay::OutboxColumns& c = target_.columns;
  std::vector<const char*> values = {id.c_str()};
  if (!c.aggregate_type.empty()) {
    values.push_back(event.aggregate_type.empty() ? nullptr : event.aggregate_type.c_str());
  }
  values.push_back(event.aggregate_id.c_str());
  if (!c.topic.empty()) values.push_back(event.topic ? event.topic->c_str() : nullptr);
  values.push_back(event.event_type.c_str());
  values.push_back(event.payload.c_str());
  if (!c.headers.empty()) values.push_back(no_headers ? nullptr : headers.c_str());
  WALRELAY_ASSIGN_OR_RETURN(
      ResultPtr inserted,
      ExecResult(conn, insert_sql_, values, "outbox: insert into " + target_.table));
  if (target_.delete_in_same_transaction) {
    // The INSERT is in the WAL (the relay publishes it); the row leaves with the commit.
    if (PQntuples(inserted.get()) != 1) {
      return InternalError("outbox: INSERT ... RETURNING returned no row");
    }
    WALRELAY_ASSIGN_OR_RETURN(
        ResultPtr deleted,
        ExecResult(conn, delete_sql_,
                   {PQgetvalue(inserted.get(), 0, 0), PQgetvalue(inserted.get(), 0, 1)},
                   "outbox: delete from " + target_.table));
    if (std::string_view(PQcmdTuples(deleted.get())) != "1") {
      return InternalError("outbox: the DELETE of the row just inserted deleted " +
                           std::string(PQcmdTuples(deleted.get())) +
                           " rows (a trigger or rule on " + target_.table + "?)");
    }
  }
  if (event_id_out != nullptr) *event_id_out = id;
  return Status::Ok();
}

Status OutboxWriter::AppendMessage(PGconn* conn, const OutboxEvent& event,
                                   std::string* event_id_out) const {
  WALRELAY_RETURN_IF_ERROR(Check(conn, event, /*table_path=*/false));
  const std::string id = event.event_id.empty() ? NewUuidV7() : event.event_id;
  const std::string headers = HeadersJson(event);
  // The envelope is built by PostgreSQL from separate parameters: the payload is parsed
  // as one JSON value on its own ($7::jsonb), so it can neither be malformed nor smuggle
  // extra envelope fields in; jsonb_build_object does the string escaping.
  static const std::string kSql =
      "SELECT pg_logical_emit_message(true, $1::text, jsonb_build_object("
      "'event_id', $2::text, 'aggregate_type', $3::text, 'aggregate_id', $4::text, "
      "'topic', $5::text, 'event_type', $6::text, 'payload', $7::jsonb, "
      "'headers', $8::jsonb)::text)";
  std::vector<const char*> values = {
      target_.message_prefix.c_str(),
      id.c_str(),
      event.aggregate_type.empty() ? nullptr : event.aggregate_type.c_str(),
      event.aggregate_id.c_str(),
      event.topic ? event.topic->c_str() : nullptr,
      event.event_type.c_str(),
      event.payload.c_str(),
      headers.c_str()};
  WALRELAY_RETURN_IF_ERROR(Exec(conn, kSql, values, "outbox: pg_logical_emit_message"));
  if (event_id_out != nullptr) *event_id_out = id;
  return Status::Ok();
}

Status Append(PGconn* conn, const OutboxEvent& event, std::string* event_id_out) {
  static const OutboxWriter writer;
  return writer.Append(conn, event, event_id_out);
}

Status AppendMessage(PGconn* conn, const OutboxEvent& event, std::string* event_id_out) {
  static const OutboxWriter writer;
  return writer.AppendMessage(conn, event, event_id_out);
}

}  // namespace walrelay::outbox
