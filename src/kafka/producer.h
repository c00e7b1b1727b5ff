// Producer: the relay's Kafka sink, an idempotent librdkafka producer.
//
// Shape (after librdkafka's examples/idempotent_producer.c):
//   - idempotence on, acks=all, at most 5 requests in flight per connection: records with
//     the same key reach the same partition in produce order, also across internal retries;
//   - Produce() enqueues; the outcome of every enqueued record arrives later, exactly once,
//     as a delivery report served by Poll() / Flush() (or by Produce() itself while it
//     waits on a full queue) to the DeliveryCallback, tagged with the caller's cookie;
//   - a full local queue is waited out (serving reports) instead of failing;
//   - on a fatal error (rd_kafka_fatal_error: the idempotence guarantee is broken) the
//     producer purges its queues and stops: every later Produce() fails with fatal(). The
//     relay then restarts from the slot's confirmed_flush_lsn (crash-only recovery).
//
// Error codes (base/status.h) as they leave this file:
//   kInvalidArgument     a bad property, or a record over the size limit (message names the
//                        size and the limit; the relay dead-letters such a record).
//   kNotFound            the topic or partition does not exist.
//   kUnavailable         transient: broker(s) down, timed out, transport error.
//   kResourceExhausted   the local queue stayed full past the wait deadline.
//   kCancelled           the record was purged (Purge(), fatal error) before it was acked.
//   kPermissionDenied    authorization failed.
//   kInternal            a fatal producer error (idempotence/sequence state broken).
//
// Thread safety: not thread-safe. One thread (the relay thread) calls everything, and the
// DeliveryCallback runs on that thread, inside Produce(), Poll(), Flush() or Purge().
// The callback must not call back into the Producer.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

// Opaque librdkafka types (rdkafka.h stays out of this header).
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
struct rd_kafka_message_s;

namespace walrelay::kafka {

// A record header. The views need only live for the duration of Produce().
struct Header {
  std::string_view name;
  std::string_view value;
};

// The record a delivery report is about. Views into librdkafka's message: valid only
// during the DeliveryCallback call.
class DeliveredRecord {
 public:
  explicit DeliveredRecord(const rd_kafka_message_s* message) : message_(message) {}
  std::string_view topic() const;
  std::string_view key() const;
  std::string_view value() const;
  // Microseconds from Produce() to this report, or -1 when unknown.
  int64_t latency_us() const;
  // The first header named `name`, or "" when absent.
  std::string_view Header(std::string_view name) const;

 private:
  const rd_kafka_message_s* message_;
};

// Receives one delivery report per enqueued record: the cookie given to Produce(), OK
// (acked by all in-sync replicas) or the failure, mapped as above, and the record itself
// (so that a record the broker refuses for good can be dead-lettered).
using DeliveryCallback =
    std::function<void(uint64_t cookie, const Status& status, const DeliveredRecord& record)>;

struct ProducerOptions {
  // librdkafka properties (CONFIGURATION.md), applied in order over walrelay's defaults:
  //   linger.ms=5, message.timeout.ms=300000, partitioner=murmur2_random (Java-compatible
  //   key hashing).
  // Enforced: enable.idempotence=true, acks=all (or -1),
  // max.in.flight.requests.per.connection<=5; a conflicting value is kInvalidArgument.
  // bootstrap.servers must be given.
  std::vector<std::pair<std::string, std::string>> properties;
  // How long Produce() serves delivery reports waiting for room in a full local queue.
  std::chrono::milliseconds queue_full_timeout{30'000};
};

class Producer {
 public:
  // Builds the producer. `on_delivery` must be callable until the Producer is destroyed.
  static Result<std::unique_ptr<Producer>> Create(ProducerOptions options,
                                                  DeliveryCallback on_delivery);

  // Purges anything still queued without serving its reports, then destroys the handle.
  // Call Flush() first when the reports matter.
  ~Producer();
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  // Enqueues one record for `topic`, partitioned by the hash of `key` (an empty key is
  // sent as a null key and spread over partitions). The bytes are copied; nothing need
  // outlive the call. On OK exactly one delivery report for `cookie` follows; on error
  // none does. Waits on a full queue up to options.queue_full_timeout (serving reports).
  Status Produce(std::string_view topic, std::string_view key, std::string_view value,
                 std::span<const Header> headers, uint64_t cookie);

  // Serves delivery reports and errors, waiting up to `timeout` for the first one.
  // Returns the number of events served. Detects a fatal error (see fatal()).
  int Poll(std::chrono::milliseconds timeout);

  // Waits until every enqueued record has its delivery report (served to the callback).
  // kDeadlineExceeded when records remain after `timeout`.
  Status Flush(std::chrono::milliseconds timeout);

  // Drops every queued and in-flight record; their reports (kCancelled) are served
  // before this returns. In-flight records may still have reached the broker.
  void Purge();

  // Records enqueued whose delivery report has not been served yet (plus librdkafka's
  // internal requests).
  int OutQueueLength() const;

  // OK until a fatal error was detected; then the fatal error (kInternal), sticky.
  const Status& fatal() const { return fatal_; }

  // The size limit Produce() applies (message.max.bytes), for dead-letter decisions.
  int64_t max_message_bytes() const { return max_message_bytes_; }

  // The librdkafka handle, for metadata queries in tests. Owned by the Producer.
  rd_kafka_t* handle() const { return rk_; }

 private:
  Producer(DeliveryCallback on_delivery, std::chrono::milliseconds queue_full_timeout);

  Result<rd_kafka_topic_t*> Topic(std::string_view name);
  void CheckFatal();

  friend struct ProducerCallbacks;  // librdkafka's C callbacks, in producer.cc
  void HandleDelivery(const rd_kafka_message_s* message);
  void HandleError(int err, const char* reason);

  rd_kafka_t* rk_ = nullptr;
  DeliveryCallback on_delivery_;
  std::chrono::milliseconds queue_full_timeout_;
  int64_t max_message_bytes_ = 0;
  Status fatal_;
  std::map<std::string, rd_kafka_topic_t*, std::less<>> topics_;
};

// Maps a librdkafka error code (rd_kafka_resp_err_t) to a Status code, per the table above.
StatusCode StatusCodeForKafkaError(int err);

}  // namespace walrelay::kafka
