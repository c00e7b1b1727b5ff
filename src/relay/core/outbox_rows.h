// Outbox rows read by SQL instead of from the stream (the poller, lost-slot recovery,
// republish, re-drive): the same seven fields as OutboxRow, so that a row read from the
// table is mapped exactly like one decoded from the WAL.
//
// Thread safety: reentrant; `conn` and `result` belong to the caller.
#pragma once

#include <libpq-fe.h>

#include <string>

#include "base/status.h"
#include "src/relay/core/config.h"
#include "src/relay/core/outbox_mapper.h"

namespace walrelay::relay {

// The SELECT list of the seven mapped fields as text (NULL::text for an absent optional
// column), in OutboxRow's order; whether the table's payload column is bytea (read as its
// \x text, published as bytes); and the OutboxRow of one result row (views into it).
std::string OutboxRowSelectList(const OutboxColumns& columns);
Result<bool> PayloadIsBytea(PGconn* conn, const std::string& table, const OutboxColumns& columns);
// The seven fields start at column `first_column` of the result.
OutboxRow OutboxRowAt(const PGresult* result, int row, bool payload_is_bytea,
                      int first_column = 0);

}  // namespace walrelay::relay
