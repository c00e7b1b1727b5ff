#include "src/inbox/event_id.h"

#include <simdjson.h>


namespace walrelay::inbox {

// An event id usable as an inbox key (text in a btree): kDataLoss naming `what`.
Status ValidateEventId(std::string_view id, std::string_view what) {
  if (id.size() > kMaxEventIdBytes) {
    return DataLossError(std::string(what) + " has " + std::to_string(id.size()) +
                         " bytes, more than the " + std::to_string(kMaxEventIdBytes) +
                         " an inbox key may have");
  }
  if (id.find('\0') != std::string_view::npos) {
    return DataLossError(std::string(what) + " contains a NUL byte");
  }
  if (!simdjson::validate_utf8(id.data(), id.size())) {
    return DataLossError(std::string(what) + " is not valid UTF-8");
  }
  return Status::Ok();
}

// Poison detection: the event id, from the header or the JSON envelope. kDataLoss = the
// dead-letter reason.
Result<std::string> ExtractEventId(const InboxMessage& m, std::string_view header) {
  if (auto h = m.Header(header)) {
    if (h->empty()) return DataLossError("poison: empty " + std::string(header) + " header");
    if (Status st = ValidateEventId(*h, "the event id in the " + std::string(header) + " header");
        !st.ok()) {
      return DataLossError("poison: " + st.message());
    }
    return std::string(*h);
  }
  if (m.value.empty()) return DataLossError("poison: no " + std::string(header) + " header and an empty value");
  thread_local simdjson::dom::parser parser;
  simdjson::padded_string padded(m.value);
  simdjson::dom::element doc;
  if (auto err = parser.parse(padded).get(doc); err) {
    return DataLossError("poison: no " + std::string(header) + " header and the value is not JSON (" +
                         simdjson::error_message(err) + ")");
  }
  std::string_view id;
  if (doc["event_id"].get(id) != simdjson::SUCCESS || id.empty()) {
    return DataLossError("poison: no " + std::string(header) +
                         " header and no \"event_id\" string in the JSON value");
  }
  if (Status st = ValidateEventId(id, "the event id in the JSON value"); !st.ok()) {
    return DataLossError("poison: " + st.message());
  }
  return std::string(id);
}

}  // namespace walrelay::inbox
