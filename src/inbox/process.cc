// One message: the event id, dedup and handler in one transaction, the retry loop, and
// what each failure leads to (retry, dead letter, stop).
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "src/inbox/event_id.h"
#include "src/inbox/impl.h"
#include "src/inbox/pg.h"

namespace walrelay::inbox {

using namespace std::chrono_literals;

bool IsPermanent(StatusCode code) {
  return code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition ||
         code == StatusCode::kDataLoss;
}

Next FromFault(slot::PgFault fault) {
  switch (fault) {
    case slot::PgFault::kData:
      return Next::kDeadLetter;
    case slot::PgFault::kStatement:
      return Next::kStop;
    case slot::PgFault::kTransient:
    case slot::PgFault::kServerState:
      return Next::kRetry;
  }
  return Next::kRetry;
}

Result<Outcome> InboxConsumer::Impl::Process(const rd_kafka_message_t* m,
                                             const std::atomic<bool>& stop) {
  InboxMessage msg;
  msg.topic = rd_kafka_topic_name(m->rkt);
  msg.partition = m->partition;
  msg.offset = m->offset;
  if (m->key != nullptr) msg.key = std::string_view(static_cast<const char*>(m->key), m->key_len);
  if (m->payload != nullptr) {
    msg.value = std::string_view(static_cast<const char*>(m->payload), m->len);
  }
  rd_kafka_headers_t* hdrs = nullptr;
  if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name;
    const void* value;
    size_t size;
    for (size_t i = 0;
         rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      msg.headers.emplace_back(name, value != nullptr
                                         ? std::string_view(static_cast<const char*>(value), size)
                                         : std::string_view());
    }
  }
  std::string event_id;
  std::optional<std::string> dead_reason;
  if (Result<std::string> id = ExtractEventId(msg); id.ok()) {
    event_id = std::move(id).value();
  } else {
    dead_reason = id.status().message();
  }
  msg.event_id = event_id;

  auto backoff = opt_.retry_initial_backoff;
  for (;;) {
    if (stop.load() || stop_.load()) return CancelledError("stopping");
    Next next = Next::kRetry;
    Result<Outcome> r =
        dead_reason ? DeadLetterOnce(msg, *dead_reason, stop, &next) : ApplyOnce(msg, stop, &next);
    if (r.ok()) {
      switch (*r) {
        case Outcome::kApplied:
          ++applied_;
          break;
        case Outcome::kDuplicate:
          ++duplicates_;
          break;
        case Outcome::kDeadLettered:
          ++dead_lettered_;
          break;
      }
      return r;
    }
    const Status& st = r.status();
    if (st.code() == StatusCode::kCancelled && (stop.load() || stop_.load())) return st;
    if (next == Next::kDeadLetter && dead_reason) {
      // A dead-letter write must always succeed; one that cannot is no fault of this
      // message alone.
      next = Next::kStop;
    }
    if (next == Next::kStop) {
      return Status(st.code(), "inbox: " + std::string(msg.topic) + " [" +
                                   std::to_string(msg.partition) + "] @" +
                                   std::to_string(msg.offset) + ": " + st.message());
    }
    if (next == Next::kDeadLetter) {
      dead_reason = "handler: " + st.ToString();
      spdlog::warn("inbox: {} [{}] @{} event {}: permanent failure, dead-lettering: {}", msg.topic,
                   msg.partition, msg.offset, event_id, st.ToString());
      continue;
    }
    ++retries_;
    spdlog::warn("inbox: {} [{}] @{} event {}: {}; retrying in {} ms", msg.topic, msg.partition,
                 msg.offset, event_id, st.ToString(), backoff.count());
    const auto until = std::chrono::steady_clock::now() + backoff;
    while (std::chrono::steady_clock::now() < until && !stop.load() && !stop_.load()) {
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(backoff, 20ms));
    }
    backoff = std::min(backoff * 2, opt_.retry_max_backoff);
  }
}

Result<Outcome> InboxConsumer::Impl::ApplyOnce(const InboxMessage& msg,
                                               const std::atomic<bool>& stop, Next* next) {
  *next = Next::kRetry;  // connection failures, a stop request
  WALRELAY_ASSIGN_OR_RETURN(PGconn * c, pool_.Acquire(stop));
  Lease lease(pool_, c);
  slot::PgFault fault = slot::PgFault::kTransient;
  auto fail = [&](Status st, slot::PgFault f) {
    pg::Rollback(c);
    *next = FromFault(f);
    return st;
  };
  if (Status st = pg::Command(c, "BEGIN", "inbox: BEGIN", &fault); !st.ok()) return fail(st, fault);
  const pg::RawParam params[] = {{opt_.consumer_name}, {msg.event_id}};
  Result<pg::ResultPtr> ins = pg::Exec(c, kInsertInbox, params, "inbox: insert", &fault);
  if (!ins.ok()) return fail(ins.status(), fault);
  if (std::strcmp(PQcmdTuples(ins->get()), "0") == 0) {
    // Duplicate: nothing else is written; COMMIT ends the (empty) transaction.
    if (Status st = pg::Commit(c, &fault); !st.ok()) return fail(st, fault);
    return Outcome::kDuplicate;
  }
  Transaction tx(c);
  Status st;
  try {
    st = handler_(msg, tx);
  } catch (const std::exception& e) {
    st = InternalError(std::string("handler threw: ") + e.what());
  } catch (...) {
    st = InternalError("handler threw");
  }
  // A database error that the handler returned without recovering from it (the
  // transaction is aborted, or the connection gone) is decided by the shared table; the
  // handler's own verdict by its code.
  const bool db_failed = PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) == PQTRANS_INERROR;
  const bool db_decides = db_failed && !tx.last_database_error().ok();
  if (!st.ok()) {
    if (db_decides) return fail(st, TransactionAccess::Fault(tx));
    if (PQstatus(c) != CONNECTION_OK) return fail(st, slot::PgFault::kTransient);
    pg::Rollback(c);
    *next = IsPermanent(st.code()) ? Next::kDeadLetter : Next::kRetry;
    if (st.code() == StatusCode::kCancelled && !stop.load() && !stop_.load()) {
      spdlog::warn(
          "inbox: {} [{}] @{}: the handler returned CANCELLED but no stop was "
          "requested; retried like a transient failure",
          msg.topic, msg.partition, msg.offset);
    }
    return st;
  }
  if (Status cs = pg::Commit(c, &fault); !cs.ok()) {
    // COMMIT answered ROLLBACK: the handler swallowed a database error; that error decides.
    return fail(cs, db_decides ? TransactionAccess::Fault(tx) : fault);
  }
  AfterCommit();
  return Outcome::kApplied;
}

void InboxConsumer::Impl::AfterCommit() {
  const int64_t n = ++commits_;
  if (failpoint_after_ > 0 && n == failpoint_after_) {
    // TEST ONLY: die between the database commit and the offset store/commit.
    spdlog::warn("inbox: failpoint crash_after_db_commit:{} reached, SIGKILL", n);
    spdlog::default_logger()->flush();
    kill(getpid(), SIGKILL);
    _exit(137);
  }
}

}  // namespace walrelay::inbox
