#include "src/relay/core/outbox_rows.h"

#include "base/sql.h"
#include "slot/pg_error.h"

namespace walrelay::relay {
namespace {

std::string Column(const std::string& name) {
  return name.empty() ? "NULL::text" : QuoteIdentifier(name) + "::text";
}

}  // namespace

std::string OutboxRowSelectList(const OutboxColumns& c) {
  return Column(c.event_id) + ", " + Column(c.aggregate_type) + ", " + Column(c.aggregate_id) +
         ", " + Column(c.topic) + ", " + Column(c.event_type) + ", " + Column(c.payload) + ", " +
         Column(c.headers);
}

Result<bool> PayloadIsBytea(PGconn* conn, const std::string& table, const OutboxColumns& c) {
  const std::string quoted_table = QuoteQualifiedName(table);
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr type,
      slot::ExecPg(conn,
                   "SELECT count(*) FROM pg_attribute WHERE attrelid = $1::regclass AND "
                   "attname = $2 AND NOT attisdropped AND atttypid = 'bytea'::regtype",
                   {quoted_table.c_str(), c.payload.c_str()},
                   "reading the payload column's type of " + table));
  return std::string_view(PQgetvalue(type.get(), 0, 0)) != "0";
}

OutboxRow OutboxRowAt(const PGresult* result, int row, bool payload_is_bytea, int first_column) {
  auto field = [&](int col) -> std::optional<std::string_view> {
    col += first_column;
    if (PQgetisnull(result, row, col)) return std::nullopt;
    return std::string_view(PQgetvalue(result, row, col), PQgetlength(result, row, col));
  };
  return OutboxRow{field(0), field(1), field(2), field(3),
                   field(4), field(5), field(6), payload_is_bytea};
}

}  // namespace walrelay::relay
