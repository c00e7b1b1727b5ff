#include "src/kafka/producer.h"
#include "src/kafka/properties.h"

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>

namespace walrelay::kafka {

static_assert(sizeof(void*) >= sizeof(uint64_t), "cookies travel in the message opaque");

// librdkafka's C callbacks; `opaque` is the Producer (rd_kafka_conf_set_opaque).
struct ProducerCallbacks {
  static void Delivery(rd_kafka_t* /*rk*/, const rd_kafka_message_t* message, void* opaque) {
    static_cast<Producer*>(opaque)->HandleDelivery(message);
  }
  static void Error(rd_kafka_t* /*rk*/, int err, const char* reason, void* opaque) {
    static_cast<Producer*>(opaque)->HandleError(err, reason);
  }
};

namespace {

// The most produce requests per broker connection a user may allow (the idempotent
// producer keeps per-key order up to 5).
constexpr int kMaxInFlight = 5;
// The default, 1: measured against Apache Kafka 4.1.1 (3 brokers, acks=all, acks taking
// 10-100 ms on a 2-core machine), librdkafka 2.0.2's broker threads busy-loop (poll with
// a zero timeout, clock reads, locks) while a partition's next batch waits behind an
// in-flight request, whenever more than one request may be in flight: at 2,000 single-row
// transactions/s `walrelay run` used 5.9 s of CPU per 8 s with 5 and 0.9 s with 1, and a
// 200,000-event drain took 5.8 s and 1.8 s of CPU with 5, 4.5 s and 0.85 s with 1
// (bench/README.md, "librdkafka's in-flight limit"). Against the dev broker, whose acks
// are immediate, both drain alike.
constexpr int kDefaultInFlight = 1;

std::string GetProperty(const rd_kafka_conf_t* conf, const char* name) {
  char buf[1024];
  size_t size = sizeof(buf);
  if (rd_kafka_conf_get(conf, name, buf, &size) != RD_KAFKA_CONF_OK) return {};
  return std::string(buf);
}

// Rejects user properties that would weaken the delivery guarantees the relay relies on.
Status CheckEnforced(const std::string& name, const std::string& value) {
  if (name == "enable.idempotence" && value != "true") {
    return InvalidArgumentError("kafka property enable.idempotence must stay true");
  }
  if ((name == "acks" || name == "request.required.acks") && value != "all" && value != "-1") {
    return InvalidArgumentError(fmt::format("kafka property {} must be all (-1)", name));
  }
  if (name == "max.in.flight.requests.per.connection" || name == "max.in.flight") {
    int n = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || ptr != value.data() + value.size() || n < 1 || n > kMaxInFlight) {
      return InvalidArgumentError(fmt::format(
          "kafka property {} must be 1..{} (per-key order with idempotence)", name, kMaxInFlight));
    }
  }
  if (name == "partitioner" && value != "murmur2_random") {
    return InvalidArgumentError(fmt::format(
        "kafka property partitioner={} is not allowed: walrelay partitions keys as the Java "
        "client does (murmur2_random), so an aggregate's events land in the partition Java "
        "producers and consumers (and a Debezium connector before) expect",
        value));
  }
  if ((name == "message.timeout.ms" || name == "delivery.timeout.ms") && value != "0") {
    return InvalidArgumentError(fmt::format(
        "kafka property {}={} is not allowed: walrelay never lets a record time out (it must "
        "stay 0), because librdkafka would then deliver later records of the same partition "
        "before the timed-out one; the slot holds the data while Kafka is away",
        name, value));
  }
  if (name == "transactional.id") {
    return InvalidArgumentError(
        "kafka property transactional.id is not set as a property: exactly-once mode sets it "
        "(ProducerOptions::transactional_id)");
  }
  return Status::Ok();
}

std::string KafkaErrorText(rd_kafka_resp_err_t err) {
  return fmt::format("{} ({})", rd_kafka_err2str(err), rd_kafka_err2name(err));
}

// Errors with which a broker refuses a whole record batch (every record in it fails).
bool IsBatchRefusal(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
         err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE || err == RD_KAFKA_RESP_ERR_INVALID_RECORD;
}

// The bytes of key, value and headers: a lower bound of the record's encoded size.
int64_t RecordBytes(const rd_kafka_message_t* message) {
  int64_t n = static_cast<int64_t>(message->key_len + message->len);
  rd_kafka_headers_t* headers = nullptr;
  // rd_kafka_message_headers wants a non-const message but only reads it.
  if (rd_kafka_message_headers(message, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name = nullptr;
    const void* value = nullptr;
    size_t size = 0;
    for (size_t i = 0;
         rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      n += static_cast<int64_t>(std::strlen(name) + size);
    }
  }
  return n;
}

}  // namespace

StatusCode StatusCodeForKafkaError(int code) {
  switch (static_cast<rd_kafka_resp_err_t>(code)) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
      return StatusCode::kOk;
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
      return StatusCode::kInvalidArgument;
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
      return StatusCode::kNotFound;
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
    case RD_KAFKA_RESP_ERR__DESTROY:
      return StatusCode::kCancelled;
    case RD_KAFKA_RESP_ERR__QUEUE_FULL:
      return StatusCode::kResourceExhausted;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
      return StatusCode::kPermissionDenied;
    case RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION:
      return StatusCode::kFailedPrecondition;
    // The idempotence guarantee is broken: only a restart from the slot position is safe.
    case RD_KAFKA_RESP_ERR__FATAL:
    case RD_KAFKA_RESP_ERR__INCONSISTENT:
    case RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE:
    case RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER:
    case RD_KAFKA_RESP_ERR_DUPLICATE_SEQUENCE_NUMBER:
    case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH:
    case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_ID_MAPPING:
    case RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID:
    case RD_KAFKA_RESP_ERR_PRODUCER_FENCED:
      return StatusCode::kInternal;
    default:
      // Timeouts, transport errors, leader changes, not enough replicas, ...: transient.
      return StatusCode::kUnavailable;
  }
}

Producer::Producer(DeliveryCallback on_delivery, const ProducerOptions& options)
    : on_delivery_(std::move(on_delivery)),
      on_client_error_(options.on_client_error),
      transport_errors_(options.transport_errors),
      queue_full_timeout_(options.queue_full_timeout),
      stop_on_failure_(options.stop_on_failure),
      transactional_(!options.transactional_id.empty()),
      transactional_id_(options.transactional_id) {}

Result<std::unique_ptr<Producer>> Producer::Create(ProducerOptions options,
                                                   DeliveryCallback on_delivery) {
  if (!on_delivery) return InvalidArgumentError("kafka producer needs a delivery callback");
  std::unique_ptr<Producer> producer(new Producer(std::move(on_delivery), options));

  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto configure = [&]() -> Status {
    WALRELAY_RETURN_IF_ERROR(SetProperty(conf, "linger.ms", "5"));
    WALRELAY_RETURN_IF_ERROR(SetProperty(conf, "partitioner", "murmur2_random"));
    WALRELAY_RETURN_IF_ERROR(
        SetProperty(conf, "max.in.flight.requests.per.connection", std::to_string(kDefaultInFlight)));
    for (const auto& [name, value] : options.properties) {
      WALRELAY_RETURN_IF_ERROR(CheckEnforced(name, value));
      WALRELAY_RETURN_IF_ERROR(SetProperty(conf, name, value));
    }
    WALRELAY_RETURN_IF_ERROR(SetProperty(conf, "enable.idempotence", "true"));
    WALRELAY_RETURN_IF_ERROR(SetProperty(conf, "acks", "all"));
    if (options.message_timeout.count() < 0) {
      return InvalidArgumentError("kafka producer: message_timeout must be >= 0");
    }
    if (!options.transactional_id.empty()) {
      if (options.message_timeout.count() != 0) {
        return InvalidArgumentError(
            "kafka producer: a transactional producer's records time out with their "
            "transaction (transaction.timeout.ms); message_timeout must stay 0");
      }
      // message.timeout.ms is left to librdkafka, which sets it to transaction.timeout.ms.
      WALRELAY_RETURN_IF_ERROR(SetProperty(conf, "transactional.id", options.transactional_id));
    } else {
      WALRELAY_RETURN_IF_ERROR(SetProperty(conf, "message.timeout.ms",
                                           std::to_string(options.message_timeout.count())));
    }
    if (GetProperty(conf, "bootstrap.servers").empty()) {
      return InvalidArgumentError("kafka property bootstrap.servers is required");
    }
    return Status::Ok();
  };
  if (Status st = configure(); !st.ok()) {
    rd_kafka_conf_destroy(conf);
    return st;
  }
  std::string max_bytes = GetProperty(conf, "message.max.bytes");
  producer->max_message_bytes_ = std::strtoll(max_bytes.c_str(), nullptr, 10);
  const int64_t batch_size = std::strtoll(GetProperty(conf, "batch.size").c_str(), nullptr, 10);
  producer->batch_limit_ = batch_size > 0 ? std::min(batch_size, producer->max_message_bytes_)
                                          : producer->max_message_bytes_;

  rd_kafka_conf_set_opaque(conf, producer.get());
  rd_kafka_conf_set_dr_msg_cb(conf, &ProducerCallbacks::Delivery);
  rd_kafka_conf_set_error_cb(conf, &ProducerCallbacks::Error);
  rd_kafka_conf_set_log_cb(conf, &LogLibrdkafka);

  char errstr[512];
  // On success rd_kafka_new takes ownership of conf; on failure it stays ours.
  producer->rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  if (producer->rk_ == nullptr) {
    rd_kafka_conf_destroy(conf);
    return InvalidArgumentError(fmt::format("kafka producer: {}", errstr));
  }
  // librdkafka writes the 8-byte payload to the eventfd whenever its main queue (delivery
  // reports, errors) goes from empty to non-empty.
  producer->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (producer->wake_fd_ >= 0) {
    static const uint64_t kOne = 1;
    rd_kafka_queue_t* main_queue = rd_kafka_queue_get_main(producer->rk_);
    rd_kafka_queue_io_event_enable(main_queue, producer->wake_fd_, &kOne, sizeof kOne);
    rd_kafka_queue_destroy(main_queue);
  }
  return producer;
}

Producer::~Producer() {
  if (rk_ == nullptr) return;
  rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  for (auto& [name, rkt] : topics_) rd_kafka_topic_destroy(rkt);
  rd_kafka_destroy(rk_);
  if (wake_fd_ >= 0) ::close(wake_fd_);  // after librdkafka's last write to it
}

Result<rd_kafka_topic_t*> Producer::Topic(std::string_view name) {
  if (auto it = topics_.find(name); it != topics_.end()) return it->second;
  std::string owned(name);
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk_, owned.c_str(), nullptr);
  if (rkt == nullptr) {
    return InvalidArgumentError(
        fmt::format("kafka topic '{}': {}", owned, KafkaErrorText(rd_kafka_last_error())));
  }
  topics_.emplace(std::move(owned), rkt);
  return rkt;
}

Status Producer::Produce(std::string_view topic, std::string_view key, std::string_view value,
                         std::span<const Header> headers, uint64_t cookie, int64_t timestamp_ms) {
  CheckFatal();
  if (!stopped_.ok()) return StoppedError();
  WALRELAY_ASSIGN_OR_RETURN(rd_kafka_topic_t * rkt, Topic(topic));

  size_t header_bytes = 0;
  rd_kafka_headers_t* hdrs = nullptr;
  if (!headers.empty()) {
    hdrs = rd_kafka_headers_new(headers.size());
    for (const Header& h : headers) {
      header_bytes += h.name.size() + h.value.size();
      rd_kafka_header_add(hdrs, h.name.data(), static_cast<ssize_t>(h.name.size()), h.value.data(),
                          static_cast<ssize_t>(h.value.size()));
    }
  }

  // The clock is read only once the queue is full (not per record).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  rd_kafka_resp_err_t err;
  for (;;) {
    // Ownership of hdrs passes to librdkafka only when producev succeeds.
    err = rd_kafka_producev(
        rk_, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_KEY(key.empty() ? nullptr : const_cast<char*>(key.data()), key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()), RD_KAFKA_V_HEADERS(hdrs),
        RD_KAFKA_V_TIMESTAMP(timestamp_ms),
        RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(static_cast<uintptr_t>(cookie))), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) break;
    const auto now = std::chrono::steady_clock::now();
    if (!deadline) deadline = now + queue_full_timeout_;
    if (now >= *deadline) break;
    // Make room: serve delivery reports while librdkafka drains the queue.
    auto wait = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - now),
                         std::chrono::milliseconds(100));
    rd_kafka_poll(rk_, static_cast<int>(wait.count()) + 1);
    CheckFatal();
    if (!stopped_.ok()) break;
  }
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return Status::Ok();
  if (hdrs != nullptr) rd_kafka_headers_destroy(hdrs);
  if (!stopped_.ok()) return StoppedError();

  switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
      return InvalidArgumentError(fmt::format(
          "record too large for topic {}: {} bytes (key {}, value {}, headers {}) over the "
          "producer limit message.max.bytes={}",
          topic, key.size() + value.size() + header_bytes, key.size(), value.size(), header_bytes,
          max_message_bytes_));
    case RD_KAFKA_RESP_ERR__QUEUE_FULL:
      return ResourceExhaustedError(
          fmt::format("kafka producer queue still full after {} ms ({} queued)",
                      queue_full_timeout_.count(), rd_kafka_outq_len(rk_)));
    case RD_KAFKA_RESP_ERR__FATAL:
      CheckFatal();
      return StoppedError();
    default:
      return Status(StatusCodeForKafkaError(err),
                    fmt::format("kafka produce to {}: {}", topic, KafkaErrorText(err)));
  }
}

bool Producer::BrokerReached() {
  if (!broker_reached_) broker_reached_ = rd_kafka_controllerid(rk_, 0) >= 0;
  return broker_reached_;
}

Status Producer::CheckTopic(std::string_view topic, std::chrono::milliseconds timeout) {
  WALRELAY_ASSIGN_OR_RETURN(rd_kafka_topic_t * rkt, Topic(topic));
  const rd_kafka_metadata_t* metadata = nullptr;
  rd_kafka_resp_err_t err =
      rd_kafka_metadata(rk_, 0, rkt, &metadata, static_cast<int>(timeout.count()));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return UnavailableError(
        fmt::format("kafka metadata for topic {}: {}", topic, KafkaErrorText(err)));
  }
  err = metadata->topic_cnt > 0 ? metadata->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
  rd_kafka_metadata_destroy(metadata);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return Status::Ok();
  const StatusCode code = StatusCodeForKafkaError(err);
  return Status(code == StatusCode::kNotFound || code == StatusCode::kPermissionDenied
                    ? code
                    : StatusCode::kUnavailable,
                fmt::format("kafka topic {}: {}", topic, KafkaErrorText(err)));
}

int32_t DeliveredRecord::partition() const { return message_->partition; }

std::string_view DeliveredRecord::topic() const {
  return message_->rkt != nullptr ? std::string_view(rd_kafka_topic_name(message_->rkt))
                                  : std::string_view();
}

std::string_view DeliveredRecord::key() const {
  return {static_cast<const char*>(message_->key), message_->key_len};
}

std::string_view DeliveredRecord::value() const {
  return {static_cast<const char*>(message_->payload), message_->len};
}

bool DeliveredRecord::topic_error() const {
  return message_->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
         message_->err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
         message_->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED;
}

int64_t DeliveredRecord::latency_us() const { return rd_kafka_message_latency(message_); }

std::string_view DeliveredRecord::Header(std::string_view name) const {
  rd_kafka_headers_t* headers = nullptr;
  if (rd_kafka_message_headers(message_, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return {};
  const void* value = nullptr;
  size_t size = 0;
  const std::string n(name);
  if (rd_kafka_header_get_last(headers, n.c_str(), &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      value == nullptr) {
    return {};
  }
  return {static_cast<const char*>(value), size};
}

void Producer::HandleDelivery(const rd_kafka_message_t* message) {
  const auto cookie = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(message->_private));
  if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    on_delivery_(cookie, Status::Ok(), DeliveredRecord(message));
    return;
  }
  // A fatal error makes librdkafka fail or purge what is queued before the error event is
  // served: learn of it first, so that these reports carry it.
  CheckFatal(/*serve_purged=*/false);
  const char* topic = message->rkt != nullptr ? rd_kafka_topic_name(message->rkt) : "?";
  const std::string where = fmt::format("kafka delivery to {} [{}]", topic, message->partition);
  const bool purged = message->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE ||
                      message->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
  Status status;
  if (purged && !stopped_.ok()) {
    // Purged because the producer stopped: the report names the cause. A fatal error keeps
    // its code (the record was not refused; a new producer sends it again).
    status =
        fatal_.ok()
            ? CancelledError(fmt::format("{} not confirmed: purged after an earlier failure ({})",
                                         where, stopped_.message()))
            : Status(fatal_.code(), where + " not confirmed: " + fatal_.message());
  } else if (!fatal_.ok()) {
    status = Status(fatal_.code(), where + " failed: " + fatal_.message());
  } else if (IsBatchRefusal(message->err)) {
    // The broker fails every record of a refused batch. A record that reaches the batch
    // limit travelled alone, so the refusal is about it; any other may be innocent.
    const int64_t bytes = RecordBytes(message);
    if (bytes >= batch_limit_) {
      status = InvalidArgumentError(
          fmt::format("{} failed: the broker refused the record itself ({} bytes of key, value and "
                      "headers, alone in its batch; batch limit {}): {}",
                      where, bytes, batch_limit_, KafkaErrorText(message->err)));
    } else {
      if (refused_batch_limit_ == 0) refused_batch_limit_ = batch_limit_;
      status = UnavailableError(fmt::format(
          "{} failed: the broker refused the batch this {}-byte record travelled in ({}), not "
          "necessarily the record: it is produced again in smaller batches (batch limit was "
          "{})",
          where, bytes, KafkaErrorText(message->err), batch_limit_));
    }
  } else {
    status = Status(StatusCodeForKafkaError(message->err),
                    fmt::format("{} failed: {}", where, KafkaErrorText(message->err)));
  }
  // Stop before handing the report on: nothing queued behind the failed record may land
  // after it. A record refused for itself is the caller's to dead-letter; it stops nothing.
  // Nor does a record its topic refused (the topic is missing, or Write is denied): every
  // record of that topic is refused alike, and the caller decides (StopAfter) whether to
  // retry it, which needs the stop, or to dead-letter it, which does not.
  const DeliveredRecord delivered(message);
  if (stop_on_failure_ && stopped_.ok() && status.code() != StatusCode::kInvalidArgument &&
      status.code() != StatusCode::kCancelled && !delivered.topic_error()) {
    Stop(status, /*serve_purged=*/false);
  }
  on_delivery_(cookie, status, delivered);
}

namespace {

// What an authentication failure of SCRAM may mean beyond a wrong password.
std::string ScramOnKafka4Hint(std::string_view reason) {
  // librdkafka before 2.6.1 repeats the client nonce in SCRAM's client-final message
  // (confluentinc/librdkafka#4895); Apache Kafka 4 checks the nonce as RFC 5802 says and
  // refuses the proof, with the same words a wrong password gets.
  if (reason.find("SCRAM") == std::string_view::npos || rd_kafka_version() >= 0x020601ff) {
    return "";
  }
  return fmt::format(
      ". If the brokers run Apache Kafka 4.0 or newer and the password is right: librdkafka "
      "{} (the one walrelay links) computes a SCRAM proof that Kafka 4 refuses (librdkafka "
      "bug #4895, fixed in 2.6.1); use SASL/PLAIN over TLS or mutual TLS with these brokers "
      "(docs/operations.md, section 12)",
      rd_kafka_version_str());
}

}  // namespace

void Producer::StopAfter(const Status& why) {
  if (stopped_.ok()) Stop(why, /*serve_purged=*/false);
}

void Producer::HandleError(int err, const char* reason) {
  if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION || err == RD_KAFKA_RESP_ERR__SSL ||
      err == RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED) {
    const bool tls = err == RD_KAFKA_RESP_ERR__SSL;
    Status st(tls ? StatusCode::kFailedPrecondition : StatusCode::kPermissionDenied,
              fmt::format("kafka: {} failed: {}{}", tls ? "TLS" : "authentication",
                          MaskSecrets(reason), tls ? "" : ScramOnKafka4Hint(reason)));
    // librdkafka suppresses identical repeats and backs off reconnecting (up to
    // reconnect.backoff.max.ms), so this is said a few times a minute at most.
    // The caller (on_client_error) says what waiting costs it; the relay's /readyz does.
    spdlog::error("{}. No record can be delivered until this is fixed; records wait, none is "
                  "dropped. Check the {} properties (docs/operations.md, section 12)",
                  st.message(), tls ? "ssl.*" : "security.protocol and sasl.*");
    if (on_client_error_) on_client_error_(st);
    return;
  }
  if (err == RD_KAFKA_RESP_ERR__TRANSPORT && transport_errors_ != nullptr) {
    transport_errors_->fetch_add(1, std::memory_order_relaxed);
  }
  if (err == RD_KAFKA_RESP_ERR__FATAL) {
    spdlog::error("kafka producer fatal error reported: {}", reason);
  } else if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
    spdlog::warn("kafka producer: {}", reason);
  } else {
    // Transient; librdkafka retries and its log callback has reported it already.
    spdlog::debug("kafka producer: {}: {}",
                  rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)), reason);
  }
}

void Producer::CheckFatal(bool serve_purged) {
  if (!fatal_.ok()) return;
  char reason[512];
  rd_kafka_resp_err_t err = rd_kafka_fatal_error(rk_, reason, sizeof(reason));
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return;
  if (transactional_ && (err == RD_KAFKA_RESP_ERR__FENCED ||
                         err == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
                         err == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH)) {
    fenced_ = true;
    fatal_ = FailedPreconditionError(fmt::format(
        "kafka producer fenced: another producer with transactional.id {} initialised after "
        "this one (a relay that took over the slot); nothing this one produced since its last "
        "committed transaction is visible to read_committed readers, and it can commit nothing "
        "more ({}: {})",
        transactional_id_, rd_kafka_err2name(err), reason));
  } else {
    fatal_ = InternalError(fmt::format(
        "kafka producer fatal error {}: {} (purged; restart needed)", rd_kafka_err2name(err),
        reason));
  }
  spdlog::error("{}", fatal_.message());
  stopped_ = Status::Ok();  // the fatal error supersedes an earlier stop
  Stop(fatal_, serve_purged);
}

Status Producer::StoppedError() const {
  if (!fatal_.ok()) return fatal_;
  return UnavailableError(
      "kafka producer stopped after a failed delivery (a new producer is "
      "needed): " +
      stopped_.message());
}

void Producer::Stop(Status why, bool serve_purged) {
  if (stopped_.ok()) stopped_ = std::move(why);
  if (fatal_.ok()) {
    spdlog::warn("kafka producer stopped, purging what is queued: {}", stopped_.message());
  }
  if (serve_purged) {
    Purge();
  } else {
    // Inside a delivery callback: purge now, serve the purged reports at the next poll.
    rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  }
}

int Producer::Poll(std::chrono::milliseconds timeout) {
  // wake_fd_ is drained by whoever waits on it (wake_fd()), not here: this runs once per
  // turn of the relay's loop, and the fd only needs clearing after it woke someone.
  int served = rd_kafka_poll(rk_, static_cast<int>(timeout.count()));
  CheckFatal();
  return served;
}

Status Producer::Flush(std::chrono::milliseconds timeout) {
  rd_kafka_resp_err_t err = rd_kafka_flush(rk_, static_cast<int>(timeout.count()));
  CheckFatal();
  if (err == RD_KAFKA_RESP_ERR__TIMED_OUT) {
    return DeadlineExceededError(fmt::format("kafka flush: {} still queued after {} ms",
                                             rd_kafka_outq_len(rk_), timeout.count()));
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Status(StatusCodeForKafkaError(err), "kafka flush: " + KafkaErrorText(err));
  }
  return Status::Ok();
}

void Producer::Purge() {
  rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  // A blocking purge has queued the purged records' reports by now; serve them all.
  while (rd_kafka_poll(rk_, 0) > 0) {
  }
}

int Producer::OutQueueLength() const { return rd_kafka_outq_len(rk_); }

Status Producer::TransactionError(void* e, std::string_view what) {
  auto* error = static_cast<rd_kafka_error_t*>(e);
  const rd_kafka_resp_err_t code = rd_kafka_error_code(error);
  const std::string text = fmt::format("kafka {} (transactional.id {}): {} ({})", what,
                                       transactional_id_, rd_kafka_error_string(error),
                                       rd_kafka_error_name(error));
  const bool fatal = rd_kafka_error_is_fatal(error);
  const bool abortable = rd_kafka_error_txn_requires_abort(error);
  const bool retriable = rd_kafka_error_is_retriable(error);
  rd_kafka_error_destroy(error);
  if (fatal) {
    CheckFatal();
    return fatal_.ok() ? InternalError(text) : fatal_;
  }
  if (abortable) {
    abortable_ = true;
    return UnavailableError(text + "; the transaction must be aborted and its records "
                                   "produced again in a new one");
  }
  if (retriable || code == RD_KAFKA_RESP_ERR__TIMED_OUT) return DeadlineExceededError(text);
  if (code == RD_KAFKA_RESP_ERR__STATE || code == RD_KAFKA_RESP_ERR__NOT_CONFIGURED) {
    return FailedPreconditionError(text);
  }
  return UnavailableError(text);
}

Status Producer::InitTransactions(std::chrono::milliseconds timeout) {
  if (!transactional_) return FailedPreconditionError("kafka producer is not transactional");
  CheckFatal();
  if (!fatal_.ok()) return fatal_;
  if (rd_kafka_error_t* e = rd_kafka_init_transactions(rk_, static_cast<int>(timeout.count()))) {
    return TransactionError(e, "init_transactions");
  }
  return Status::Ok();
}

Status Producer::BeginTransaction() {
  if (!transactional_) return FailedPreconditionError("kafka producer is not transactional");
  CheckFatal();
  if (!fatal_.ok()) return fatal_;
  if (rd_kafka_error_t* e = rd_kafka_begin_transaction(rk_)) {
    return TransactionError(e, "begin_transaction");
  }
  in_transaction_ = true;
  abortable_ = false;
  return Status::Ok();
}

Status Producer::CommitTransaction(std::chrono::milliseconds timeout) {
  if (!transactional_) return FailedPreconditionError("kafka producer is not transactional");
  // Flushes first (serving the delivery reports on this thread), then commits.
  if (rd_kafka_error_t* e =
          rd_kafka_commit_transaction(rk_, static_cast<int>(timeout.count()))) {
    return TransactionError(e, "commit_transaction");
  }
  CheckFatal();
  if (!fatal_.ok()) return fatal_;
  in_transaction_ = false;
  return Status::Ok();
}

Status Producer::AbortTransaction(std::chrono::milliseconds timeout) {
  if (!transactional_) return FailedPreconditionError("kafka producer is not transactional");
  // Purges what is queued and in flight; their reports are served at the next Poll().
  if (rd_kafka_error_t* e = rd_kafka_abort_transaction(rk_, static_cast<int>(timeout.count()))) {
    return TransactionError(e, "abort_transaction");
  }
  in_transaction_ = false;
  abortable_ = false;
  return Status::Ok();
}

}  // namespace walrelay::kafka
