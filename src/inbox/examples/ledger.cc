#include "src/inbox/examples/ledger.h"

#include <libpq-fe.h>
#include <simdjson.h>

#include "slot/pg_error.h"

#include <memory>
#include <optional>

namespace walrelay::inbox::ledger {

Status EnsureLedgerSchema(const slot::ConnInfo& conninfo) {
  WALRELAY_ASSIGN_OR_RETURN(slot::PgConnPtr conn, slot::ConnectPg(conninfo, "false", "ledger"));
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);
  std::unique_ptr<PGresult, decltype(&PQclear)> res(
      PQexec(conn.get(),
             "BEGIN;"
             "SELECT pg_advisory_xact_lock(hashtext('walrelay.ledger.schema'));"
             "CREATE TABLE IF NOT EXISTS wallet (id text PRIMARY KEY, balance bigint NOT NULL);"
             "CREATE TABLE IF NOT EXISTS wallet_credit (applied_order bigint GENERATED ALWAYS "
             "AS IDENTITY, event_id text NOT NULL, wallet text NOT NULL, amount bigint NOT "
             "NULL, seq bigint);"
             "COMMIT;"),
      &PQclear);
  if (PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
    return UnavailableError(std::string("ledger: schema: ") + PQerrorMessage(conn.get()));
  }
  return Status::Ok();
}

Status CreditWallet(const InboxMessage& message, Transaction& tx) {
  thread_local simdjson::dom::parser parser;
  simdjson::padded_string padded(message.value);
  simdjson::dom::element doc;
  if (auto err = parser.parse(padded).get(doc); err) {
    return InvalidArgumentError(std::string("ledger: payload is not JSON: ") +
                                simdjson::error_message(err));
  }
  simdjson::dom::element payload;
  if (doc["payload"].get(payload) != simdjson::SUCCESS) payload = doc;
  std::string_view wallet;
  int64_t amount = 0;
  if (payload["wallet"].get(wallet) != simdjson::SUCCESS || wallet.empty()) {
    return InvalidArgumentError("ledger: payload has no \"wallet\" string");
  }
  if (payload["amount"].get(amount) != simdjson::SUCCESS) {
    return InvalidArgumentError("ledger: payload has no integer \"amount\"");
  }
  // Optional producer sequence: recorded so that the order of application can be checked.
  std::optional<std::string> seq;
  int64_t seq_value = 0;
  if (payload["seq"].get(seq_value) == simdjson::SUCCESS) seq = std::to_string(seq_value);
  // Neither row count is needed: deferred, so a batch of messages costs one round trip
  // (their failures still count as this message's, see Transaction::Defer).
  WALRELAY_RETURN_IF_ERROR(
      tx.Defer("INSERT INTO wallet (id, balance) VALUES ($1, $2) ON CONFLICT (id) DO "
               "UPDATE SET balance = wallet.balance + EXCLUDED.balance",
               {wallet, amount}));
  return tx.Defer(
      "INSERT INTO wallet_credit (event_id, wallet, amount, seq) VALUES ($1, $2, $3, $4)",
      {message.event_id, wallet, amount, seq ? Param(*seq) : Param(std::nullopt)});
}

}  // namespace walrelay::inbox::ledger
