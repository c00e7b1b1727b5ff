// Producer: the relay's Kafka sink, an idempotent librdkafka producer.
//
// Shape (after librdkafka's examples/idempotent_producer.c):
//   - idempotence on, acks=all, at most 5 requests in flight per connection: records with
//     the same key reach the same partition in produce order, also across internal retries;
//   - Produce() enqueues; the outcome of every enqueued record arrives later, exactly once,
//     as a delivery report served by Poll() / Flush() (or by Produce() itself while it
//     waits on a full queue) to the DeliveryCallback, tagged with the caller's cookie;
//   - a full local queue is waited out (serving reports) instead of failing;
//   - records never time out (message.timeout.ms=0, enforced): while the brokers are away
//     records wait, and librdkafka cannot give up on one record and deliver a later one of
//     the same partition first (invariant 9);
//   - the first failed delivery report stops the producer (ProducerOptions::
//     stop_on_failure): everything still queued or in flight is purged at once, before the
//     report is handed on, and every later Produce() fails (see stopped()). A record refused
//     for its own size (kInvalidArgument, see below) does not stop it, nor does one its
//     topic refused (DeliveredRecord::topic_error: the caller stops it, StopAfter, when it
//     retries the record rather than dead-letter it). The relay then
//     restarts from the slot's confirmed_flush_lsn (crash-only recovery);
//   - on a fatal error (rd_kafka_fatal_error: the idempotence guarantee is broken) the
//     producer purges its queues and stops the same way: the purged records report the
//     fatal error (kInternal, never kCancelled) and every later Produce() fails with it.
//   - a batch the broker refuses as a whole (MSG_SIZE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
//     INVALID_RECORD) fails every record in it. Only a record whose own size reaches the
//     batch limit in effect (min(batch.size, message.max.bytes): such a record travels in a
//     batch of its own) is refused for itself (kInvalidArgument: dead-letter it); the
//     others report kUnavailable (produce them again) and refused_batch_limit() tells the
//     caller to use smaller batches next time.
//
// Error codes (base/status.h) as they leave this file:
//   kInvalidArgument     a bad property, or a record over the size limit, or a record the
//                        broker refused in a batch of its own (message names the size and
//                        the limit; the relay dead-letters such a record).
//   kNotFound            the topic or partition does not exist.
//   kUnavailable         transient: broker(s) down, transport error, a record refused only
//                        because of the batch it travelled in.
//   kResourceExhausted   the local queue stayed full past the wait deadline.
//   kCancelled           the record was purged (Purge(), or after the producer stopped on
//                        an earlier failed report; the message names that failure).
//   kPermissionDenied    authorization failed.
//   kInternal            a fatal producer error (idempotence/sequence state broken).
//
// Thread safety: not thread-safe. One thread (the relay thread) calls everything, and the
// DeliveryCallback runs on that thread, inside Produce(), Poll(), Flush() or Purge().
// The callback must not call back into the Producer.
#pragma once

#include <atomic>
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
  int32_t partition() const;  // the partition the record went to (or was meant for)
  std::string_view key() const;
  std::string_view value() const;
  // Microseconds from Produce() to this report, or -1 when unknown.
  int64_t latency_us() const;
  // The first header named `name`, or "" when absent.
  std::string_view Header(std::string_view name) const;
  // True when the record failed for a reason of its topic's own: it does not exist
  // (UNKNOWN_TOPIC_OR_PART, _UNKNOWN_TOPIC) or may not be written
  // (TOPIC_AUTHORIZATION_FAILED).
  bool topic_error() const;

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
  //   linger.ms=5, partitioner=murmur2_random (Java-compatible key hashing),
  //   max.in.flight.requests.per.connection=1 (see producer.cc: with librdkafka 2.0.2's
  //   idempotent producer a higher value makes its broker threads spin while a request
  //   waits for a real cluster's acks=all).
  // Enforced: enable.idempotence=true, acks=all (or -1),
  // max.in.flight.requests.per.connection<=5, message.timeout.ms (delivery.timeout.ms)=0;
  // a conflicting value is kInvalidArgument. bootstrap.servers must be given.
  std::vector<std::pair<std::string, std::string>> properties;
  // How long Produce() serves delivery reports waiting for room in a full local queue.
  std::chrono::milliseconds queue_full_timeout{30'000};
  // 0: records never time out (the relay; invariant 9). A positive value lets librdkafka
  // fail a record after that long: only for a caller that produces one record at a time
  // and waits for it (the inbox's dead-letter producer), where nothing can overtake it.
  std::chrono::milliseconds message_timeout{0};
  // Stop (purge everything, refuse new records) on the first failed delivery report, so
  // that no later record of a partition lands after a failed earlier one. Only a caller
  // that produces one record at a time and retries it may turn this off.
  bool stop_on_failure = true;
  // Called (on the thread that calls Poll) for each failure of the client itself rather
  // than of a record: authentication (SASL) or TLS failing against a broker. These do not
  // heal by retrying, yet librdkafka retries them for ever while records wait (they never
  // time out). kPermissionDenied for authentication, kFailedPrecondition for TLS; the
  // message is librdkafka's reason (it names the broker, never a property's value).
  // Optional.
  std::function<void(const Status&)> on_client_error;
  // Counts the connection failures librdkafka reports (RD_KAFKA_RESP_ERR__TRANSPORT: a
  // broker connection refused, reset, timed out or closed); it reconnects by itself.
  // Optional; must outlive the producer.
  std::atomic<uint64_t>* transport_errors = nullptr;
  // Non-empty: a transactional producer with this transactional.id (exactly-once mode).
  // InitTransactions() must be called once before the first transaction; records may then
  // only be produced between BeginTransaction() and CommitTransaction() or
  // AbortTransaction(), and a read_committed reader sees them only once committed. Records
  // then time out after transaction.timeout.ms (librdkafka's rule; default 60 s), not
  // never: a record that fails makes its transaction abortable, so nothing of it becomes
  // visible and the order of what is visible still holds. message_timeout must stay 0.
  std::string transactional_id;
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
  // `timestamp_ms`: the record's timestamp (CreateTime, ms since the Unix epoch); 0 = now.
  Status Produce(std::string_view topic, std::string_view key, std::string_view value,
                 std::span<const Header> headers, uint64_t cookie, int64_t timestamp_ms = 0);

  // Asks the cluster about `topic` (a metadata request; blocks up to `timeout`, serving no
  // reports). kNotFound when it does not exist, kPermissionDenied when the producer may not
  // use it, kUnavailable when the cluster did not answer or the topic is not ready yet,
  // OK otherwise. (librdkafka fails a record of a missing topic only after
  // topic.metadata.propagation.max.ms, and keeps one of an unauthorized topic queued for
  // ever since records never time out: ask before producing.)
  Status CheckTopic(std::string_view topic, std::chrono::milliseconds timeout);

  // Serves delivery reports and errors, waiting up to `timeout` for the first one.
  // Returns the number of events served. Detects a fatal error (see fatal()).
  int Poll(std::chrono::milliseconds timeout);

  // A descriptor (eventfd) that becomes readable when reports or errors wait for Poll():
  // for a caller that sleeps in its own poll() on other sockets and wants to serve acks
  // at once. librdkafka writes it once per stretch between two Poll()s. The waiter that
  // sees it readable drains it (one 8-byte read) and then calls Poll(); Poll() itself does
  // not read it, so serving reports costs no system call. Left undrained it only stays
  // readable. Owned by the Producer; -1 if it could not be made (then poll on a timeout).
  int wake_fd() const { return wake_fd_; }

  // Waits until every enqueued record has its delivery report (served to the callback).
  // kDeadlineExceeded when records remain after `timeout`.
  Status Flush(std::chrono::milliseconds timeout);

  // Drops every queued and in-flight record; their reports (kCancelled) are served
  // before this returns. In-flight records may still have reached the broker.
  void Purge();

  // Records enqueued whose delivery report has not been served yet (plus librdkafka's
  // internal requests).
  int OutQueueLength() const;

  // OK until a fatal error was detected; then the fatal error (kInternal; for a fenced
  // transactional producer kFailedPrecondition, see fenced()), sticky.
  const Status& fatal() const { return fatal_; }

  // Stops as a failed report does with stop_on_failure (purges what is queued and in
  // flight, refuses new records): for a report the producer does not stop on by itself (a
  // topic's refusal, DeliveredRecord::topic_error) when the caller will retry the record.
  // May be called inside the delivery callback; purged records report at the next poll.
  void StopAfter(const Status& why);

  // OK until the producer stopped (fatal error, or the first failed delivery report with
  // stop_on_failure); then why, sticky. Produce() then fails with the fatal error
  // (kInternal), or kUnavailable naming this failure: either way, a restart is needed.
  const Status& stopped() const { return stopped_; }

  // The batch limit (min(batch.size, message.max.bytes)) in effect when the broker refused
  // a batch of several records, or 0. A new producer should use a smaller batch.size.
  int64_t refused_batch_limit() const { return refused_batch_limit_; }
  // min(batch.size, message.max.bytes) of this producer.
  int64_t batch_limit() const { return batch_limit_; }

  // The size limit Produce() applies (message.max.bytes), for dead-letter decisions.
  int64_t max_message_bytes() const { return max_message_bytes_; }

  // True once a broker of the cluster answered this producer (librdkafka knows the
  // cluster's controller from a Metadata response); sticky. False while every bootstrap
  // address refuses, does not resolve or does not answer: records then wait (they never
  // time out), so the caller says so instead of looking healthy on an idle stream.
  bool BrokerReached();

  // Transactions (ProducerOptions::transactional_id; kFailedPrecondition without one).
  // Each blocks up to `timeout` (a commit also waits for every record's acknowledgement)
  // and serves delivery reports meanwhile. Errors:
  //   kDeadlineExceeded   not done in time; the same call may be made again.
  //   kUnavailable        with transaction_abortable() true: the transaction cannot
  //                       commit (a record failed, a broker refused it); call
  //                       AbortTransaction(), then produce it again in a new one.
  //   kFailedPrecondition with fenced() true: another producer with the same
  //                       transactional.id initialised after this one (a relay that took
  //                       over); nothing this producer did since is visible, and it can do
  //                       nothing more (sticky, as fatal()).
  //   kInternal           another fatal error (fatal()).
  // InitTransactions also completes or aborts what an earlier producer of the same id left
  // open, and fences that producer.
  Status InitTransactions(std::chrono::milliseconds timeout);
  Status BeginTransaction();
  Status CommitTransaction(std::chrono::milliseconds timeout);
  Status AbortTransaction(std::chrono::milliseconds timeout);
  bool transactional() const { return transactional_; }
  bool in_transaction() const { return in_transaction_; }
  // The last transaction call failed in a way that only AbortTransaction() cures.
  bool transaction_abortable() const { return abortable_; }
  // A newer producer with the same transactional.id fenced this one; sticky.
  bool fenced() const { return fenced_; }

  // The librdkafka handle, for metadata queries in tests. Owned by the Producer.
  rd_kafka_t* handle() const { return rk_; }

 private:
  Producer(DeliveryCallback on_delivery, const ProducerOptions& options);

  Result<rd_kafka_topic_t*> Topic(std::string_view name);
  // Detects a fatal error; then stops (see Stop). serve_purged: see Stop.
  void CheckFatal(bool serve_purged = true);
  // Sets stopped_ (first reason wins) and purges everything queued and in flight. Serves
  // the purged reports at once when serve_purged, else (inside a delivery callback) at
  // the next poll.
  void Stop(Status why, bool serve_purged);
  // What Produce() returns once stopped (see stopped()).
  Status StoppedError() const;

  friend struct ProducerCallbacks;  // librdkafka's C callbacks, in producer.cc
  void HandleDelivery(const rd_kafka_message_s* message);
  void HandleError(int err, const char* reason);

  rd_kafka_t* rk_ = nullptr;
  int wake_fd_ = -1;  // eventfd written by librdkafka when its main queue gets an event
  DeliveryCallback on_delivery_;
  std::function<void(const Status&)> on_client_error_;
  std::atomic<uint64_t>* transport_errors_ = nullptr;
  std::chrono::milliseconds queue_full_timeout_;
  bool stop_on_failure_ = true;
  int64_t max_message_bytes_ = 0;
  int64_t batch_limit_ = 0;
  bool broker_reached_ = false;
  bool transactional_ = false;
  bool in_transaction_ = false;
  bool abortable_ = false;
  bool fenced_ = false;
  std::string transactional_id_;
  // Maps a transaction call's error (rd_kafka_error_t, destroyed here) to a Status.
  Status TransactionError(void* error, std::string_view what);
  int64_t refused_batch_limit_ = 0;
  Status fatal_;
  Status stopped_;
  std::map<std::string, rd_kafka_topic_t*, std::less<>> topics_;
};

// Maps a librdkafka error code (rd_kafka_resp_err_t) to a Status code, per the table above.
StatusCode StatusCodeForKafkaError(int err);

}  // namespace walrelay::kafka
