#include "src/relay/record_headers.h"

#include "base/headers.h"

namespace walrelay::relay {

void RecordHeaders(const OutboxEvent& event, std::string_view position,
                   std::vector<kafka::Header>* out) {
  out->clear();
  out->push_back({headers::kEventId, event.event_id});
  out->push_back({headers::kEventType, event.event_type});
  if (!event.aggregate_type.empty()) out->push_back({headers::kAggregateType, event.aggregate_type});
  for (const auto& [name, value] : event.extra_headers) out->push_back({name, value});
  out->push_back({headers::kPosition, position});
}

}  // namespace walrelay::relay
