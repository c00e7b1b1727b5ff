#include "src/relay/core/kafka_client_errors.h"

namespace walrelay::relay {

void KafkaClientErrors::Fail(const Status& why, uint64_t acked) {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = why;
  acked_at_last_ = acked;
  ++total_;
}

Status KafkaClientErrors::Readiness(uint64_t acked) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (last_.ok() || acked != acked_at_last_) return Status::Ok();
  return UnavailableError(last_.message() +
                          "; no record is delivered until it is fixed: events wait in the slot "
                          "(nothing is lost, nothing is confirmed past them)");
}

uint64_t KafkaClientErrors::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

}  // namespace walrelay::relay
