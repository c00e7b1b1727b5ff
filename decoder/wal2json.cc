#include "decoder/wal2json.h"

#include <cstring>
#include <optional>
#include <utility>

namespace walrelay::wal2json {

namespace ondemand = simdjson::ondemand;
using pgoutput::Oid;

namespace {

constexpr Oid kByteaOid = 17;

// Appends big-endian integers and NUL-terminated strings (pgoutput wire format).
class Wire {
 public:
  explicit Wire(std::string* out) : out_(out) { out_->clear(); }
  void Byte(char c) { out_->push_back(c); }
  void Int16(uint16_t v) { BigEndian(v, 2); }
  void Int32(uint32_t v) { BigEndian(v, 4); }
  void Int64(uint64_t v) { BigEndian(v, 8); }
  void Str(std::string_view s) {
    out_->append(s);
    out_->push_back('\0');
  }
  void Bytes(std::string_view s) { out_->append(s); }

 private:
  void BigEndian(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) out_->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string* out_;
};

bool IsJsonNumber(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > start;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (!digits()) return false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

}  // namespace

Result<pgoutput::PgTimestamp> ParseTimestamp(std::string_view text) {
  size_t i = 0;
  auto bad = [&] { return DataLossError("wal2json: bad timestamp \"" + std::string(text) + "\""); };
  auto number = [&](size_t n, int64_t* out) {
    if (i + n > text.size()) return false;
    int64_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      const char c = text[i + k];
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    i += n;
    *out = v;
    return true;
  };
  auto expect = [&](char c) {
    if (i < text.size() && text[i] == c) {
      ++i;
      return true;
    }
    return false;
  };
  int64_t y, mo, d, h, mi, s;
  if (!number(4, &y) || !expect('-') || !number(2, &mo) || !expect('-') || !number(2, &d) ||
      !expect(' ') || !number(2, &h) || !expect(':') || !number(2, &mi) || !expect(':') ||
      !number(2, &s)) {
    return bad();
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return bad();
  int64_t micros = 0;
  if (expect('.')) {
    int digits = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (digits < 6) micros = micros * 10 + (text[i] - '0');
      ++digits;
      ++i;
    }
    if (digits == 0) return bad();
    for (; digits < 6; ++digits) micros *= 10;
  }
  int64_t offset = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    const int64_t sign = text[i] == '-' ? -1 : 1;
    ++i;
    int64_t oh = 0, om = 0, os = 0;
    if (!number(2, &oh)) return bad();
    if (expect(':') && !number(2, &om)) return bad();
    if (expect(':') && !number(2, &os)) return bad();
    offset = sign * (oh * 3600 + om * 60 + os);
  } else {
    return bad();
  }
  if (i != text.size()) return bad();
  constexpr int64_t kPgEpochDays = 10957;  // 2000-01-01 - 1970-01-01
  const int64_t days =
      DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) - kPgEpochDays;
  const int64_t secs = days * 86400 + h * 3600 + mi * 60 + s - offset;
  return secs * 1000000 + micros;
}

// One column of "columns" / "identity" / "pk".
struct ParsedColumn {
  enum class Kind : uint8_t { kAbsent, kNull, kString, kNumber, kTrue, kFalse };
  std::string_view name;
  std::string_view type;
  Oid type_oid = 0;
  Kind kind = Kind::kAbsent;
  std::string_view text;  // string (unescaped) or number token
};

struct Wal2JsonDecoder::Parsed {
  char action = 0;
  std::optional<uint64_t> xid;
  std::optional<std::string_view> timestamp;
  std::optional<Lsn> lsn;
  std::optional<Lsn> nextlsn;
  std::string_view schema, table;
  bool has_schema = false, has_table = false;
  std::vector<ParsedColumn> columns, identity, pk;
  bool has_columns = false, has_identity = false, has_pk = false;
  std::optional<bool> transactional;
  std::optional<std::string_view> prefix, content;

  void Clear() {
    action = 0;
    xid.reset();
    timestamp.reset();
    lsn.reset();
    nextlsn.reset();
    schema = table = {};
    has_schema = has_table = has_columns = has_identity = has_pk = false;
    columns.clear();
    identity.clear();
    pk.clear();
    transactional.reset();
    prefix.reset();
    content.reset();
  }
};

Wal2JsonDecoder::Wal2JsonDecoder() = default;
Wal2JsonDecoder::~Wal2JsonDecoder() = default;

void Wal2JsonDecoder::Reset() { tables_.clear(); }

Oid Wal2JsonDecoder::OidFor(std::string_view schema, std::string_view table) {
  std::string key(schema);
  key.push_back('\0');
  key.append(table);
  auto it = oids_.find(key);
  if (it != oids_.end()) return it->second;
  uint32_t h = 2166136261u;  // FNV-1a over "schema.table"
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 16777619u;
  };
  mix(schema);
  mix(".");
  mix(table);
  Oid oid = h | 0x80000000u;
  while (used_oids_.count(oid)) oid = (oid + 1) | 0x80000000u;
  used_oids_.insert(oid);
  oids_.emplace(std::move(key), oid);
  return oid;
}

namespace {

// Records the first simdjson error with the document offset where it happened.
class ErrorSink {
 public:
  ErrorSink(ondemand::document* doc, const char* base, size_t size)
      : doc_(doc), base_(base), size_(size) {}

  Status Fail(std::string_view what, simdjson::error_code e = simdjson::SUCCESS) {
    std::string m = "wal2json: ";
    m += what;
    if (e != simdjson::SUCCESS) {
      m += ": ";
      m += simdjson::error_message(e);
    }
    const char* loc = nullptr;
    if (doc_ != nullptr && !doc_->current_location().get(loc) && loc >= base_ &&
        loc <= base_ + size_) {
      m += " at offset " + std::to_string(loc - base_);
    } else {
      m += " at offset " + std::to_string(size_) + " (end of document)";
    }
    return DataLossError(std::move(m));
  }

 private:
  ondemand::document* doc_;
  const char* base_;
  size_t size_;
};

// Reads JSON strings (keys and values) without a copy when they hold no escape: wal2json
// writes its keys, names, types and most values plainly, so the text is viewed in place in
// the padded input. A string with a backslash is unescaped into `buf`, which is sized once
// per document (unescaped text is never longer than the document), so earlier views stay
// valid. Both live until the decoder's next Decode().
class StringReader {
 public:
  StringReader(const ondemand::parser& parser, std::string* buf, size_t document_size)
      : parser_(parser) {
    const size_t need = document_size + 2 * simdjson::SIMDJSON_PADDING;
    if (buf->size() < need) buf->resize(need);
    dst_ = reinterpret_cast<uint8_t*>(buf->data());
  }

  simdjson::error_code Text(ondemand::raw_json_string raw, std::string_view* out) {
    // Stage 1 found this string's closing quote; the NUL test also stops the scan at the
    // zeroed padding whatever the input (a NUL inside a string goes the unescape way).
    const char* begin = raw.raw();
    const char* p = begin;
    while (*p != '"' && *p != '\\' && *p != '\0') ++p;
    if (*p == '"') {
      *out = std::string_view(begin, static_cast<size_t>(p - begin));
      return simdjson::SUCCESS;
    }
    return parser_.unescape(raw, dst_).get(*out);
  }
  simdjson::error_code Value(ondemand::value v, std::string_view* out) {
    ondemand::raw_json_string raw;
    if (auto e = v.get_raw_json_string().get(raw)) return e;
    return Text(raw, out);
  }
  simdjson::error_code Key(ondemand::field& f, std::string_view* out) { return Text(f.key(), out); }

 private:
  const ondemand::parser& parser_;
  uint8_t* dst_;
};

Status ParseColumnArray(ondemand::value v, bool with_value, ErrorSink* err, StringReader* str,
                        std::vector<ParsedColumn>* out) {
  ondemand::array arr;
  if (auto e = v.get_array().get(arr)) return err->Fail("columns must be an array", e);
  for (auto elem : arr) {
    ondemand::object obj;
    if (auto e = elem.get_object().get(obj)) return err->Fail("column must be an object", e);
    ParsedColumn c;
    bool has_name = false;
    for (auto&& field_result : obj) {
      ondemand::field field;
      if (auto e = std::move(field_result).get(field)) return err->Fail("bad column key", e);
      std::string_view key;
      if (auto e = str->Key(field, &key)) return err->Fail("bad column key", e);
      ondemand::value fv = field.value();
      if (key == "name") {
        if (auto e = str->Value(fv, &c.name)) return err->Fail("column name", e);
        has_name = true;
      } else if (key == "type") {
        if (auto e = str->Value(fv, &c.type)) return err->Fail("column type", e);
      } else if (key == "typeoid") {
        uint64_t oid;
        if (auto e = fv.get_uint64().get(oid); e || oid > 0xffffffffu) {
          return err->Fail("column typeoid", e);
        }
        c.type_oid = static_cast<Oid>(oid);
      } else if (key == "value" && with_value) {
        ondemand::json_type t;
        if (auto e = fv.type().get(t)) return err->Fail("column value", e);
        switch (t) {
          case ondemand::json_type::null:
            c.kind = ParsedColumn::Kind::kNull;
            break;
          case ondemand::json_type::string:
            if (auto e = str->Value(fv, &c.text)) return err->Fail("column value", e);
            c.kind = ParsedColumn::Kind::kString;
            break;
          case ondemand::json_type::number:
            c.text = TrimRight(fv.raw_json_token());
            if (!IsJsonNumber(c.text)) return err->Fail("bad number");
            c.kind = ParsedColumn::Kind::kNumber;
            break;
          case ondemand::json_type::boolean: {
            bool b;
            if (auto e = fv.get_bool().get(b)) return err->Fail("column value", e);
            c.kind = b ? ParsedColumn::Kind::kTrue : ParsedColumn::Kind::kFalse;
            break;
          }
          default:
            return err->Fail("column value must be a scalar");
        }
      }
    }
    if (!has_name) return err->Fail("column without name");
    if (with_value && c.kind == ParsedColumn::Kind::kAbsent) {
      return err->Fail("column " + std::string(c.name) + " without value");
    }
    out->push_back(c);
  }
  return Status::Ok();
}

Status ParseOptionalString(ondemand::value v, std::string_view what, ErrorSink* err,
                           StringReader* str, std::optional<std::string_view>* out) {
  bool is_null = false;
  if (auto e = v.is_null().get(is_null)) return err->Fail(what, e);
  if (is_null) return Status::Ok();
  std::string_view s;
  if (auto e = str->Value(v, &s)) return err->Fail(what, e);
  *out = s;
  return Status::Ok();
}

}  // namespace

Status Wal2JsonDecoder::Parse(std::string_view json, Parsed* p) {
  const size_t need = json.size() + simdjson::SIMDJSON_PADDING;
  if (padded_.size() < need) padded_.resize(need);
  if (!json.empty()) std::memcpy(padded_.data(), json.data(), json.size());
  std::memset(padded_.data() + json.size(), 0, simdjson::SIMDJSON_PADDING);
  simdjson::padded_string_view view(padded_.data(), json.size(), padded_.size());

  ondemand::document doc;
  ErrorSink pre(nullptr, padded_.data(), json.size());
  if (auto e = parser_.iterate(view).get(doc)) return pre.Fail("invalid JSON", e);
  ErrorSink err(&doc, padded_.data(), json.size());
  StringReader str(parser_, &unescaped_, json.size());
  ondemand::object obj;
  if (auto e = doc.get_object().get(obj)) return err.Fail("document must be an object", e);
  for (auto&& field_result : obj) {
    ondemand::field field;
    if (auto e = std::move(field_result).get(field)) return err.Fail("bad key", e);
    std::string_view key;
    if (auto e = str.Key(field, &key)) return err.Fail("bad key", e);
    ondemand::value v = field.value();
    if (key == "action") {
      std::string_view a;
      if (auto e = str.Value(v, &a)) return err.Fail("action", e);
      if (a.size() != 1) return err.Fail("unknown action \"" + std::string(a) + "\"");
      p->action = a[0];
    } else if (key == "xid") {
      bool is_null = false;
      if (auto e = v.is_null().get(is_null)) return err.Fail("xid", e);
      if (!is_null) {
        uint64_t x;
        if (auto e = v.get_uint64().get(x); e || x > 0xffffffffu) return err.Fail("xid", e);
        p->xid = x;
      }
    } else if (key == "timestamp") {
      WALRELAY_RETURN_IF_ERROR(ParseOptionalString(v, "timestamp", &err, &str, &p->timestamp));
    } else if (key == "lsn" || key == "nextlsn") {
      std::optional<std::string_view> s;
      WALRELAY_RETURN_IF_ERROR(ParseOptionalString(v, key, &err, &str, &s));
      if (s) {
        std::optional<Lsn> l = Lsn::Parse(*s);
        if (!l) return err.Fail("bad " + std::string(key) + " \"" + std::string(*s) + "\"");
        (key == "lsn" ? p->lsn : p->nextlsn) = *l;
      }
    } else if (key == "schema") {
      if (auto e = str.Value(v, &p->schema)) return err.Fail("schema", e);
      p->has_schema = true;
    } else if (key == "table") {
      if (auto e = str.Value(v, &p->table)) return err.Fail("table", e);
      p->has_table = true;
    } else if (key == "columns") {
      WALRELAY_RETURN_IF_ERROR(ParseColumnArray(v, true, &err, &str, &p->columns));
      p->has_columns = true;
    } else if (key == "identity") {
      WALRELAY_RETURN_IF_ERROR(ParseColumnArray(v, true, &err, &str, &p->identity));
      p->has_identity = true;
    } else if (key == "pk") {
      WALRELAY_RETURN_IF_ERROR(ParseColumnArray(v, false, &err, &str, &p->pk));
      p->has_pk = true;
    } else if (key == "transactional") {
      bool b;
      if (auto e = v.get_bool().get(b)) return err.Fail("transactional", e);
      p->transactional = b;
    } else if (key == "prefix") {
      WALRELAY_RETURN_IF_ERROR(ParseOptionalString(v, "prefix", &err, &str, &p->prefix));
    } else if (key == "content") {
      WALRELAY_RETURN_IF_ERROR(ParseOptionalString(v, "content", &err, &str, &p->content));
    }
    // Other fields (e.g. "origin", "columnoptionals") are ignored.
  }
  // After the object, any token left is trailing content (current_location() fails at
  // the end of the document).
  const char* trailing = nullptr;
  if (!doc.current_location().get(trailing)) return err.Fail("trailing content after the object");
  if (p->action == 0) return err.Fail("no action");
  return Status::Ok();
}

namespace {

void AppendColumnValue(const ParsedColumn& c, bool bytea, Wire* w) {
  switch (c.kind) {
    case ParsedColumn::Kind::kAbsent:
      w->Byte('u');
      return;
    case ParsedColumn::Kind::kNull:
      w->Byte('n');
      return;
    case ParsedColumn::Kind::kTrue:
    case ParsedColumn::Kind::kFalse:
      w->Byte('t');
      w->Int32(1);
      w->Byte(c.kind == ParsedColumn::Kind::kTrue ? 't' : 'f');
      return;
    case ParsedColumn::Kind::kString:
    case ParsedColumn::Kind::kNumber:
      break;
  }
  w->Byte('t');
  const bool prefix = bytea && c.kind == ParsedColumn::Kind::kString;
  w->Int32(static_cast<uint32_t>(c.text.size() + (prefix ? 2 : 0)));
  if (prefix) w->Bytes("\\x");
  w->Bytes(c.text);
}

}  // namespace

Status Wal2JsonDecoder::Build(const Parsed& p, std::vector<pgoutput::Message>* out) {
  auto fail = [&](std::string m) {
    return DataLossError("wal2json action '" + std::string(1, p.action) + "': " + m);
  };
  std::string& rel_wire = wire_[0];
  std::string& msg_wire = wire_[1];
  bool with_relation = false;
  msg_wire.clear();
  Wire w(&msg_wire);

  switch (p.action) {
    case 'B':
    case 'C': {
      if (!p.lsn || (p.action == 'C' && !p.nextlsn)) {
        return FailedPreconditionError(
            "wal2json: Begin/Commit without lsn/nextlsn: start the slot with include-lsn '1'");
      }
      pgoutput::PgTimestamp ts = 0;
      if (p.timestamp) {
        WALRELAY_ASSIGN_OR_RETURN(ts, ParseTimestamp(*p.timestamp));
      }
      if (p.action == 'B') {
        w.Byte('B');
        w.Int64(p.lsn->value);
        w.Int64(static_cast<uint64_t>(ts));
        w.Int32(static_cast<uint32_t>(p.xid.value_or(0)));
      } else {
        w.Byte('C');
        w.Byte(0);
        w.Int64(p.lsn->value);
        w.Int64(p.nextlsn->value);
        w.Int64(static_cast<uint64_t>(ts));
      }
      break;
    }
    case 'M': {
      if (!p.transactional || !p.prefix || !p.content || !p.lsn) {
        return fail("needs transactional, prefix, content and lsn");
      }
      if (p.prefix->find('\0') != std::string_view::npos) return fail("NUL in prefix");
      w.Byte('M');
      w.Byte(*p.transactional ? 1 : 0);
      w.Int64(p.lsn->value);
      w.Str(*p.prefix);
      w.Int32(static_cast<uint32_t>(p.content->size()));
      w.Bytes(*p.content);
      break;
    }
    case 'I':
    case 'U':
    case 'D':
    case 'T': {
      if (!p.has_schema || !p.has_table) return fail("needs schema and table");
      if (p.schema.find('\0') != std::string_view::npos ||
          p.table.find('\0') != std::string_view::npos) {
        return fail("NUL in a name");
      }
      std::string key(p.schema);
      key.push_back('\0');
      key.append(p.table);
      const Oid oid = OidFor(p.schema, p.table);
      auto it = tables_.find(key);
      const TableState* known =
          it == tables_.end() || !it->second.described ? nullptr : &it->second;

      auto is_key = [&](std::string_view name) {
        for (const ParsedColumn& k : p.pk) {
          if (k.name == name) return true;
        }
        return false;
      };
      auto describe = [&](const std::vector<ParsedColumn>& cols) {
        std::vector<ColumnDesc> d;
        for (const ParsedColumn& c : cols) {
          d.push_back({std::string(c.name), std::string(c.type), c.type_oid, is_key(c.name)});
        }
        return d;
      };
      auto same_type = [](const ColumnDesc& d, const ParsedColumn& c) {
        return d.type_oid == c.type_oid && d.type == c.type;
      };
      // Positions of `cols` in `desc`, strictly increasing, into positions_; false if not
      // a subsequence (by name and type).
      std::vector<size_t>& pos = positions_;
      auto positions = [&](const std::vector<ColumnDesc>& desc,
                           const std::vector<ParsedColumn>& cols) {
        pos.clear();
        size_t j = 0;
        for (const ParsedColumn& c : cols) {
          while (j < desc.size() && desc[j].name != c.name) ++j;
          if (j == desc.size() || !same_type(desc[j], c)) return false;
          pos.push_back(j++);
        }
        return true;
      };
      auto keys_match = [&](const std::vector<ColumnDesc>& desc) {
        if (!p.has_pk) return true;
        for (const ColumnDesc& d : desc) {
          if (d.key != is_key(d.name)) return false;
        }
        return true;
      };

      // The table description this change is read against: the known one, or `fresh`.
      std::vector<ColumnDesc> fresh;
      const std::vector<ColumnDesc>* chosen = &fresh;
      if (p.action == 'I' || p.action == 'U') {
        if (!p.has_columns) return fail("needs columns");
        const std::vector<ParsedColumn>& cols = p.columns;
        if (known != nullptr && keys_match(known->columns) &&
            (p.action == 'I'
                 ? known->columns.size() == cols.size() && positions(known->columns, cols)
                 : positions(known->columns, cols))) {
          chosen = &known->columns;
        } else if (p.action == 'U' && p.identity.size() > cols.size() &&
                   positions(describe(p.identity), cols)) {
          // REPLICA IDENTITY FULL: the old tuple names every column, also the unchanged
          // TOASTed ones the new tuple omits.
          fresh = describe(p.identity);
          with_relation = true;
        } else {
          fresh = describe(cols);
          with_relation = true;
        }
      } else if (p.action == 'D') {
        if (!p.has_identity) return fail("needs identity");
        if (known != nullptr && keys_match(known->columns) &&
            positions(known->columns, p.identity)) {
          chosen = &known->columns;
        } else {
          fresh = describe(p.identity);
          with_relation = true;
        }
      } else {  // 'T'
        if (known != nullptr) {
          chosen = &known->columns;
        } else {
          with_relation = true;  // a table never seen: describe it with no columns
        }
      }

      const std::vector<ColumnDesc>& desc = *chosen;

      // The tuple of `cols` laid over `desc`: absent columns are `missing`.
      auto tuple = [&](const std::vector<ParsedColumn>& cols, char missing) -> Status {
        if (!positions(desc, cols)) return fail("columns do not match the table");
        w.Int16(static_cast<uint16_t>(desc.size()));
        size_t k = 0;
        for (size_t i = 0; i < desc.size(); ++i) {
          if (k < pos.size() && pos[k] == i) {
            AppendColumnValue(cols[k], desc[i].type_oid == kByteaOid || desc[i].type == "bytea",
                              &w);
            ++k;
          } else {
            w.Byte(missing);
          }
        }
        return Status::Ok();
      };
      if (desc.size() > 0xffff) return fail("too many columns");

      switch (p.action) {
        case 'I':
          w.Byte('I');
          w.Int32(oid);
          w.Byte('N');
          WALRELAY_RETURN_IF_ERROR(tuple(p.columns, 'u'));
          break;
        case 'U':
          w.Byte('U');
          w.Int32(oid);
          if (p.has_identity && !p.identity.empty()) {
            w.Byte(p.identity.size() == desc.size() ? 'O' : 'K');
            WALRELAY_RETURN_IF_ERROR(tuple(p.identity, 'n'));
          }
          w.Byte('N');
          WALRELAY_RETURN_IF_ERROR(tuple(p.columns, 'u'));
          break;
        case 'D':
          w.Byte('D');
          w.Int32(oid);
          w.Byte(p.identity.size() == desc.size() ? 'O' : 'K');
          WALRELAY_RETURN_IF_ERROR(tuple(p.identity, 'n'));
          break;
        case 'T':
          w.Byte('T');
          w.Int32(1);
          w.Byte(0);
          w.Int32(oid);
          break;
      }
      if (p.action == 'I') {
        for (const ParsedColumn& c : p.columns) {
          if (c.kind == ParsedColumn::Kind::kAbsent) return fail("insert column without value");
        }
      }

      if (with_relation) {
        Wire r(&rel_wire);
        r.Byte('R');
        r.Int32(oid);
        r.Str(p.schema);
        r.Str(p.table);
        r.Byte('d');
        r.Int16(static_cast<uint16_t>(desc.size()));
        for (const ColumnDesc& d : desc) {
          if (d.name.find('\0') != std::string::npos) return fail("NUL in a column name");
          r.Byte(d.key ? 1 : 0);
          r.Str(d.name);
          r.Int32(d.type_oid);
          r.Int32(0xffffffffu);  // typmod -1: wal2json folds it into the type name
        }
      }
      // Decode both before committing the table description, so an error leaves the
      // decoder unchanged.
      if (with_relation) {
        pgoutput::Message rel;
        WALRELAY_RETURN_IF_ERROR(pgoutput::Decode(rel_wire, {1, false, false}, &rel));
        out->push_back(std::move(rel));
      }
      pgoutput::Message m;
      WALRELAY_RETURN_IF_ERROR(pgoutput::Decode(msg_wire, {1, false, false}, &m));
      out->push_back(std::move(m));
      if (with_relation) {
        TableState& t = tables_[key];
        t.columns = std::move(fresh);
        t.described = true;
      }
      return Status::Ok();
    }
    default:
      return fail("unknown action");
  }
  pgoutput::Message m;
  WALRELAY_RETURN_IF_ERROR(pgoutput::Decode(msg_wire, {1, false, false}, &m));
  out->push_back(std::move(m));
  return Status::Ok();
}

Status Wal2JsonDecoder::Decode(std::string_view json, std::vector<pgoutput::Message>* out) {
  out->clear();
  if (!parsed_) parsed_ = std::make_unique<Parsed>();
  Parsed& p = *parsed_;
  p.Clear();  // keeps the column vectors' capacity
  Status st = Parse(json, &p);
  if (st.ok()) st = Build(p, out);
  if (!st.ok()) out->clear();
  return st;
}

}  // namespace walrelay::wal2json
