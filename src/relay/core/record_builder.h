// RecordBuilder: the Kafka record an outbox event becomes, the one place it is put together
// (the live pipeline, poll mode, lost-slot recovery and re-drive all build through it).
//
//   headers: the contract's, in its order (docs/inbox-contract.md; default names in
//            base/headers.h, configured in HeaderNames): event id, event type (unless its
//            name is empty), aggregate type (when the event has one and its name is not
//            empty), the row's own headers, then with a CloudEvents format ce_specversion,
//            ce_id, ce_source, ce_type, ce_time (when the commit time is known) and
//            content-type, and last the position.
//   value:   the payload (walrelay's format and CloudEvents binary mode), or one
//            CloudEvents JSON document (structured mode): specversion, id, source, type,
//            time, datacontenttype and the payload as `data` (JSON as it is; text that is
//            not JSON as a JSON string with datacontenttype text/plain; a bytea payload as
//            `data_base64`).
//
// ce_time / time is the commit time (RFC 3339, UTC, microseconds) from the position; it is
// left out where walrelay does not know it (poll mode, re-drive, a recovered row without a
// created_at column). The spec makes it optional.
//
// LIFETIME: headers() and value() view `event`, `position` and this builder; valid until
// the next Build() and while those live. Thread safety: one builder per thread.
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/position.h"
#include "src/kafka/producer.h"
#include "src/relay/core/config.h"
#include "src/relay/core/outbox_mapper.h"

namespace walrelay::relay {

class RecordBuilder {
 public:
  explicit RecordBuilder(const RelayConfig& config);

  // Builds the record of `event` published from `position`. Allocation-free in walrelay's
  // format once the buffers have grown.
  void Build(const OutboxEvent& event, const SourcePosition& position);

  const std::vector<kafka::Header>& headers() const { return headers_; }
  std::string_view value() const { return value_; }

 private:
  // The payload's kind for CloudEvents: JSON, other text, or bytes.
  enum class Data { kJson, kText, kBytes };
  Data Classify(const OutboxEvent& event);
  void BuildStructured(const OutboxEvent& event, Data data);

  const RelayConfig& config_;
  const std::string source_;  // the CloudEvents source attribute
  std::string position_text_, time_text_, document_;
  std::vector<kafka::Header> headers_;
  std::string_view value_;
  simdjson::dom::parser parser_;
};

// "2026-12-05T10:24:28.123456Z" for microseconds since the Unix epoch (RFC 3339, UTC).
void FormatRfc3339Micros(int64_t unix_us, std::string* out);

}  // namespace walrelay::relay
