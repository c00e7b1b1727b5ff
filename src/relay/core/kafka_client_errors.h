// KafkaClientErrors: failures of the Kafka client itself (authentication, TLS), as opposed
// to one record's or one topic's (TopicErrors). They do not heal by retrying, and records
// never time out (invariant 9), so without this the relay would wait silently: the
// producer reports each one (kafka::ProducerOptions::on_client_error), /readyz names the
// latest until a record is acknowledged after it, and a counter counts them.
//
// Thread safety: all methods may be called from any thread (the pipeline reports, /readyz
// and /metrics read).
#pragma once

#include <cstdint>
#include <mutex>

#include "base/status.h"

namespace walrelay::relay {

class KafkaClientErrors {
 public:
  // The client failed with `why`; `acked` is the relay's count of acknowledged events now.
  void Fail(const Status& why, uint64_t acked);
  // OK unless a failure was reported and no event has been acknowledged since (`acked`,
  // the count now, is still the one Fail saw); else kUnavailable with the failure, what it
  // costs and what to do.
  Status Readiness(uint64_t acked) const;
  uint64_t total() const;

 private:
  mutable std::mutex mu_;
  Status last_;
  uint64_t acked_at_last_ = 0;
  uint64_t total_ = 0;
};

}  // namespace walrelay::relay
