// Connection parameters for PostgreSQL, without libpq: what callers pass around.
//
// Thread safety: a value type.
#pragma once

#include <string>
#include <utility>

namespace walrelay::slot {

// Where and as whom to connect: the DSN as the operator wrote it (keyword/value or URI)
// and, kept apart from it, a password read from a file. The password never becomes part of
// a connection string: ConnectPg hands it to libpq as its own keyword (PQconnectdbParams),
// where it overrides a password in the DSN; empty = as the DSN, PGPASSWORD or the password
// file of libpq (~/.pgpass) say. Implicit from a DSN alone, which is what most callers have.
struct ConnInfo {
  ConnInfo() = default;
  ConnInfo(std::string dsn_text) : dsn(std::move(dsn_text)) {}  // NOLINT(google-explicit-constructor)
  ConnInfo(const char* dsn_text) : dsn(dsn_text) {}             // NOLINT(google-explicit-constructor)
  ConnInfo(std::string dsn_text, std::string password_text)
      : dsn(std::move(dsn_text)), password(std::move(password_text)) {}

  std::string dsn;
  std::string password;
};

}  // namespace walrelay::slot
