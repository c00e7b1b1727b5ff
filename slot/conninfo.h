// Connection parameters for PostgreSQL, and the password file rule, without libpq.
//
// Thread safety: ConnInfo is a value type; ReadPasswordFile is a pure function of the file.
#pragma once

#include <string>
#include <utility>

#include "base/status.h"

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

// The password in a password file: its first line, without a trailing CR. Refused
// (kPermissionDenied) when group or others have any access to the file, as libpq refuses
// such a .pgpass; kInvalidArgument when it is missing, not a regular file, or empty.
Result<std::string> ReadPasswordFile(const std::string& path);

}  // namespace walrelay::slot
