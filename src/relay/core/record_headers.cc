#include "src/relay/core/record_headers.h"

namespace walrelay::relay {

void RecordHeaders(const OutboxEvent& event, std::string_view position, const HeaderNames& names,
                   std::vector<kafka::Header>* out) {
  out->clear();
  out->push_back({names.event_id, event.event_id});
  if (!names.event_type.empty()) out->push_back({names.event_type, event.event_type});
  if (!names.aggregate_type.empty() && !event.aggregate_type.empty()) {
    out->push_back({names.aggregate_type, event.aggregate_type});
  }
  for (const auto& [name, value] : event.extra_headers) out->push_back({name, value});
  out->push_back({names.position, position});
}

}  // namespace walrelay::relay
