#include "base/position.h"

#include <charconv>
#include <cstring>

namespace walrelay {
namespace {

// The writers below put text into a caller's buffer that has room (FormatPosition's is
// sized for the longest value): one string operation per header value instead of one per
// field, which made the position the largest part of building a record (bench/README.md,
// instructions per event).
char* PutText(char* p, std::string_view text) {
  std::memcpy(p, text.data(), text.size());
  return p + text.size();
}

template <typename T>
char* PutNumber(char* p, T value) {
  return std::to_chars(p, p + 20, value).ptr;  // 20 digits hold any 64-bit value
}

// Upper-case hex without leading zeros, as PostgreSQL writes an LSN's halves.
char* PutHex32(char* p, uint32_t value) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  const int n = value == 0 ? 1 : (32 - __builtin_clz(value) + 3) / 4;
  for (int i = n - 1; i >= 0; --i, value >>= 4) p[i] = kDigits[value & 15];
  return p + n;
}

template <typename T>
bool ParseNumber(std::string_view s, T* value) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *value);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

void FormatPosition(const SourcePosition& p, std::string* out) {
  // Every field but the source: 4+8+1+8 + 9+10 + 5+10 + 16+20 + 12 + 8 = 111 at most.
  char buf[128];
  char* w = PutText(buf, "lsn=");
  w = PutHex32(w, static_cast<uint32_t>(p.lsn.value >> 32));
  *w++ = '/';
  w = PutHex32(w, static_cast<uint32_t>(p.lsn.value));
  w = PutNumber(PutText(w, ";ordinal="), p.ordinal);
  w = PutNumber(PutText(w, ";xid="), p.xid);
  w = PutNumber(PutText(w, ";commit_time_us="), p.commit_time_us);
  if (p.recovered) w = PutText(w, ";recovered=1");
  w = PutText(w, ";source=");
  out->assign(buf, static_cast<size_t>(w - buf));
  out->append(p.source);
}

std::optional<SourcePosition> ParsePosition(std::string_view text) {
  SourcePosition p;
  bool have_lsn = false, have_source = false;
  while (!text.empty()) {
    const auto eq = text.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view key = text.substr(0, eq);
    if (key == "source") {  // the rest of the value
      p.source = text.substr(eq + 1);
      have_source = true;
      break;
    }
    const auto semi = text.find(';', eq);
    const std::string_view value =
        text.substr(eq + 1, semi == std::string_view::npos ? text.npos : semi - eq - 1);
    text = semi == std::string_view::npos ? std::string_view() : text.substr(semi + 1);
    bool ok = true;
    if (key == "lsn") {
      auto lsn = Lsn::Parse(value);
      ok = lsn.has_value();
      if (ok) p.lsn = *lsn;
      have_lsn = ok;
    } else if (key == "ordinal") {
      ok = ParseNumber(value, &p.ordinal);
    } else if (key == "xid") {
      ok = ParseNumber(value, &p.xid);
    } else if (key == "commit_time_us") {
      ok = ParseNumber(value, &p.commit_time_us);
    } else if (key == "recovered") {
      p.recovered = value == "1";
    }  // unknown keys: a newer writer; ignored
    if (!ok) return std::nullopt;
  }
  if (!have_lsn || !have_source) return std::nullopt;
  return p;
}

}  // namespace walrelay
