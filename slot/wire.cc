#include "slot/wire.h"

#include <algorithm>
#include <charconv>

namespace walrelay::slot {
namespace {

// Reads big-endian fields from the front of a view, tracking the offset for errors.
class Reader {
 public:
  Reader(std::string_view what, std::string_view data) : what_(what), data_(data) {}

  Status Need(size_t n) const {
    if (data_.size() - pos_ < n) {
      return DataLossError(std::string(what_) + ": truncated at offset " + std::to_string(pos_) +
                           ": need " + std::to_string(n) + " bytes, have " +
                           std::to_string(data_.size() - pos_));
    }
    return Status::Ok();
  }
  Result<uint8_t> Byte() {
    WALRELAY_RETURN_IF_ERROR(Need(1));
    return static_cast<uint8_t>(data_[pos_++]);
  }
  Result<int64_t> Int64() {
    WALRELAY_RETURN_IF_ERROR(Need(8));
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(data_[pos_++]);
    return static_cast<int64_t>(v);
  }
  Result<Lsn> LsnField() {
    WALRELAY_ASSIGN_OR_RETURN(int64_t v, Int64());
    return Lsn(static_cast<uint64_t>(v));
  }
  Result<bool> Flag() {
    const size_t at = pos_;
    WALRELAY_ASSIGN_OR_RETURN(uint8_t b, Byte());
    if (b > 1) {
      return DataLossError(std::string(what_) + ": replyRequested byte " + std::to_string(b) +
                           " at offset " + std::to_string(at) + " is neither 0 nor 1");
    }
    return b == 1;
  }
  Status Tag(char expected) {
    WALRELAY_ASSIGN_OR_RETURN(uint8_t b, Byte());
    if (static_cast<char>(b) != expected) {
      return DataLossError(std::string(what_) + ": type byte 0x" + Hex(b) + " at offset 0, want '" +
                           std::string(1, expected) + "'");
    }
    return Status::Ok();
  }
  Status End() const {
    if (pos_ != data_.size()) {
      return DataLossError(std::string(what_) + ": " + std::to_string(data_.size() - pos_) +
                           " unexpected trailing bytes at offset " + std::to_string(pos_));
    }
    return Status::Ok();
  }
  std::string_view Rest() {
    std::string_view r = data_.substr(pos_);
    pos_ = data_.size();
    return r;
  }
  static std::string Hex(uint8_t b) {
    static constexpr char kDigits[] = "0123456789abcdef";
    return {kDigits[b >> 4], kDigits[b & 15]};
  }

 private:
  std::string_view what_;
  std::string_view data_;
  size_t pos_ = 0;
};

void PutInt64(std::string& out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(u >> shift));
}

}  // namespace

int64_t ToPgTime(std::chrono::system_clock::time_point t) {
  return UnixMicrosToPgTime(
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count());
}

std::chrono::system_clock::time_point FromPgTime(int64_t pg_micros) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::microseconds(PgTimeToUnixMicros(pg_micros))));
}

int64_t PgTimeNow() { return ToPgTime(std::chrono::system_clock::now()); }

Result<XLogData> ParseXLogData(std::string_view payload) {
  Reader r("XLogData", payload);
  WALRELAY_RETURN_IF_ERROR(r.Tag(kXLogDataTag));
  XLogData m;
  WALRELAY_ASSIGN_OR_RETURN(m.wal_start, r.LsnField());
  WALRELAY_ASSIGN_OR_RETURN(m.wal_end, r.LsnField());
  WALRELAY_ASSIGN_OR_RETURN(m.send_time, r.Int64());
  m.data = r.Rest();
  return m;
}

Result<PrimaryKeepalive> ParsePrimaryKeepalive(std::string_view payload) {
  Reader r("primary keepalive", payload);
  WALRELAY_RETURN_IF_ERROR(r.Tag(kPrimaryKeepaliveTag));
  PrimaryKeepalive m;
  WALRELAY_ASSIGN_OR_RETURN(m.wal_end, r.LsnField());
  WALRELAY_ASSIGN_OR_RETURN(m.send_time, r.Int64());
  WALRELAY_ASSIGN_OR_RETURN(m.reply_requested, r.Flag());
  WALRELAY_RETURN_IF_ERROR(r.End());
  return m;
}

Result<StandbyStatusUpdate> ParseStandbyStatusUpdate(std::string_view payload) {
  Reader r("standby status update", payload);
  WALRELAY_RETURN_IF_ERROR(r.Tag(kStandbyStatusUpdateTag));
  StandbyStatusUpdate m;
  WALRELAY_ASSIGN_OR_RETURN(m.write, r.LsnField());
  WALRELAY_ASSIGN_OR_RETURN(m.flush, r.LsnField());
  WALRELAY_ASSIGN_OR_RETURN(m.apply, r.LsnField());
  WALRELAY_ASSIGN_OR_RETURN(m.client_time, r.Int64());
  WALRELAY_ASSIGN_OR_RETURN(m.reply_requested, r.Flag());
  WALRELAY_RETURN_IF_ERROR(r.End());
  return m;
}

Result<ServerMessage> ParseServerMessage(std::string_view payload) {
  if (payload.empty()) return DataLossError("replication CopyData: empty message at offset 0");
  switch (payload[0]) {
    case kXLogDataTag: {
      WALRELAY_ASSIGN_OR_RETURN(XLogData m, ParseXLogData(payload));
      return ServerMessage(m);
    }
    case kPrimaryKeepaliveTag: {
      WALRELAY_ASSIGN_OR_RETURN(PrimaryKeepalive m, ParsePrimaryKeepalive(payload));
      return ServerMessage(m);
    }
    default:
      return DataLossError("replication CopyData: unknown message type byte 0x" +
                           Reader::Hex(static_cast<uint8_t>(payload[0])) + " at offset 0");
  }
}

void AppendStandbyStatusUpdate(const StandbyStatusUpdate& m, std::string& out) {
  out.push_back(kStandbyStatusUpdateTag);
  PutInt64(out, static_cast<int64_t>(m.write.value));
  PutInt64(out, static_cast<int64_t>(m.flush.value));
  PutInt64(out, static_cast<int64_t>(m.apply.value));
  PutInt64(out, m.client_time);
  out.push_back(m.reply_requested ? 1 : 0);
}

std::string EncodeStandbyStatusUpdate(const StandbyStatusUpdate& m) {
  std::string out;
  out.reserve(kStandbyStatusUpdateSize);
  AppendStandbyStatusUpdate(m, out);
  return out;
}

std::string EncodeXLogData(Lsn wal_start, Lsn wal_end, int64_t send_time, std::string_view data) {
  std::string out;
  out.reserve(kXLogDataHeaderSize + data.size());
  out.push_back(kXLogDataTag);
  PutInt64(out, static_cast<int64_t>(wal_start.value));
  PutInt64(out, static_cast<int64_t>(wal_end.value));
  PutInt64(out, send_time);
  out.append(data);
  return out;
}

std::string EncodePrimaryKeepalive(const PrimaryKeepalive& m) {
  std::string out;
  out.reserve(kPrimaryKeepaliveSize);
  out.push_back(kPrimaryKeepaliveTag);
  PutInt64(out, static_cast<int64_t>(m.wal_end.value));
  PutInt64(out, m.send_time);
  out.push_back(m.reply_requested ? 1 : 0);
  return out;
}

Result<std::chrono::milliseconds> ParseDurationSetting(std::string_view text) {
  const auto bad = [&] {
    return InvalidArgumentError("cannot parse duration setting '" + std::string(text) + "'");
  };
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || ptr == text.data() || n < 0) return bad();
  std::string_view unit(ptr, static_cast<size_t>(text.data() + text.size() - ptr));
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  int64_t ms_per_unit = 0;
  if (unit.empty() || unit == "ms") {
    ms_per_unit = 1;
  } else if (unit == "s") {
    ms_per_unit = 1000;
  } else if (unit == "min") {
    ms_per_unit = 60 * 1000;
  } else if (unit == "h") {
    ms_per_unit = 3600 * 1000;
  } else if (unit == "d") {
    ms_per_unit = 24 * 3600 * 1000;
  } else {
    return bad();
  }
  return std::chrono::milliseconds(n * ms_per_unit);
}

std::chrono::milliseconds StatusInterval(std::chrono::milliseconds wal_sender_timeout) {
  constexpr std::chrono::milliseconds kMax(1000);
  if (wal_sender_timeout.count() <= 0) return kMax;
  return std::min(kMax, std::max(std::chrono::milliseconds(1), wal_sender_timeout / 2));
}

}  // namespace walrelay::slot
