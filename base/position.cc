#include "base/position.h"

#include <charconv>

namespace walrelay {
namespace {

template <typename T>
void AppendNumber(T value, std::string* out) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out->append(buf, end);
}

void AppendHex32(uint32_t value, std::string* out) {
  char buf[9];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value, 16);
  for (char* p = buf; p != end; ++p) {
    if (*p >= 'a' && *p <= 'f') *p = static_cast<char>(*p - 'a' + 'A');
  }
  out->append(buf, end);
}

template <typename T>
bool ParseNumber(std::string_view s, T* value) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *value);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

void FormatPosition(const SourcePosition& p, std::string* out) {
  out->clear();
  out->append("lsn=");
  AppendHex32(static_cast<uint32_t>(p.lsn.value >> 32), out);
  out->push_back('/');
  AppendHex32(static_cast<uint32_t>(p.lsn.value), out);
  out->append(";ordinal=");
  AppendNumber(p.ordinal, out);
  out->append(";xid=");
  AppendNumber(p.xid, out);
  out->append(";commit_time_us=");
  AppendNumber(p.commit_time_us, out);
  if (p.recovered) out->append(";recovered=1");
  out->append(";source=");
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
