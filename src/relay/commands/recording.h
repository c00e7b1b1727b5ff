// Recordings of a logical replication stream: the raw bytes an output plugin sent (every
// XLogData payload with its LSNs and send time, optionally the keepalives), in a
// versioned binary file that `walrelay record` writes and `walrelay replay` feeds back
// through the relay's Pipeline. The format is specified in docs/recording-format.md;
// summary (all integers little-endian):
//
//   header   "WALRREC1" magic (8) · u32 format version (= 1) · u32 header body length
//            body: i64 created (µs since the Unix epoch) · u64 start LSN ·
//                  str server_version · str plugin · str slot ·
//                  u32 option count · (str name · str value)*        str = u32 len + bytes
//   records  'w' u64 wal_start · u64 wal_end · i64 send_time · u32 len · len bytes
//            'k' u64 wal_end · i64 send_time · u8 reply_requested
//   trailer  'Z' u64 XLogData records · u64 XLogData payload bytes      (a clean end)
//
// RecordingReader is a slot::FrameSource: Read() returns the records in order and
// kEndOfStream after the trailer; SendStatus() only remembers the last flush position.
// Every length is bounds-checked: a truncated or corrupt file gives kDataLoss naming the
// byte offset (a file without its trailer — a recorder killed by SIGKILL — is an error
// unless Options::allow_truncated, which ends the stream at the last complete record).
//
// Thread safety: none; one thread per writer or reader.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/lsn.h"
#include "base/status.h"
#include "slot/replication_connection.h"
#include "slot/wire.h"

namespace walrelay::relay {

inline constexpr std::string_view kRecordingMagic = "WALRREC1";
inline constexpr uint32_t kRecordingFormatVersion = 1;

// The header: what was recorded, from where.
struct RecordingHeader {
  uint32_t format_version = kRecordingFormatVersion;
  int64_t created_unix_us = 0;  // when recording started
  Lsn start_lsn;                // the slot's position when streaming started
  std::string server_version;   // SHOW server_version
  std::string plugin;           // "pgoutput" or "wal2json"
  std::string slot;
  // START_REPLICATION options, in order (e.g. proto_version=1, publication_names=...).
  std::vector<std::pair<std::string, std::string>> options;

  // The value of option `name`, or `fallback`.
  std::string Option(std::string_view name, std::string_view fallback = "") const;
};

// Appends records to a new file. Writes are buffered (1 MiB); Sync() makes everything
// appended so far durable (write + fdatasync); Finish() writes the trailer and syncs.
class RecordingWriter {
 public:
  // Creates (truncating) `path` and writes the header.
  static Result<std::unique_ptr<RecordingWriter>> Create(const std::string& path,
                                                         const RecordingHeader& header);
  ~RecordingWriter();  // closes without a trailer if Finish() was not called
  RecordingWriter(const RecordingWriter&) = delete;
  RecordingWriter& operator=(const RecordingWriter&) = delete;

  Status AppendXLogData(const slot::XLogData& x);
  Status AppendKeepalive(const slot::PrimaryKeepalive& k);
  Status Sync();
  Status Finish();

  uint64_t xlog_records() const { return xlog_records_; }
  uint64_t payload_bytes() const { return payload_bytes_; }
  uint64_t file_bytes() const { return file_bytes_ + buffer_.size(); }

 private:
  RecordingWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status FlushBuffer();

  int fd_;
  std::string path_;
  std::string buffer_;
  uint64_t xlog_records_ = 0, payload_bytes_ = 0, file_bytes_ = 0;
  bool finished_ = false;
};

// Reads a recording as a FrameSource.
class RecordingReader : public slot::FrameSource {
 public:
  struct Options {
    // Sleep before each frame so that frames come out with the gaps of their recorded
    // send times (the first frame at once). Off: as fast as the caller reads.
    bool recorded_pace = false;
    // Return keepalive records as kKeepalive frames (else they are skipped).
    bool keepalives = true;
    // A file that ends at a record boundary without the trailer (the recorder was
    // killed) ends the stream there instead of failing. A partial record still fails.
    bool allow_truncated = false;
  };

  // Opens `path` and parses the header (kDataLoss on a bad magic, version or header).
  static Result<std::unique_ptr<RecordingReader>> Open(const std::string& path, Options options);
  static Result<std::unique_ptr<RecordingReader>> Open(const std::string& path) {
    return Open(path, Options{});
  }
  ~RecordingReader() override;
  RecordingReader(const RecordingReader&) = delete;
  RecordingReader& operator=(const RecordingReader&) = delete;

  const RecordingHeader& header() const { return header_; }

  // The next record as a frame; kEndOfStream after the trailer (and on every later call).
  // `timeout` is ignored (a file never waits), except that in recorded-pace mode a gap
  // longer than `timeout` returns kTimeout and resumes on the next call. XLogData views
  // are valid until the next Read().
  Result<slot::Frame> Read(std::chrono::milliseconds timeout) override;
  // A no-op that remembers the flush position (what a live server would confirm).
  Status SendStatus(Lsn write, Lsn flush, Lsn apply, bool reply_requested) override;

  Lsn last_flush() const { return last_flush_; }
  uint64_t status_updates() const { return status_updates_; }
  uint64_t xlog_records() const { return xlog_records_; }
  uint64_t payload_bytes() const { return payload_bytes_; }
  // Byte offset of the next record in the file.
  uint64_t offset() const { return file_offset_ + pos_; }

 private:
  RecordingReader(int fd, Options options) : fd_(fd), options_(options) {}
  // Makes at least `n` bytes available at buffer_[pos_]; false at a clean EOF before any
  // of them, kDataLoss when the file ends inside them.
  Result<bool> Ensure(size_t n, std::string_view what);
  Status ParseHeader();

  int fd_;
  Options options_;
  RecordingHeader header_;
  std::vector<char> buffer_;
  size_t pos_ = 0, end_ = 0;  // unread bytes are buffer_[pos_, end_)
  uint64_t file_offset_ = 0;  // file offset of buffer_[0]
  bool eof_ = false;          // read() returned 0
  bool ended_ = false;        // trailer seen
  uint64_t xlog_records_ = 0, payload_bytes_ = 0, status_updates_ = 0;
  Lsn last_flush_;
  // Recorded pace: wall-clock origin and the first frame's send time.
  bool pace_started_ = false;
  std::chrono::steady_clock::time_point pace_origin_;
  int64_t first_send_time_ = 0;
};

}  // namespace walrelay::relay
