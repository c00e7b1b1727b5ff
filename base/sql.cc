#include "base/sql.h"

namespace walrelay {
namespace {

bool PlainIdentifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9') || s[0] == '$') return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
          static_cast<unsigned char>(c) >= 0x80)) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string QuoteIdentifier(std::string_view identifier) {
  std::string q = "\"";
  for (char ch : identifier) {
    if (ch == '"') q += '"';
    q += ch;
  }
  return q + "\"";
}

std::string QuoteLiteral(std::string_view value) {
  std::string q = "'";
  for (char ch : value) {
    if (ch == '\'') q += '\'';
    q += ch;
  }
  return q + "'";
}

std::string QualifiedName::Quoted() const {
  return schema.empty() ? QuoteIdentifier(name)
                        : QuoteIdentifier(schema) + "." + QuoteIdentifier(name);
}

std::string QualifiedName::Display() const {
  auto part = [](const std::string& p) { return PlainIdentifier(p) ? p : QuoteIdentifier(p); };
  return schema.empty() ? part(name) : part(schema) + "." + part(name);
}

Result<QualifiedName> ParseQualifiedName(std::string_view text) {
  auto fail = [&](std::string_view why) -> Status {
    return InvalidArgumentError("table name '" + std::string(text) + "': " + std::string(why) +
                                " (SQL rules: schema.table, unquoted parts fold to lower case, "
                                "\"Quoted\" parts keep their case)");
  };
  std::string parts[2];
  int count = 0;
  size_t i = 0;
  for (;;) {
    if (count == 2) return fail("more than two parts");
    std::string& part = parts[count++];
    if (i < text.size() && text[i] == '"') {
      ++i;
      bool closed = false;
      while (i < text.size()) {
        if (text[i] == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') {
            part += '"';
            i += 2;
            continue;
          }
          ++i;
          closed = true;
          break;
        }
        part += text[i++];
      }
      if (!closed) return fail("unterminated quoted identifier");
      if (part.empty()) return fail("empty quoted identifier");
    } else {
      while (i < text.size() && text[i] != '.' && text[i] != '"') {
        const char c = text[i++];
        part += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
      }
      if (part.empty()) return fail("empty name part");
      for (char c : part) {
        if (c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '\0' || c == ',' || c == '(' ||
            c == ')' || c == '\'') {
          return fail("unquoted part contains a character SQL does not allow there");
        }
      }
      if (part[0] >= '0' && part[0] <= '9') return fail("unquoted part starts with a digit");
    }
    if (i == text.size()) break;
    if (text[i] != '.')
      return fail("unexpected '\"' inside a part, or characters after a closing quote");
    ++i;
  }
  QualifiedName out;
  if (count == 2) {
    out.schema = std::move(parts[0]);
    out.name = std::move(parts[1]);
  } else {
    out.name = std::move(parts[0]);
  }
  return out;
}

std::string QuoteQualifiedName(std::string_view text) {
  auto parsed = ParseQualifiedName(text);
  // Unparsable (REQUIRES violated): one quoted identifier, which the server then reports as
  // a relation that does not exist, instead of a guess.
  return parsed.ok() ? parsed->Quoted() : QuoteIdentifier(text);
}

Status DecodeByteaText(std::string_view text, std::string* out) {
  out->clear();
  auto hex = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
  };
  if (text.starts_with("\\x")) {
    const std::string_view digits = text.substr(2);
    if (digits.size() % 2 != 0) {
      return InvalidArgumentError("bytea in hex format has an odd number of digits");
    }
    out->reserve(digits.size() / 2);
    for (size_t i = 0; i < digits.size(); i += 2) {
      const int hi = hex(digits[i]), lo = hex(digits[i + 1]);
      if (hi < 0 || lo < 0) {
        return InvalidArgumentError("bytea in hex format has a non-hex digit at offset " +
                                    std::to_string(2 + i));
      }
      out->push_back(static_cast<char>(hi << 4 | lo));
    }
    return Status::Ok();
  }
  out->reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out->push_back(text[i]);
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '\\') {
      out->push_back('\\');
      ++i;
      continue;
    }
    auto octal = [&](size_t k) { return k < text.size() && text[k] >= '0' && text[k] <= '7'; };
    if (octal(i + 1) && octal(i + 2) && octal(i + 3) && text[i + 1] <= '3') {
      out->push_back(static_cast<char>((text[i + 1] - '0') << 6 | (text[i + 2] - '0') << 3 |
                                       (text[i + 3] - '0')));
      i += 3;
      continue;
    }
    return InvalidArgumentError("bytea in escape format has a bad escape at offset " +
                                std::to_string(i));
  }
  return Status::Ok();
}

}  // namespace walrelay
