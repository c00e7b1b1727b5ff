// The Kafka header names of walrelay's records: the one list, shared by the relay (which
// writes them), the inbox library (which reads the event id and writes dead-letter
// records) and the contract for consumers in other languages (docs/inbox-contract.md,
// checked against this file by tests/relay/contract_test.cc).
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace walrelay::headers {

// On every record the relay publishes, in this order (the row's own headers, from its
// headers column or envelope, come between aggregate_type and walrelay.position).
inline constexpr std::string_view kEventId = "event_id";              // the dedup key
inline constexpr std::string_view kEventType = "event_type";
inline constexpr std::string_view kAggregateType = "aggregate_type";  // only when set
inline constexpr std::string_view kPosition = "walrelay.position";    // base/position.h
inline constexpr std::array<std::string_view, 4> kRelayHeaders = {kEventId, kEventType,
                                                                  kAggregateType, kPosition};

// Names a row may not use for its own headers (any ASCII case): the ones the relay writes
// (these by default; the configured ones, src/relay/core/config.h HeaderNames) and every name
// under this prefix.
inline constexpr std::string_view kReservedPrefix = "walrelay.";

// Header names compared as reservations are: ignoring ASCII case (so a row cannot add an
// `Event_Id` that a case-insensitive consumer would take for the relay's).
constexpr bool SameNameIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] + 32) : a[i];
    const char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] + 32) : b[i];
    if (x != y) return false;
  }
  return true;
}

// W3C Trace Context (https://www.w3.org/TR/trace-context/): the caller's span, written by
// the outbox helper (outbox::OutboxEvent::trace) as row headers, published unchanged,
// handed to the inbox handler (inbox::InboxMessage::traceparent()). Not reserved: a row's
// headers column may carry them itself.
inline constexpr std::string_view kTraceparent = "traceparent";
inline constexpr std::string_view kTracestate = "tracestate";

// CloudEvents' Kafka protocol binding (outbox.format cloudevents-binary / -structured):
// the attribute headers walrelay writes, and the content type of the value.
inline constexpr std::string_view kCloudEventsPrefix = "ce_";
inline constexpr std::string_view kCeSpecversion = "ce_specversion";
inline constexpr std::string_view kCeId = "ce_id";
inline constexpr std::string_view kCeSource = "ce_source";
inline constexpr std::string_view kCeType = "ce_type";
inline constexpr std::string_view kCeTime = "ce_time";
inline constexpr std::string_view kContentType = "content-type";

// Added by the inbox library to a dead-letter topic record, after the original headers.
inline constexpr std::string_view kDlqReason = "walrelay.dlq.reason";
inline constexpr std::string_view kDlqConsumer = "walrelay.dlq.consumer";
inline constexpr std::string_view kDlqSourceTopic = "walrelay.dlq.source_topic";
inline constexpr std::string_view kDlqSourcePartition = "walrelay.dlq.source_partition";
inline constexpr std::string_view kDlqSourceOffset = "walrelay.dlq.source_offset";
inline constexpr std::array<std::string_view, 5> kDeadLetterHeaders = {
    kDlqReason, kDlqConsumer, kDlqSourceTopic, kDlqSourcePartition, kDlqSourceOffset};

}  // namespace walrelay::headers
