// The Kafka headers of a published event, in the order of the contract
// (docs/inbox-contract.md; default names in base/headers.h, configured in HeaderNames):
// event id, event type (unless its name is empty), aggregate type (when the event has one
// and its name is not empty), the row's own headers, the position. The one place they are put
// together: the live pipeline and lost-slot recovery both call it.
#pragma once

#include <string_view>
#include <vector>

#include "src/kafka/producer.h"
#include "src/relay/core/config.h"
#include "src/relay/core/outbox_mapper.h"

namespace walrelay::relay {

// Replaces *out with the headers of `event` (views into `event` and `position`, which
// must outlive the use of *out). `position` is the walrelay.position value
// (FormatPosition). Allocation-free once *out has capacity.
void RecordHeaders(const OutboxEvent& event, std::string_view position, const HeaderNames& names,
                   std::vector<kafka::Header>* out);

}  // namespace walrelay::relay
