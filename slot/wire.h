// Framing of the streaming replication protocol inside CopyBoth: the CopyData payloads
// exchanged after START_REPLICATION (PostgreSQL docs, "Streaming Replication Protocol").
//
//   XLogData (B)               'w' walStart:int64 walEnd:int64 sendTime:int64 data...
//   Primary keepalive (B)      'k' walEnd:int64 sendTime:int64 replyRequested:byte
//   Standby status update (F)  'r' write:int64 flush:int64 apply:int64 clientTime:int64
//                                  replyRequested:byte
//
// Integers are big-endian. Times are PostgreSQL TimestampTz: microseconds since
// 2000-01-01 00:00:00 UTC. Pure functions over bytes: no libpq, no state, no allocation
// except the encoders' output string. Malformed input gives kDataLoss naming the message
// and the byte offset; nothing here asserts on input.
//
// Thread safety: all functions are reentrant.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "base/lsn.h"
#include "base/status.h"

namespace walrelay::slot {

// CopyData message type bytes.
inline constexpr char kXLogDataTag = 'w';
inline constexpr char kPrimaryKeepaliveTag = 'k';
inline constexpr char kStandbyStatusUpdateTag = 'r';

// Sizes including the type byte.
inline constexpr size_t kXLogDataHeaderSize = 1 + 8 + 8 + 8;
inline constexpr size_t kPrimaryKeepaliveSize = 1 + 8 + 8 + 1;
inline constexpr size_t kStandbyStatusUpdateSize = 1 + 8 + 8 + 8 + 8 + 1;

// Seconds between the Unix epoch and the PostgreSQL epoch (2000-01-01 UTC).
inline constexpr int64_t kPgEpochUnixSeconds = 946684800;

// PostgreSQL TimestampTz <-> microseconds since the Unix epoch. Saturating: a time from
// the stream is data (PostgreSQL's 'infinity' is INT64_MAX; corrupt bytes are anything),
// and one out of range stays at the end of the range instead of overflowing.
constexpr int64_t PgTimeToUnixMicros(int64_t pg_micros) {
  constexpr int64_t kOffset = kPgEpochUnixSeconds * 1000000;
  return pg_micros > INT64_MAX - kOffset ? INT64_MAX : pg_micros + kOffset;
}
constexpr int64_t UnixMicrosToPgTime(int64_t unix_micros) {
  constexpr int64_t kOffset = kPgEpochUnixSeconds * 1000000;
  return unix_micros < INT64_MIN + kOffset ? INT64_MIN : unix_micros - kOffset;
}
int64_t ToPgTime(std::chrono::system_clock::time_point t);
std::chrono::system_clock::time_point FromPgTime(int64_t pg_micros);
// The current wall-clock time as a TimestampTz (for status updates).
int64_t PgTimeNow();

// XLogData: one chunk of the output plugin's stream (for pgoutput: one message).
struct XLogData {
  Lsn wal_start;          // WAL position of the start of `data` (0 inside some txns)
  Lsn wal_end;            // current end of WAL on the server
  int64_t send_time = 0;  // server clock at transmission (TimestampTz)
  // The plugin's bytes. A view into the buffer that was parsed: valid as long as it is.
  std::string_view data;
};

// Primary keepalive: the server's WAL end; reply_requested asks for a status update now,
// before wal_sender_timeout ends the connection.
struct PrimaryKeepalive {
  Lsn wal_end;
  int64_t send_time = 0;
  bool reply_requested = false;
};

// Standby status update: what the client has written, flushed (made durable: for
// walrelay, acked by Kafka) and applied. The server may recycle WAL before `flush` and
// sets the slot's confirmed_flush_lsn from it.
struct StandbyStatusUpdate {
  Lsn write;
  Lsn flush;
  Lsn apply;
  int64_t client_time = 0;  // TimestampTz
  bool reply_requested = false;
};

using ServerMessage = std::variant<XLogData, PrimaryKeepalive>;

// Parses one CopyData payload sent by the server ('w' or 'k'). Any other type byte, a
// short message, trailing bytes after a keepalive or a reply flag other than 0/1 is
// kDataLoss. The XLogData's `data` views into `payload`.
Result<ServerMessage> ParseServerMessage(std::string_view payload);
Result<XLogData> ParseXLogData(std::string_view payload);
Result<PrimaryKeepalive> ParsePrimaryKeepalive(std::string_view payload);
Result<StandbyStatusUpdate> ParseStandbyStatusUpdate(std::string_view payload);

// Encoders. The Append forms add to `out` (no clearing); the others return a new string.
void AppendStandbyStatusUpdate(const StandbyStatusUpdate& m, std::string& out);
std::string EncodeStandbyStatusUpdate(const StandbyStatusUpdate& m);
// Server-side messages, for tests and fakes of the replication stream.
std::string EncodeXLogData(Lsn wal_start, Lsn wal_end, int64_t send_time, std::string_view data);
std::string EncodePrimaryKeepalive(const PrimaryKeepalive& m);

// Parses a duration setting as SHOW prints it ("60s", "500ms", "1min", "2h", "1d", "0",
// a bare number = milliseconds). Used for wal_sender_timeout.
Result<std::chrono::milliseconds> ParseDurationSetting(std::string_view text);

// How often to send a standby status update while streaming: min(1 s, timeout / 2);
// 1 s when the timeout is 0 (disabled).
std::chrono::milliseconds StatusInterval(std::chrono::milliseconds wal_sender_timeout);

}  // namespace walrelay::slot
