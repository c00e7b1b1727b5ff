// LatestCommittedValue: the value of the newest committed record with a given key in a
// (compacted) topic, read by a read_committed consumer without a consumer group. Exactly-once
// mode reads its checkpoint with it at every start (src/relay/core/exactly_once.h).
//
// Reads every partition of the topic from its start up to its last stable offset (records
// of transactions still open, or aborted, are never returned: an open one is waited for,
// so call it after the transactional producer's InitTransactions(), which ends whatever a
// fenced producer left open). A compacted topic keeps one record per key once cleaned; the
// newest per key is found in any case, at the cost of reading what is not cleaned yet.
//
// Errors: kNotFound, the topic does not exist; kDeadlineExceeded, not read to its end
// within `timeout`; kInvalidArgument, a bad property; kUnavailable, the cluster did not
// answer. Thread safety: a free function; each call has its own client.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace walrelay::kafka {

// `properties`: librdkafka properties of the cluster (bootstrap.servers, security.*, sasl.*,
// ssl.*, ...); producer-only ones are left out. nullopt: no committed record with `key`.
Result<std::optional<std::string>> LatestCommittedValue(
    const std::vector<std::pair<std::string, std::string>>& properties, std::string_view topic,
    std::string_view key, std::chrono::milliseconds timeout);

}  // namespace walrelay::kafka
