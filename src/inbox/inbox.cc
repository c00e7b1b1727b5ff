// Design notes (see inbox.h for the contract and docs/inbox.md for the rationale).
//
// Threads:
//   Run() thread   rd_kafka_consumer_poll: serves the group protocol and the rebalance
//                  callback. On assign it splits every assigned partition's queue off the
//                  consumer queue (rd_kafka_queue_get_partition + forward to NULL, done
//                  before rd_kafka_assign, so the flag survives re-assignments) and starts
//                  one worker per partition; on revoke it stops and joins those workers,
//                  commits the stored offsets synchronously, then unassigns.
//   workers        rd_kafka_consume_queue on their partition queue, one message at a time:
//                  dedup + handler in one transaction on a pooled connection, then
//                  rd_kafka_offsets_store. librdkafka's prefetch limits
//                  (queued.max.messages.kbytes) bound the memory per partition.
//   retention      deletes expired inbox rows every retention_interval.
#include "src/inbox/inbox.h"

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "base/json.h"
#include "slot/pg_error.h"
#include "src/inbox/pg.h"
#include "src/kafka/producer.h"

namespace walrelay::inbox {

// Reads and writes Transaction's record of its last database failure.
struct TransactionAccess {
  static void Record(Transaction& tx, const Status& st, slot::PgFault fault) {
    tx.last_error_ = st;
    tx.last_fault_ = static_cast<int>(fault);
  }
  static slot::PgFault Fault(const Transaction& tx) {
    return static_cast<slot::PgFault>(tx.last_fault_);
  }
};

using namespace std::chrono_literals;

std::optional<std::string_view> InboxMessage::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return std::nullopt;
}

namespace {

std::vector<pg::RawParam> ToRaw(const std::vector<Param>& params) {
  std::vector<pg::RawParam> raw;
  raw.reserve(params.size());
  for (const Param& p : params) {
    raw.push_back(pg::RawParam{p.value ? std::optional<std::string_view>(*p.value) : std::nullopt});
  }
  return raw;
}

}  // namespace

Result<int64_t> Transaction::Exec(std::string_view sql, const std::vector<Param>& params) {
  auto raw = ToRaw(params);
  slot::PgFault fault;
  Result<pg::ResultPtr> r = pg::Exec(conn_, sql, raw, "handler statement", &fault);
  if (!r.ok()) {
    TransactionAccess::Record(*this, r.status(), fault);
    return r.status();
  }
  pg::ResultPtr res = std::move(r).value();
  const char* n = PQcmdTuples(res.get());
  return static_cast<int64_t>(n != nullptr && *n != '\0' ? std::strtoll(n, nullptr, 10) : 0);
}

Result<std::vector<Row>> Transaction::Query(std::string_view sql,
                                            const std::vector<Param>& params) {
  auto raw = ToRaw(params);
  slot::PgFault fault;
  Result<pg::ResultPtr> r = pg::Exec(conn_, sql, raw, "handler query", &fault);
  if (!r.ok()) {
    TransactionAccess::Record(*this, r.status(), fault);
    return r.status();
  }
  pg::ResultPtr res = std::move(r).value();
  std::vector<Row> rows;
  const int nrows = PQntuples(res.get());
  const int ncols = PQnfields(res.get());
  rows.reserve(static_cast<size_t>(nrows));
  for (int r = 0; r < nrows; ++r) {
    Row row;
    row.reserve(static_cast<size_t>(ncols));
    for (int c = 0; c < ncols; ++c) {
      if (PQgetisnull(res.get(), r, c)) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(std::string(PQgetvalue(res.get(), r, c),
                                     static_cast<size_t>(PQgetlength(res.get(), r, c))));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// ---------------------------------------------------------------------------------------
// The retention rule. The one place it is decided; the reason is in inbox.h, repeated here
// because this is where someone will look when Create() refuses to start:
// an inbox row is the only memory that a message was handled; Kafka can deliver a message
// again for as long as the topic keeps it (group reset, new group, old offset commit lost),
// so the row must outlive the topic's retention, or a replay is applied twice.
Status CheckInboxRetention(std::chrono::milliseconds inbox_retention,
                           const std::optional<ReplayWindow>& window) {
  if (inbox_retention.count() == 0) return Status::Ok();  // rows kept forever: always safe
  const std::string ours = std::to_string(inbox_retention.count()) + " ms";
  if (!window) {
    return FailedPreconditionError(
        "inbox retention " + ours +
        " cannot be checked against the topic's replay window: the broker did not answer "
        "DescribeConfigs (retention.ms) and no replay_window is configured; configure the "
        "replay window (the topic's retention.ms) or keep inbox rows forever (retention 0)");
  }
  if (window->infinite) {
    return FailedPreconditionError(
        "inbox retention " + ours + " is shorter than the replay window (" + window->source +
        " is infinite, retention.ms=-1): a replay would apply messages whose inbox rows were "
        "deleted; keep inbox rows forever (retention 0) or give the topic a finite retention");
  }
  if (inbox_retention <= window->window) {
    return FailedPreconditionError(
        "inbox retention " + ours + " is not longer than the topic's replay window " +
        std::to_string(window->window.count()) + " ms (" + window->source +
        "): Kafka could redeliver a message after its inbox row was deleted and it would be "
        "applied twice; raise the inbox retention above the replay window or lower the "
        "topic's retention.ms");
  }
  return Status::Ok();
}

std::optional<ReplayWindow> DescribeReplayWindow(rd_kafka_t* rk,
                                                 const std::vector<std::string>& topics,
                                                 std::chrono::milliseconds timeout) {
  if (topics.empty()) return std::nullopt;
  std::vector<rd_kafka_ConfigResource_t*> resources;
  for (const std::string& t : topics) {
    resources.push_back(rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, t.c_str()));
  }
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  rd_kafka_AdminOptions_t* options =
      rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
  char errstr[256];
  rd_kafka_AdminOptions_set_request_timeout(options, static_cast<int>(timeout.count()), errstr,
                                            sizeof(errstr));
  rd_kafka_DescribeConfigs(rk, resources.data(), resources.size(), options, queue);
  rd_kafka_event_t* ev = rd_kafka_queue_poll(queue, static_cast<int>(timeout.count()) + 1000);

  std::optional<ReplayWindow> out;
  if (ev == nullptr) {
    spdlog::warn("inbox: DescribeConfigs got no answer within {} ms", timeout.count());
  } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    spdlog::info("inbox: broker did not describe topic configs: {}",
                 rd_kafka_event_error_string(ev));
  } else if (const rd_kafka_DescribeConfigs_result_t* res =
                 rd_kafka_event_DescribeConfigs_result(ev)) {
    size_t n = 0;
    const rd_kafka_ConfigResource_t** rs = rd_kafka_DescribeConfigs_result_resources(res, &n);
    ReplayWindow w;
    bool all = n == topics.size();
    for (size_t i = 0; i < n && all; ++i) {
      if (rd_kafka_ConfigResource_error(rs[i]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        spdlog::info("inbox: DescribeConfigs {}: {}", rd_kafka_ConfigResource_name(rs[i]),
                     rd_kafka_ConfigResource_error_string(rs[i]));
        all = false;
        break;
      }
      size_t nc = 0;
      const rd_kafka_ConfigEntry_t** entries = rd_kafka_ConfigResource_configs(rs[i], &nc);
      bool found = false;
      for (size_t j = 0; j < nc; ++j) {
        if (std::strcmp(rd_kafka_ConfigEntry_name(entries[j]), "retention.ms") != 0) continue;
        const char* v = rd_kafka_ConfigEntry_value(entries[j]);
        long long ms = 0;
        if (v == nullptr) break;
        auto [p, ec] = std::from_chars(v, v + std::strlen(v), ms);
        if (ec != std::errc()) break;
        found = true;
        const std::string src =
            std::string("broker retention.ms of topic ") + rd_kafka_ConfigResource_name(rs[i]);
        if (ms < 0) {
          w.infinite = true;
          w.source = src;
        } else if (!w.infinite && std::chrono::milliseconds(ms) >= w.window) {
          w.window = std::chrono::milliseconds(ms);
          w.source = src;
        }
      }
      all = all && found;
    }
    if (all && n > 0) out = w;
  }
  if (ev != nullptr) rd_kafka_event_destroy(ev);
  rd_kafka_AdminOptions_destroy(options);
  rd_kafka_queue_destroy(queue);
  for (auto* r : resources) rd_kafka_ConfigResource_destroy(r);
  return out;
}

// ---------------------------------------------------------------------------------------

namespace {

constexpr std::string_view kInsertInbox =
    "INSERT INTO inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";

constexpr std::string_view kSchema = R"sql(
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('walrelay.inbox.schema'));
CREATE TABLE IF NOT EXISTS inbox (
  consumer    text        NOT NULL,
  message_id  text        NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS inbox_consumer_received_at ON inbox (consumer, received_at);
CREATE TABLE IF NOT EXISTS inbox_dead_letter (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  dead_at     timestamptz NOT NULL DEFAULT now(),
  consumer    text        NOT NULL,
  message_id  text,
  topic       text        NOT NULL,
  "partition" int         NOT NULL,
  "offset"    bigint      NOT NULL,
  key         bytea,
  value       bytea,
  headers     jsonb       NOT NULL,
  reason      text        NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_dead_letter_source
  ON inbox_dead_letter (consumer, topic, "partition", "offset");
COMMIT;
)sql";

bool IsPermanent(StatusCode code) {
  return code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition ||
         code == StatusCode::kDataLoss;
}

// What happens to a message after a failed attempt.
enum class Next {
  kRetry,       // roll back, back off, try the same message again
  kDeadLetter,  // the message is bad: dead-letter it
  kStop,        // no message can succeed: stop the consumer, Run() returns the error
};

// The inbox's reading of the shared SQLSTATE table (slot/pg_error.h).
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

// An event id usable as an inbox key (text in a btree): kDataLoss = the dead-letter reason.
Status ValidateEventId(std::string_view id, std::string_view source) {
  if (id.size() > kMaxEventIdBytes) {
    return DataLossError("poison: the event id in the " + std::string(source) + " has " +
                         std::to_string(id.size()) + " bytes, more than the " +
                         std::to_string(kMaxEventIdBytes) + " allowed");
  }
  if (id.find('\0') != std::string_view::npos) {
    return DataLossError("poison: the event id in the " + std::string(source) +
                         " contains a NUL byte");
  }
  if (!simdjson::validate_utf8(id.data(), id.size())) {
    return DataLossError("poison: the event id in the " + std::string(source) +
                         " is not valid UTF-8");
  }
  return Status::Ok();
}

// Poison detection: the event id, from the header or the JSON envelope. kDataLoss = the
// dead-letter reason.
Result<std::string> ExtractEventId(const InboxMessage& m) {
  if (auto h = m.Header("event_id")) {
    if (h->empty()) return DataLossError("poison: empty event_id header");
    WALRELAY_RETURN_IF_ERROR(ValidateEventId(*h, "event_id header"));
    return std::string(*h);
  }
  if (m.value.empty()) return DataLossError("poison: no event_id header and an empty value");
  thread_local simdjson::dom::parser parser;
  simdjson::padded_string padded(m.value);
  simdjson::dom::element doc;
  if (auto err = parser.parse(padded).get(doc); err) {
    return DataLossError(std::string("poison: no event_id header and the value is not JSON (") +
                         simdjson::error_message(err) + ")");
  }
  std::string_view id;
  if (doc["event_id"].get(id) != simdjson::SUCCESS || id.empty()) {
    return DataLossError("poison: no event_id header and no \"event_id\" string in the JSON value");
  }
  WALRELAY_RETURN_IF_ERROR(ValidateEventId(id, "JSON value"));
  return std::string(id);
}

// A bounded pool of database connections shared by the partition workers.
class ConnectionPool {
 public:
  ConnectionPool(std::string conninfo, int max) : conninfo_(std::move(conninfo)), max_(max) {}
  ~ConnectionPool() {
    for (PGconn* c : idle_) PQfinish(c);
  }

  // A connection, waiting while all are in use; kCancelled when `stop` turns true.
  Result<PGconn*> Acquire(const std::atomic<bool>& stop) {
    std::unique_lock lock(mu_);
    for (;;) {
      if (stop.load()) return CancelledError("stopping");
      if (!idle_.empty()) {
        PGconn* c = idle_.back();
        idle_.pop_back();
        if (PQstatus(c) == CONNECTION_OK) return c;
        PQfinish(c);
        --open_;
      }
      if (open_ < max_) {
        ++open_;
        lock.unlock();
        Result<PGconn*> c = pg::Connect(conninfo_);
        if (!c.ok()) {
          lock.lock();
          --open_;
          cv_.notify_one();
        }
        return c;
      }
      cv_.wait_for(lock, 100ms);
    }
  }

  void Release(PGconn* c) {
    std::lock_guard lock(mu_);
    if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_IDLE) {
      idle_.push_back(c);
    } else {
      PQfinish(c);
      --open_;
    }
    cv_.notify_one();
  }

 private:
  const std::string conninfo_;
  const int max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PGconn*> idle_;
  int open_ = 0;
};

// RAII lease of a pooled connection.
class Lease {
 public:
  Lease(ConnectionPool& pool, PGconn* c) : pool_(pool), c_(c) {}
  ~Lease() { pool_.Release(c_); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  PGconn* get() const { return c_; }

 private:
  ConnectionPool& pool_;
  PGconn* c_;
};

enum class Outcome { kApplied, kDuplicate, kDeadLettered };

struct PartitionWorker {
  std::string topic;
  int32_t partition = -1;
  rd_kafka_queue_t* queue = nullptr;
  std::atomic<bool> stop{false};
  std::thread thread;
};

}  // namespace

class InboxConsumer::Impl {
 public:
  Impl(InboxOptions options, Handler handler)
      : opt_(std::move(options)),
        handler_(std::move(handler)),
        pool_(opt_.conninfo, opt_.max_db_connections) {}

  ~Impl() {
    Stop();
    StopWorkers(nullptr);
    if (rk_ != nullptr) {
      if (!closed_) rd_kafka_consumer_close(rk_);
      rd_kafka_destroy(rk_);
    }
  }

  Status Init();
  Status EnsureSchema();
  Status Run();
  void Stop() {
    stop_ = true;
    std::lock_guard lock(retention_mu_);
    retention_cv_.notify_all();
  }
  // Stops the consumer because of `st` (no message can succeed); Run() returns the first
  // such error.
  void Fail(const Status& st) {
    {
      std::lock_guard lock(fatal_mu_);
      if (fatal_.ok()) fatal_ = st;
    }
    spdlog::error("inbox: stopping the consumer: {}", st.ToString());
    Stop();
  }
  Result<int64_t> RunRetentionOnce();

  InboxStats stats() const {
    InboxStats s;
    s.applied = applied_.load();
    s.duplicates = duplicates_.load();
    s.dead_lettered = dead_lettered_.load();
    s.retries = retries_.load();
    s.retention_deleted = retention_deleted_.load();
    return s;
  }

  const std::optional<ReplayWindow>& window() const { return window_; }

  static void RebalanceCb(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t* parts, void* opaque);

 private:
  void StartWorkers(const rd_kafka_topic_partition_list_t* parts);
  // Stops and joins the workers of `parts` (all when null).
  void StopWorkers(const rd_kafka_topic_partition_list_t* parts);
  void WorkerLoop(PartitionWorker* w);
  Result<Outcome> Process(const rd_kafka_message_t* m, const std::atomic<bool>& stop);
  // One attempt; on failure `*next` says what to do with the message.
  Result<Outcome> ApplyOnce(const InboxMessage& msg, const std::atomic<bool>& stop, Next* next);
  Result<Outcome> DeadLetterOnce(const InboxMessage& msg, const std::string& reason,
                                 const std::atomic<bool>& stop, Next* next);
  Status ProduceDeadLetter(const InboxMessage& msg, const std::string& reason);
  void AfterCommit();
  void RetentionLoop();

  InboxOptions opt_;
  Handler handler_;
  ConnectionPool pool_;
  rd_kafka_t* rk_ = nullptr;
  bool closed_ = false;
  std::optional<ReplayWindow> window_;
  std::atomic<bool> stop_{false};

  std::map<std::pair<std::string, int32_t>, std::unique_ptr<PartitionWorker>> workers_;

  std::mutex dlq_mu_;
  std::unique_ptr<kafka::Producer> dlq_;
  Status dlq_result_;

  int64_t failpoint_after_ = 0;  // crash_after_db_commit:N, 0 = off
  std::atomic<int64_t> commits_{0};

  std::atomic<uint64_t> applied_{0}, duplicates_{0}, dead_lettered_{0}, retries_{0},
      retention_deleted_{0};

  std::mutex retention_mu_;
  std::condition_variable retention_cv_;

  std::mutex fatal_mu_;
  Status fatal_;  // the error that stopped the consumer (Fail)
};

Status InboxConsumer::Impl::Init() {
  if (opt_.bootstrap_servers.empty())
    return InvalidArgumentError("inbox: bootstrap servers required");
  if (opt_.group_id.empty()) return InvalidArgumentError("inbox: group id required");
  if (opt_.topics.empty()) return InvalidArgumentError("inbox: at least one topic required");
  if (opt_.conninfo.empty()) return InvalidArgumentError("inbox: conninfo required");
  if (opt_.consumer_name.empty()) return InvalidArgumentError("inbox: consumer name required");
  if (Status st = ValidateEventId(opt_.consumer_name, "consumer name"); !st.ok()) {
    return InvalidArgumentError("inbox: consumer name: " + st.message());
  }
  if (opt_.max_db_connections < 1) return InvalidArgumentError("inbox: max_db_connections < 1");
  if (opt_.retention_batch < 1) return InvalidArgumentError("inbox: retention_batch < 1");
  if (!handler_) return InvalidArgumentError("inbox: handler required");
  if (opt_.dead_letter_topic.empty()) opt_.dead_letter_topic = opt_.consumer_name + ".dlq";

  // Test-only failpoint, read once (documented in inbox.h and docs/inbox.md).
  if (const char* fp = std::getenv("WALRELAY_INBOX_FAILPOINT"); fp != nullptr && *fp != '\0') {
    std::string_view v(fp);
    constexpr std::string_view kPrefix = "crash_after_db_commit:";
    int64_t n = 0;
    if (!v.starts_with(kPrefix) ||
        std::from_chars(v.data() + kPrefix.size(), v.data() + v.size(), n).ec != std::errc() ||
        n < 1) {
      return InvalidArgumentError("WALRELAY_INBOX_FAILPOINT: expected crash_after_db_commit:N");
    }
    failpoint_after_ = n;
    spdlog::warn("inbox: TEST FAILPOINT armed: SIGKILL after database commit #{}", n);
  }

  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto set = [&](const std::string& k, const std::string& v) -> Status {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
      return InvalidArgumentError("inbox: kafka property " + k + "=" + v + ": " + errstr);
    }
    return Status::Ok();
  };
  std::vector<std::pair<std::string, std::string>> props = {
      {"bootstrap.servers", opt_.bootstrap_servers},
      {"group.id", opt_.group_id},
      {"auto.offset.reset", "earliest"},
      {"enable.partition.eof", "false"},
  };
  for (const auto& p : opt_.properties) {
    if ((p.first == "enable.auto.offset.store" && p.second != "false") ||
        (p.first == "enable.auto.commit" && p.second != "true")) {
      rd_kafka_conf_destroy(conf);
      return InvalidArgumentError(
          "inbox: " + p.first + "=" + p.second +
          " is not allowed: the inbox stores an offset only after its database commit "
          "(enable.auto.offset.store=false) and lets librdkafka commit stored offsets "
          "(enable.auto.commit=true)");
    }
    props.push_back(p);
  }
  props.emplace_back("enable.auto.commit", "true");
  props.emplace_back("enable.auto.offset.store", "false");
  for (const auto& [k, v] : props) {
    if (Status st = set(k, v); !st.ok()) {
      rd_kafka_conf_destroy(conf);
      return st;
    }
  }
  rd_kafka_conf_set_opaque(conf, this);
  rd_kafka_conf_set_rebalance_cb(conf, &Impl::RebalanceCb);
  rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
  if (rk_ == nullptr) {
    rd_kafka_conf_destroy(conf);
    return InvalidArgumentError(std::string("inbox: create consumer: ") + errstr);
  }
  rd_kafka_poll_set_consumer(rk_);

  // The retention rule: decided in CheckInboxRetention only.
  if (opt_.inbox_retention.count() != 0) {
    window_ = DescribeReplayWindow(rk_, opt_.topics, opt_.describe_configs_timeout);
    if (!window_ && opt_.replay_window.count() > 0) {
      window_ = ReplayWindow{opt_.replay_window, false, "configured replay_window"};
    }
    WALRELAY_RETURN_IF_ERROR(CheckInboxRetention(opt_.inbox_retention, window_));
    spdlog::info("inbox: retention {} ms > replay window {} ms ({})", opt_.inbox_retention.count(),
                 window_->window.count(), window_->source);
  }

  kafka::ProducerOptions popt;
  popt.properties.emplace_back("bootstrap.servers", opt_.bootstrap_servers);
  for (const auto& [k, v] : opt_.properties) {
    if (k.starts_with("security.") || k.starts_with("sasl.") || k.starts_with("ssl.")) {
      popt.properties.emplace_back(k, v);
    }
  }
  popt.properties.emplace_back("linger.ms", "0");
  popt.properties.emplace_back("message.timeout.ms",
                               std::to_string(opt_.dead_letter_timeout.count()));
  auto producer = kafka::Producer::Create(
      std::move(popt), [this](uint64_t, const Status& st, const kafka::DeliveredRecord&) {
        dlq_result_ = st;  // runs under dlq_mu_ inside Flush()
      });
  if (!producer.ok()) return producer.status().WithContext("inbox: dead-letter producer");
  dlq_ = std::move(producer).value();

  // Fail early on an unreachable database (kUnavailable).
  std::atomic<bool> no_stop{false};
  WALRELAY_ASSIGN_OR_RETURN(PGconn * c, pool_.Acquire(no_stop));
  pool_.Release(c);
  return Status::Ok();
}

Status InboxConsumer::Impl::EnsureSchema() {
  std::atomic<bool> no_stop{false};
  WALRELAY_ASSIGN_OR_RETURN(PGconn * c, pool_.Acquire(no_stop));
  Lease lease(pool_, c);
  slot::PgFault fault;
  Status st = pg::Command(c, kSchema, "inbox: create schema", &fault);
  if (!st.ok()) pg::Rollback(c);
  return st;
}

void InboxConsumer::Impl::RebalanceCb(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                      rd_kafka_topic_partition_list_t* parts, void* opaque) {
  auto* self = static_cast<Impl*>(opaque);
  const bool cooperative = std::strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    // Split the partition queues before assigning, so no message reaches the consumer queue.
    self->StartWorkers(parts);
    if (cooperative) {
      if (rd_kafka_error_t* e = rd_kafka_incremental_assign(rk, parts)) {
        spdlog::error("inbox: incremental assign: {}", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
      }
    } else if (rd_kafka_resp_err_t e = rd_kafka_assign(rk, parts);
               e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      spdlog::error("inbox: assign: {}", rd_kafka_err2str(e));
    }
    spdlog::info("inbox: assigned {} partition(s)", parts->cnt);
    return;
  }
  // Revoke (or a rebalance error): finish the in-flight messages, commit what is stored.
  self->StopWorkers(cooperative ? parts : nullptr);
  if (!rd_kafka_assignment_lost(rk)) {
    rd_kafka_resp_err_t e = rd_kafka_commit(rk, nullptr, 0);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR__NO_OFFSET) {
      spdlog::warn("inbox: offset commit on revoke: {} (redelivery will be deduplicated)",
                   rd_kafka_err2str(e));
    }
  }
  if (cooperative) {
    if (rd_kafka_error_t* e = rd_kafka_incremental_unassign(rk, parts)) rd_kafka_error_destroy(e);
  } else {
    rd_kafka_assign(rk, nullptr);
  }
  spdlog::info("inbox: revoked {} partition(s)", parts->cnt);
}

void InboxConsumer::Impl::StartWorkers(const rd_kafka_topic_partition_list_t* parts) {
  for (int i = 0; i < parts->cnt; ++i) {
    const auto& tp = parts->elems[i];
    auto key = std::make_pair(std::string(tp.topic), tp.partition);
    if (workers_.count(key) != 0) continue;
    auto w = std::make_unique<PartitionWorker>();
    w->topic = tp.topic;
    w->partition = tp.partition;
    w->queue = rd_kafka_queue_get_partition(rk_, tp.topic, tp.partition);
    rd_kafka_queue_forward(w->queue, nullptr);
    PartitionWorker* raw = w.get();
    w->thread = std::thread([this, raw] { WorkerLoop(raw); });
    workers_.emplace(std::move(key), std::move(w));
  }
}

void InboxConsumer::Impl::StopWorkers(const rd_kafka_topic_partition_list_t* parts) {
  std::vector<std::unique_ptr<PartitionWorker>> stopping;
  if (parts == nullptr) {
    for (auto& [k, w] : workers_) stopping.push_back(std::move(w));
    workers_.clear();
  } else {
    for (int i = 0; i < parts->cnt; ++i) {
      auto it = workers_.find({std::string(parts->elems[i].topic), parts->elems[i].partition});
      if (it == workers_.end()) continue;
      stopping.push_back(std::move(it->second));
      workers_.erase(it);
    }
  }
  for (auto& w : stopping) w->stop = true;
  for (auto& w : stopping) {
    if (w->thread.joinable()) w->thread.join();
    if (w->queue != nullptr) rd_kafka_queue_destroy(w->queue);
  }
}

void InboxConsumer::Impl::WorkerLoop(PartitionWorker* w) {
  while (!w->stop.load()) {
    rd_kafka_message_t* m = rd_kafka_consume_queue(w->queue, 100);
    if (m == nullptr) continue;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        spdlog::warn("inbox: {} [{}]: {}", w->topic, w->partition, rd_kafka_message_errstr(m));
      }
      rd_kafka_message_destroy(m);
      continue;
    }
    Result<Outcome> r = Process(m, w->stop);
    if (r.ok()) {
      // Only now, after the database commit, may the offset become committable.
      rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
      rd_kafka_topic_partition_list_add(list, w->topic.c_str(), w->partition)->offset =
          m->offset + 1;
      rd_kafka_resp_err_t e = rd_kafka_offsets_store(rk_, list);
      if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        spdlog::warn("inbox: store offset {} [{}] {}: {} (a redelivery will be deduplicated)",
                     w->topic, w->partition, m->offset, rd_kafka_err2str(e));
      }
      rd_kafka_topic_partition_list_destroy(list);
    }
    rd_kafka_message_destroy(m);
    if (!r.ok()) {
      // kCancelled only when a stop was requested: the message is redelivered later. Any
      // other error stops the whole consumer (Process decided no message can succeed).
      if (r.status().code() != StatusCode::kCancelled) Fail(r.status());
      break;
    }
  }
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

Result<Outcome> InboxConsumer::Impl::DeadLetterOnce(const InboxMessage& msg,
                                                    const std::string& reason,
                                                    const std::atomic<bool>& stop, Next* next) {
  *next = Next::kRetry;
  WALRELAY_ASSIGN_OR_RETURN(PGconn * c, pool_.Acquire(stop));
  Lease lease(pool_, c);
  slot::PgFault fault = slot::PgFault::kTransient;
  auto fail = [&](Status st, slot::PgFault f) {
    pg::Rollback(c);
    *next = FromFault(f);
    return st;
  };
  if (Status st = pg::Command(c, "BEGIN", "inbox: BEGIN", &fault); !st.ok()) return fail(st, fault);
  const std::string partition = std::to_string(msg.partition);
  const std::string offset = std::to_string(msg.offset);
  if (!msg.event_id.empty()) {
    // The inbox row records the decision, so a redelivery is a duplicate, not a second
    // dead letter.
    const pg::RawParam params[] = {{opt_.consumer_name}, {msg.event_id}};
    Result<pg::ResultPtr> ins = pg::Exec(c, kInsertInbox, params, "inbox: insert", &fault);
    if (!ins.ok()) return fail(ins.status(), fault);
    if (std::strcmp(PQcmdTuples(ins->get()), "0") == 0) {
      if (Status st = pg::Commit(c, &fault); !st.ok()) return fail(st, fault);
      return Outcome::kDuplicate;
    }
  } else {
    // No usable event id: the dead-letter row itself records the decision. Processes
    // racing on the same record serialise on an advisory lock of its source position;
    // the same position with the same key and value is this message again.
    const std::string lock_key =
        opt_.consumer_name + "/" + std::string(msg.topic) + "/" + partition + "/" + offset;
    const pg::RawParam lock_params[] = {{lock_key}};
    Result<pg::ResultPtr> lock =
        pg::Exec(c, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", lock_params,
                 "inbox: lock dead-letter position", &fault);
    if (!lock.ok()) return fail(lock.status(), fault);
    const pg::RawParam find_params[] = {{opt_.consumer_name}, {msg.topic},
                                        {partition},          {offset},
                                        {msg.key, true},      {msg.value, true}};
    Result<pg::ResultPtr> found =
        pg::Exec(c,
                 "SELECT 1 FROM inbox_dead_letter WHERE consumer = $1 AND topic = $2 AND "
                 "\"partition\" = $3 AND \"offset\" = $4 AND key IS NOT DISTINCT FROM $5 AND "
                 "value IS NOT DISTINCT FROM $6 LIMIT 1",
                 find_params, "inbox: find dead letter", &fault);
    if (!found.ok()) return fail(found.status(), fault);
    if (PQntuples(found->get()) > 0) {
      if (Status st = pg::Commit(c, &fault); !st.ok()) return fail(st, fault);
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
  Result<pg::ResultPtr> ins = pg::Exec(
      c,
      "INSERT INTO inbox_dead_letter (consumer, message_id, topic, \"partition\", \"offset\", "
      "key, value, headers, reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9)",
      params, "inbox: insert dead letter", &fault);
  if (!ins.ok()) return fail(ins.status(), fault);
  // The topic record is acked before the row commits: a failure in between repeats the
  // topic record (at least once), never loses both.
  if (Status st = ProduceDeadLetter(msg, reason); !st.ok()) {
    return fail(st, slot::PgFault::kTransient);
  }
  if (Status st = pg::Commit(c, &fault); !st.ok()) return fail(st, fault);
  AfterCommit();
  spdlog::warn("inbox: dead-lettered {} [{}] @{} to {}: {}", msg.topic, msg.partition, msg.offset,
               opt_.dead_letter_topic, reason);
  return Outcome::kDeadLettered;
}

Status InboxConsumer::Impl::ProduceDeadLetter(const InboxMessage& msg, const std::string& reason) {
  std::lock_guard lock(dlq_mu_);
  const std::string partition = std::to_string(msg.partition);
  const std::string offset = std::to_string(msg.offset);
  std::vector<kafka::Header> headers;
  for (const auto& [n, v] : msg.headers) headers.push_back({n, v});
  headers.push_back({"walrelay.dlq.reason", reason});
  headers.push_back({"walrelay.dlq.consumer", opt_.consumer_name});
  headers.push_back({"walrelay.dlq.source_topic", msg.topic});
  headers.push_back({"walrelay.dlq.source_partition", partition});
  headers.push_back({"walrelay.dlq.source_offset", offset});
  dlq_result_ = UnavailableError("dead letter not acknowledged");
  Status st = dlq_->Produce(opt_.dead_letter_topic, msg.key, msg.value, headers, 0);
  if (st.ok()) st = dlq_->Flush(opt_.dead_letter_timeout + 5s);
  if (st.ok()) st = dlq_result_;
  if (!st.ok()) {
    // Whatever the producer says, retrying is the only way that loses nothing.
    return UnavailableError("dead-letter topic " + opt_.dead_letter_topic + ": " + st.ToString());
  }
  return Status::Ok();
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

Status InboxConsumer::Impl::Run() {
  if (rk_ == nullptr || closed_) return FailedPreconditionError("inbox: Run() called twice");
  rd_kafka_topic_partition_list_t* topics =
      rd_kafka_topic_partition_list_new(static_cast<int>(opt_.topics.size()));
  for (const auto& t : opt_.topics) {
    rd_kafka_topic_partition_list_add(topics, t.c_str(), RD_KAFKA_PARTITION_UA);
  }
  rd_kafka_resp_err_t e = rd_kafka_subscribe(rk_, topics);
  rd_kafka_topic_partition_list_destroy(topics);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return InvalidArgumentError(std::string("inbox: subscribe: ") + rd_kafka_err2str(e));
  }
  std::thread retention;
  if (opt_.inbox_retention.count() != 0) retention = std::thread([this] { RetentionLoop(); });

  Status result;
  while (!stop_.load()) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
      char reason[512];
      rd_kafka_fatal_error(rk_, reason, sizeof(reason));
      result = InternalError(std::string("inbox: fatal consumer error: ") + reason);
      rd_kafka_message_destroy(m);
      break;
    }
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      spdlog::warn("inbox: consumer: {}", rd_kafka_message_errstr(m));
    } else {
      // Every assigned partition's queue is split off before assign; a message here means
      // that broke. Not storing its offset keeps it for a redelivery.
      result = InternalError("inbox: a message reached the consumer queue, partition " +
                             std::to_string(m->partition) + " was not split");
      rd_kafka_message_destroy(m);
      break;
    }
    rd_kafka_message_destroy(m);
  }
  Stop();
  if (result.ok()) {
    std::lock_guard lock(fatal_mu_);
    result = fatal_;
  }
  // Close: the revoke callback stops the workers and commits stored offsets; then we
  // leave the group.
  rd_kafka_consumer_close(rk_);
  closed_ = true;
  StopWorkers(nullptr);
  if (retention.joinable()) retention.join();
  return result;
}

void InboxConsumer::Impl::RetentionLoop() {
  for (;;) {
    {
      std::unique_lock lock(retention_mu_);
      retention_cv_.wait_for(lock, opt_.retention_interval, [this] { return stop_.load(); });
    }
    if (stop_.load()) return;
    Result<int64_t> n = RunRetentionOnce();
    if (!n.ok()) spdlog::warn("inbox: retention: {}", n.status().ToString());
  }
}

Result<int64_t> InboxConsumer::Impl::RunRetentionOnce() {
  if (opt_.inbox_retention.count() == 0) return int64_t{0};
  WALRELAY_ASSIGN_OR_RETURN(PGconn * c, pg::Connect(opt_.conninfo));
  std::unique_ptr<PGconn, decltype(&PQfinish)> conn(c, &PQfinish);
  const std::string secs =
      std::to_string(static_cast<double>(opt_.inbox_retention.count()) / 1000.0);
  const std::string batch = std::to_string(opt_.retention_batch);
  const pg::RawParam params[] = {{opt_.consumer_name}, {secs}, {batch}};
  int64_t total = 0;
  for (;;) {
    // Each batch is its own short transaction: no long lock, no huge WAL burst.
    slot::PgFault fault;
    WALRELAY_ASSIGN_OR_RETURN(
        pg::ResultPtr res,
        pg::Exec(c,
                 "DELETE FROM inbox WHERE ctid = ANY(ARRAY(SELECT ctid FROM inbox "
                 "WHERE consumer = $1 AND received_at < now() - make_interval(secs => "
                 "$2::double precision) LIMIT $3::int))",
                 params, "inbox: retention delete", &fault));
    const int64_t n = std::strtoll(PQcmdTuples(res.get()), nullptr, 10);
    total += n;
    retention_deleted_ += static_cast<uint64_t>(n);
    if (n < opt_.retention_batch || stop_.load()) break;
  }
  if (total > 0) spdlog::info("inbox: retention deleted {} inbox row(s)", total);
  return total;
}

// ---------------------------------------------------------------------------------------

InboxConsumer::InboxConsumer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InboxConsumer::~InboxConsumer() = default;

Result<std::unique_ptr<InboxConsumer>> InboxConsumer::Create(InboxOptions options,
                                                             Handler handler) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler));
  WALRELAY_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<InboxConsumer>(new InboxConsumer(std::move(impl)));
}

Status InboxConsumer::EnsureSchema() { return impl_->EnsureSchema(); }
Status InboxConsumer::Run() { return impl_->Run(); }
void InboxConsumer::Stop() { impl_->Stop(); }
Result<int64_t> InboxConsumer::RunRetentionOnce() { return impl_->RunRetentionOnce(); }
InboxStats InboxConsumer::stats() const { return impl_->stats(); }
const std::optional<ReplayWindow>& InboxConsumer::replay_window() const { return impl_->window(); }

}  // namespace walrelay::inbox
