// Internal to walrelay::inbox: the event id of a record (the dedup key) and the rule that
// makes it usable as an inbox key. Reentrant.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "src/inbox/inbox.h"

namespace walrelay::inbox {

// OK when `id` can be an inbox key: at most kMaxEventIdBytes bytes of UTF-8 without NUL.
// Otherwise kDataLoss saying why, with `what` ("the event id in the ...") as its subject.
Status ValidateEventId(std::string_view id, std::string_view what);

// The event id: the first header named `header` (InboxOptions::event_id_header), else the
// "event_id" string of the JSON value. kDataLoss (the dead-letter reason) when there is
// none or it is not valid.
Result<std::string> ExtractEventId(const InboxMessage& m, std::string_view header);

}  // namespace walrelay::inbox
