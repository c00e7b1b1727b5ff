// Messages in batches: one transaction per batch (the dedup insert of every event id in
// one statement, the handler per new message in partition order, their deferred
// statements in one pipeline, one COMMIT), and the one-message path that every failure
// falls back to: retries, dead letters and the stop decision for the message to blame.
//
// A batch never decides the fate of a message. When anything in it fails, the batch is
// rolled back; the messages before the one to blame are tried again as one batch, and the
// one to blame goes through the one-message path (a batch of one with retries), where the
// same rules as for a lone message apply. So batching changes how many transactions run,
// never what is applied, dead-lettered or retried.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>
#include <unordered_set>

#include "base/headers.h"
#include "base/position.h"
#include "src/inbox/event_id.h"
#include "src/inbox/impl.h"
#include "src/inbox/pg.h"

namespace walrelay::inbox {

using namespace std::chrono_literals;

namespace {

// The dedup insert of a batch: the ids that were new come back.
constexpr std::string_view kInsertInboxBatch =
    "INSERT INTO inbox (consumer, message_id) SELECT $1, unnest($2::text[]) "
    "ON CONFLICT DO NOTHING RETURNING message_id";

// `ids` as a text[] literal: every element quoted, `"` and `\` escaped (ids are UTF-8
// without NUL: event_id.h).
std::string TextArray(std::span<const Item> items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (char ch : items[i].event_id) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace

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

std::optional<std::string> TooOldToTell(const InboxMessage& msg,
                                        std::chrono::milliseconds inbox_retention,
                                        std::chrono::system_clock::time_point now,
                                        int64_t append_time_ms) {
  if (inbox_retention.count() <= 0) return std::nullopt;
  const std::optional<std::string_view> header = msg.Header(headers::kPosition);
  if (!header) return std::nullopt;
  const std::optional<SourcePosition> position = ParsePosition(*header);
  if (!position || position->commit_time_us <= 0) return std::nullopt;
  const int64_t now_us =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  const int64_t age_ms = (now_us - position->commit_time_us) / 1000;
  if (age_ms < inbox_retention.count()) return std::nullopt;
  return "the event is " + std::to_string(age_ms) + " ms old (" +
         std::string(headers::kPosition) + " commit_time_us=" +
         std::to_string(position->commit_time_us) + (position->recovered ? ", recovered" : "") +
         ")" +
         (append_time_ms > 0
              ? ", of which " + std::to_string(append_time_ms - position->commit_time_us / 1000) +
                    " ms from its commit to its record's timestamp in Kafka (relay lag, or a "
                    "re-emission by republish or recovery) and " +
                    std::to_string(now_us / 1000 - append_time_ms) +
                    " ms since (time in Kafka and consumer lag)"
              : std::string()) +
         ", older than this inbox's retention of " + std::to_string(inbox_retention.count()) +
         " ms: its inbox row may be deleted already, so the inbox cannot tell whether it "
         "applied it, and applying it could apply it twice. Not applied. If the ledger shows "
         "it was never applied (look for event id " + std::string(msg.event_id) +
         "), apply it by hand or re-drive it from the dead letters";
}

void Decode(rd_kafka_message_t* m, std::string_view event_id_header,
            std::chrono::milliseconds inbox_retention, Item* out) {
  out->m = m;
  InboxMessage& msg = out->msg;
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
  if (Result<std::string> id = ExtractEventId(msg, event_id_header); id.ok()) {
    out->event_id = std::move(id).value();
  } else {
    out->poison = id.status().message();
  }
  msg.event_id = out->event_id;
  if (!out->poison) {
    rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    const int64_t appended = rd_kafka_message_timestamp(m, &type);
    out->poison = TooOldToTell(msg, inbox_retention, std::chrono::system_clock::now(),
                               type == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? -1 : appended);
  }
}

// ---------------------------------------------------------------------------------------
// Attempt

Attempt::~Attempt() {
  if (conn_ == nullptr) return;
  pipeline_.reset();  // drains what is still pending
  if (open_) pg::Rollback(conn_);
  pool_.Release(conn_);
}

Status Attempt::Begin(const std::atomic<bool>& stop) {
  WALRELAY_ASSIGN_OR_RETURN(conn_, pool_.Acquire(stop));
  slot::PgFault fault = slot::PgFault::kTransient;
  if (Status st = pg::Command(conn_, "BEGIN", "inbox: BEGIN", &fault); !st.ok()) {
    return Fail(st, fault);
  }
  open_ = true;
  pipeline_.emplace(conn_);
  return Status::Ok();
}

Result<pg::ResultPtr> Attempt::Exec(std::string_view sql, std::span<const pg::RawParam> params,
                                    std::string_view context) {
  slot::PgFault fault = slot::PgFault::kTransient;
  Result<pg::ResultPtr> r = pg::Exec(conn_, sql, params, context, &fault);
  if (!r.ok()) return Fail(r.status(), fault);
  return r;
}

Status Attempt::Fail(Status st, slot::PgFault fault) { return Fail(std::move(st), FromFault(fault)); }

Status Attempt::Fail(Status st, Next next) {
  if (pipeline_) pipeline_->Drain();
  if (open_) pg::Rollback(conn_);
  open_ = false;
  *next_ = next;
  return st;
}

Status Attempt::Commit() {
  if (pipeline_) {
    if (const auto& f = pipeline_->Drain()) return Fail(f->status, f->fault);
  }
  slot::PgFault fault = slot::PgFault::kTransient;
  Status st = pg::Commit(conn_, &fault);
  open_ = false;  // committed, or the server ended the transaction, or the connection is gone
  if (!st.ok()) return Fail(st, fault);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// Batches

Status InboxConsumer::Impl::ProcessBatch(std::span<Item> items, const PartitionWorker& w) {
  size_t i = 0;
  size_t end = items.size();
  // The item a failed batch blamed, with that failure and its verdict: it goes alone once
  // the items before it are done.
  constexpr size_t kNobody = static_cast<size_t>(-1);
  size_t blamed = kNobody;
  Status blamed_failure;
  Next blamed_next = Next::kRetry;
  while (i < items.size()) {
    if (w.stop.load() || stop_.load()) return CancelledError("stopping");
    if (blamed == i) {
      // Alone, by the one-message path, which decides that failure first (it counts as an
      // attempt: a retry, a dead letter or a stop).
      WALRELAY_RETURN_IF_ERROR(Process(items[i], w.stop, blamed_failure, blamed_next));
      StoreOffset(w, items[i].msg.offset);
      blamed = kNobody;
      ++i;
      end = items.size();
      continue;
    }
    // A record without a usable event id ends the batch in front of it: it goes alone.
    size_t cut = i;
    while (cut < end && !items[cut].poison) ++cut;
    if (cut > i) {
      std::optional<size_t> blame;
      Next next = Next::kRetry;
      Status st = ApplyBatch(items.subspan(i, cut - i), w.stop, &blame, &next);
      if (st.ok()) {
        StoreOffset(w, items[cut - 1].msg.offset);
        i = cut;
        end = items.size();
        continue;
      }
      if (blame) {
        // The items before the one to blame again as one batch, then that one alone.
        spdlog::debug("inbox: {} [{}] batch of {} failed at @{}: {}", w.topic, w.partition,
                      cut - i, items[i + *blame].msg.offset, st.ToString());
        blamed = i + *blame;
        blamed_failure = st;
        blamed_next = next;
        end = i + *blame;
        continue;
      }
      // Failed before or after its handlers (BEGIN, the dedup insert, COMMIT, or no
      // answer from the database in time): the database's failure, not a message's. Said
      // and counted as a retry at once, so an outage shows before the one-message path's
      // first attempt (a new connection) ends too.
      if (st.code() == StatusCode::kCancelled && (w.stop.load() || stop_.load())) return st;
      ++retries_;
      spdlog::warn("inbox: {} [{}] batch of {} from @{} failed: {}; retrying it message by message",
                   w.topic, w.partition, cut - i, items[i].msg.offset, st.ToString());
    }
    // A poison record, or a batch that failed before or after its handlers (BEGIN, the
    // dedup insert, COMMIT): items[i] alone, by the one-message path.
    WALRELAY_RETURN_IF_ERROR(Process(items[i], w.stop));
    StoreOffset(w, items[i].msg.offset);
    ++i;
    end = items.size();
  }
  return Status::Ok();
}

Status InboxConsumer::Impl::ApplyBatch(std::span<Item> items, const std::atomic<bool>& stop,
                                       std::optional<size_t>* blame, Next* next) {
  *blame = std::nullopt;  // failures before any handler ran are nobody's in particular
  Attempt a(pool_, next);
  WALRELAY_RETURN_IF_ERROR(a.Begin(stop));
  const std::string ids = TextArray(items);
  const pg::RawParam params[] = {{opt_.consumer_name}, {ids}};
  WALRELAY_ASSIGN_OR_RETURN(pg::ResultPtr ins, a.Exec(kInsertInboxBatch, params, "inbox: insert"));
  std::unordered_set<std::string_view> fresh;
  fresh.reserve(static_cast<size_t>(PQntuples(ins.get())));
  for (int r = 0; r < PQntuples(ins.get()); ++r) {
    fresh.emplace(PQgetvalue(ins.get(), r, 0), static_cast<size_t>(PQgetlength(ins.get(), r, 0)));
  }
  uint64_t applied = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    // New when its id came back; the first of equal ids in one batch takes it.
    if (fresh.erase(items[i].event_id) == 0) continue;
    Transaction tx(a.conn());
    TransactionAccess::Bind(tx, a.pipeline(), i);
    Status st = CallHandler(items[i].msg, tx);
    const bool aborted = PQstatus(a.conn()) != CONNECTION_OK ||
                         PQtransactionStatus(a.conn()) == PQTRANS_INERROR;
    const std::optional<pg::Pipeline::Failure>& deferred = a.pipeline()->failure();
    if (deferred && deferred->owner < i) {
      // An earlier message's deferred statement failed (seen when this handler waited).
      *blame = deferred->owner;
      return a.Fail(deferred->status, deferred->fault);
    }
    *blame = i;
    if (!st.ok()) {
      // A database error the handler passed on while its transaction is aborted (or the
      // connection gone) is decided by the shared table; the handler's own verdict by
      // its code.
      if (aborted && !tx.last_database_error().ok()) {
        return a.Fail(st, TransactionAccess::Fault(tx));
      }
      if (PQstatus(a.conn()) != CONNECTION_OK) return a.Fail(st, slot::PgFault::kTransient);
      if (st.code() == StatusCode::kCancelled && !stop.load() && !stop_.load()) {
        spdlog::warn(
            "inbox: {} [{}] @{}: the handler returned CANCELLED but no stop was requested; "
            "retried like a transient failure",
            items[i].msg.topic, items[i].msg.partition, items[i].msg.offset);
      }
      return a.Fail(st, IsPermanent(st.code()) ? Next::kDeadLetter : Next::kRetry);
    }
    if (aborted) {
      // The handler swallowed a database error: its transaction cannot commit, and that
      // error decides.
      Status err = tx.last_database_error().ok()
                       ? InternalError("the handler returned OK in an aborted transaction")
                       : tx.last_database_error();
      return a.Fail(err, TransactionAccess::Fault(tx));
    }
    ++applied;
  }
  // The deferred statements of every handler, then one COMMIT.
  if (const auto& f = a.pipeline()->Drain()) {
    *blame = f->owner;
    return a.Fail(f->status, f->fault);
  }
  *blame = std::nullopt;
  WALRELAY_RETURN_IF_ERROR(a.Commit());
  applied_ += applied;
  duplicates_ += items.size() - applied;
  AfterCommit(items.size());
  return Status::Ok();
}

Status InboxConsumer::Impl::CallHandler(const InboxMessage& msg, Transaction& tx) {
  Status st;
  try {
    st = handler_(msg, tx);
  } catch (const std::exception& e) {
    st = InternalError(std::string("handler threw: ") + e.what());
  } catch (...) {
    st = InternalError("handler threw");
  }
  return st;
}

// ---------------------------------------------------------------------------------------
// The one-message path

Status InboxConsumer::Impl::Process(Item& item, const std::atomic<bool>& stop, Status failed,
                                    Next failed_next) {
  const InboxMessage& msg = item.msg;
  std::optional<std::string> dead_reason = item.poison;
  auto backoff = opt_.retry_initial_backoff;
  for (;;) {
    if (stop.load() || stop_.load()) return CancelledError("stopping");
    Next next = failed_next;
    Status st = std::exchange(failed, Status::Ok());
    if (!st.ok()) {
      // The attempt the batch made: decided below like any other.
    } else if (dead_reason) {
      Result<Outcome> r = DeadLetterOnce(msg, *dead_reason, stop, &next);
      if (r.ok()) {
        ++(*r == Outcome::kDuplicate ? duplicates_ : dead_lettered_);
        return Status::Ok();
      }
      st = r.status();
      // A dead-letter write must always succeed; one that cannot is no fault of this
      // message alone.
      if (next == Next::kDeadLetter) next = Next::kStop;
    } else {
      std::optional<size_t> blame;
      st = ApplyBatch(std::span<Item>(&item, 1), stop, &blame, &next);
      if (st.ok()) return st;
    }
    if (st.code() == StatusCode::kCancelled && (stop.load() || stop_.load())) return st;
    if (next == Next::kStop) {
      return Status(st.code(), "inbox: " + std::string(msg.topic) + " [" +
                                   std::to_string(msg.partition) + "] @" +
                                   std::to_string(msg.offset) + ": " + st.message());
    }
    if (next == Next::kDeadLetter) {
      dead_reason = "handler: " + st.ToString();
      spdlog::warn("inbox: {} [{}] @{} event {}: permanent failure, dead-lettering: {}", msg.topic,
                   msg.partition, msg.offset, item.event_id, st.ToString());
      continue;
    }
    ++retries_;
    spdlog::warn("inbox: {} [{}] @{} event {}: {}; retrying in {} ms", msg.topic, msg.partition,
                 msg.offset, item.event_id, st.ToString(), backoff.count());
    const auto until = std::chrono::steady_clock::now() + backoff;
    while (std::chrono::steady_clock::now() < until && !stop.load() && !stop_.load()) {
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(backoff, 20ms));
    }
    backoff = std::min(backoff * 2, opt_.retry_max_backoff);
  }
}

void InboxConsumer::Impl::StoreOffset(const PartitionWorker& w, int64_t offset) {
  // Only now, after the database commit, may the offset become committable.
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, w.topic.c_str(), w.partition)->offset = offset + 1;
  rd_kafka_resp_err_t e = rd_kafka_offsets_store(rk_, list);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    spdlog::warn("inbox: store offset {} [{}] {}: {} (a redelivery will be deduplicated)", w.topic,
                 w.partition, offset, rd_kafka_err2str(e));
  }
  rd_kafka_topic_partition_list_destroy(list);
}

void InboxConsumer::Impl::AfterCommit(size_t messages) {
  ++transactions_;
  const int64_t n = committed_ += static_cast<int64_t>(messages);
  if (failpoint_after_ > 0 && n >= failpoint_after_ &&
      n - static_cast<int64_t>(messages) < failpoint_after_) {
    // TEST ONLY: die between the database commit and the offset store/commit.
    spdlog::warn("inbox: failpoint crash_after_db_commit:{} reached ({} messages committed), SIGKILL",
                 failpoint_after_, n);
    spdlog::default_logger()->flush();
    kill(getpid(), SIGKILL);
    _exit(137);
  }
}

}  // namespace walrelay::inbox
