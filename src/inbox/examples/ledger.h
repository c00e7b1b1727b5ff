// The example service of the inbox library: a ledger that credits wallet balances from
// payment events. Each event's payload is {"wallet": "w1", "amount": 100} (or a table-less
// envelope whose "payload" member is that object). The handler runs inside the inbox
// transaction, so the credit commits together with the inbox row: exactly once.
//
// Tables (EnsureLedgerSchema):
//   wallet(id text primary key, balance bigint)
//   wallet_credit(event_id text, wallet text, amount bigint)  -- one row per applied
//     credit, deliberately without a unique constraint, so a double application shows.
//
// Thread safety: CreditWallet is stateless and may run on several partitions at once.
#pragma once

#include <string>

#include "base/status.h"
#include "slot/conninfo.h"
#include "src/inbox/inbox.h"

namespace walrelay::inbox::ledger {

Status EnsureLedgerSchema(const slot::ConnInfo& conninfo);

// The inbox handler. kInvalidArgument (dead-lettered) when the payload is not a payment.
Status CreditWallet(const InboxMessage& message, Transaction& tx);

}  // namespace walrelay::inbox::ledger
