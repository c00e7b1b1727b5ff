// SQL names and literals, with PostgreSQL's rules, in one place for the whole tree.
//
// Names. A configured table name ("--source-table", the dead-letter and progress tables) is
// SQL text and means what it means in a query: an unquoted identifier folds to lower case
// ("public.Outbox" is public.outbox), a double-quoted one keeps its case and may contain
// anything ("public.\"Outbox\"", "\"my.schema\".t", "\"a\"\"b\"" is a"b). One or two parts;
// without a schema the server's search_path decides. ParseQualifiedName applies exactly
// these rules (PostgreSQL's scanner: ASCII A-Z fold, no other characters change), so a
// name means the same in the relay's own SQL, in the publication it creates and in the
// server's to_regclass(), which is what the relay uses to resolve a name to its OID.
//
// Literals. QuoteLiteral assumes standard_conforming_strings = on (the default since 9.1):
// only the single quote is doubled. Neither helper accepts a NUL byte (no SQL text can hold
// one); callers pass NUL-free strings (configuration values, catalog names).
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace walrelay {

// "we""ird": the identifier, always quoted (so its case is kept).
std::string QuoteIdentifier(std::string_view identifier);
// 'it''s'
std::string QuoteLiteral(std::string_view value);

struct QualifiedName {
  std::string schema;  // empty: not qualified (search_path decides)
  std::string name;

  // "schema"."name", or "name" when unqualified: always quoted, so it means exactly this
  // schema and name whatever their case.
  std::string Quoted() const;
  // schema.name for messages an operator reads and copies: each part quoted only when it
  // would not survive unquoted (upper case, punctuation, leading digit).
  std::string Display() const;
  friend bool operator==(const QualifiedName&, const QualifiedName&) = default;
};

// Parses `text` as SQL does (see the top of this file). kInvalidArgument naming the
// problem for an empty name or part, an unterminated quote, more than two parts, or
// characters after a closing quote.
Result<QualifiedName> ParseQualifiedName(std::string_view text);

// ParseQualifiedName(text)->Quoted(). REQUIRES: `text` parses (validated configuration);
// otherwise the whole text as one quoted identifier (the server then names the problem).
std::string QuoteQualifiedName(std::string_view text);

// The bytes of a bytea value in PostgreSQL's text form, as the server sends it (pgoutput's
// text columns, wal2json, a text-format query result): the hex format "\\x0a1b..." (the
// default bytea_output) or the escape format ('\\\\' for a backslash, '\\nnn' octal,
// other bytes as themselves). Replaces *out; kInvalidArgument (saying what is wrong) for
// text neither format allows.
Status DecodeByteaText(std::string_view text, std::string* out);

}  // namespace walrelay
