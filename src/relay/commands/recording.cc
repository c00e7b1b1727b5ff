#include "src/relay/commands/recording.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace walrelay::relay {
namespace {

constexpr size_t kBufferSize = 1 << 20;
constexpr char kXLogTag = 'w';
constexpr char kKeepaliveTag = 'k';
constexpr char kTrailerTag = 'Z';
constexpr size_t kXLogFixed = 1 + 8 + 8 + 8 + 4;
constexpr size_t kKeepaliveSize = 1 + 8 + 8 + 1;
constexpr size_t kTrailerSize = 1 + 8 + 8;
// A sanity bound on one record's payload and on header strings: a corrupt length must not
// make the reader allocate gigabytes. PostgreSQL's CopyData messages are below 1 GB.
constexpr uint32_t kMaxPayload = 1u << 30;
constexpr uint32_t kMaxHeaderBody = 16u << 20;

void PutU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutStr(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

Status ErrnoError(const std::string& what) {
  const int e = errno;
  return UnavailableError(what + ": " + std::strerror(e));
}

// Bounds-checked cursor over the header body.
class BodyReader {
 public:
  BodyReader(std::string_view body, uint64_t base) : body_(body), base_(base) {}
  Status Need(size_t n, std::string_view what) {
    if (body_.size() - pos_ < n) {
      return DataLossError("recording header: " + std::string(what) + " at offset " +
                           std::to_string(base_ + pos_) + " runs past the header's end");
    }
    return Status::Ok();
  }
  Result<uint32_t> U32(std::string_view what) {
    WALRELAY_RETURN_IF_ERROR(Need(4, what));
    uint32_t v = GetU32(body_.data() + pos_);
    pos_ += 4;
    return v;
  }
  Result<uint64_t> U64(std::string_view what) {
    WALRELAY_RETURN_IF_ERROR(Need(8, what));
    uint64_t v = GetU64(body_.data() + pos_);
    pos_ += 8;
    return v;
  }
  Result<std::string> Str(std::string_view what) {
    WALRELAY_ASSIGN_OR_RETURN(uint32_t n, U32(what));
    WALRELAY_RETURN_IF_ERROR(Need(n, what));
    std::string s(body_.substr(pos_, n));
    pos_ += n;
    return s;
  }

 private:
  std::string_view body_;
  uint64_t base_;
  size_t pos_ = 0;
};

}  // namespace

std::string RecordingHeader::Option(std::string_view name, std::string_view fallback) const {
  for (const auto& [k, v] : options) {
    if (k == name) return v;
  }
  return std::string(fallback);
}

// ---- writer

Result<std::unique_ptr<RecordingWriter>> RecordingWriter::Create(const std::string& path,
                                                                 const RecordingHeader& header) {
  // A recording holds every row of the stream (payloads, maybe personal data): owner-only,
  // and never written through a symlink someone else may have planted.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    if (errno == ELOOP) {
      return InvalidArgumentError("cannot create recording " + path +
                                  ": it is a symbolic link; give the real path");
    }
    return ErrnoError("cannot create recording " + path);
  }
  if (::fchmod(fd, 0600) != 0) {  // an existing file keeps its mode through O_TRUNC
    const int e = errno;
    ::close(fd);
    errno = e;
    return ErrnoError("cannot restrict recording " + path + " to its owner");
  }
  std::unique_ptr<RecordingWriter> w(new RecordingWriter(fd, path));
  w->buffer_.reserve(kBufferSize + 64);
  std::string body;
  PutU64(body, static_cast<uint64_t>(header.created_unix_us));
  PutU64(body, header.start_lsn.value);
  PutStr(body, header.server_version);
  PutStr(body, header.plugin);
  PutStr(body, header.slot);
  PutU32(body, static_cast<uint32_t>(header.options.size()));
  for (const auto& [k, v] : header.options) {
    PutStr(body, k);
    PutStr(body, v);
  }
  w->buffer_.append(kRecordingMagic);
  PutU32(w->buffer_, kRecordingFormatVersion);
  PutU32(w->buffer_, static_cast<uint32_t>(body.size()));
  w->buffer_.append(body);
  WALRELAY_RETURN_IF_ERROR(w->FlushBuffer());
  return w;
}

RecordingWriter::~RecordingWriter() {
  if (fd_ >= 0) {
    (void)FlushBuffer();
    ::close(fd_);
  }
}

Status RecordingWriter::FlushBuffer() {
  size_t done = 0;
  while (done < buffer_.size()) {
    ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("writing recording " + path_);
    }
    done += static_cast<size_t>(n);
  }
  file_bytes_ += buffer_.size();
  buffer_.clear();
  return Status::Ok();
}

Status RecordingWriter::AppendXLogData(const slot::XLogData& x) {
  if (finished_) return FailedPreconditionError("recording already finished");
  if (x.data.size() > kMaxPayload) return InvalidArgumentError("XLogData payload over 1 GiB");
  PutU8(buffer_, kXLogTag);
  PutU64(buffer_, x.wal_start.value);
  PutU64(buffer_, x.wal_end.value);
  PutU64(buffer_, static_cast<uint64_t>(x.send_time));
  PutU32(buffer_, static_cast<uint32_t>(x.data.size()));
  buffer_.append(x.data);
  ++xlog_records_;
  payload_bytes_ += x.data.size();
  if (buffer_.size() >= kBufferSize) return FlushBuffer();
  return Status::Ok();
}

Status RecordingWriter::AppendKeepalive(const slot::PrimaryKeepalive& k) {
  if (finished_) return FailedPreconditionError("recording already finished");
  PutU8(buffer_, kKeepaliveTag);
  PutU64(buffer_, k.wal_end.value);
  PutU64(buffer_, static_cast<uint64_t>(k.send_time));
  PutU8(buffer_, k.reply_requested ? 1 : 0);
  if (buffer_.size() >= kBufferSize) return FlushBuffer();
  return Status::Ok();
}

Status RecordingWriter::Sync() {
  WALRELAY_RETURN_IF_ERROR(FlushBuffer());
  if (::fdatasync(fd_) != 0) return ErrnoError("fdatasync " + path_);
  return Status::Ok();
}

Status RecordingWriter::Finish() {
  if (finished_) return Status::Ok();
  PutU8(buffer_, kTrailerTag);
  PutU64(buffer_, xlog_records_);
  PutU64(buffer_, payload_bytes_);
  finished_ = true;
  WALRELAY_RETURN_IF_ERROR(FlushBuffer());
  if (::fsync(fd_) != 0) return ErrnoError("fsync " + path_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return ErrnoError("close " + path_);
  }
  fd_ = -1;
  return Status::Ok();
}

// ---- reader

Result<std::unique_ptr<RecordingReader>> RecordingReader::Open(const std::string& path,
                                                               Options options) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    std::string msg = "cannot open recording " + path + ": " + std::strerror(e);
    return e == ENOENT ? NotFoundError(msg) : UnavailableError(msg);
  }
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<RecordingReader> r(new RecordingReader(fd, options));
  r->buffer_.resize(kBufferSize);
  Status st = r->ParseHeader();
  if (!st.ok()) return st.WithContext(path);
  return r;
}

RecordingReader::~RecordingReader() {
  if (fd_ >= 0) ::close(fd_);
}

Result<bool> RecordingReader::Ensure(size_t n, std::string_view what) {
  if (end_ - pos_ >= n) return true;
  if (pos_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + pos_, end_ - pos_);
    file_offset_ += pos_;
    end_ -= pos_;
    pos_ = 0;
  }
  if (buffer_.size() < n) buffer_.resize(n);
  while (end_ < n && !eof_) {
    ssize_t got = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("reading recording");
    }
    if (got == 0) eof_ = true;
    end_ += static_cast<size_t>(got);
  }
  if (end_ >= n) return true;
  if (end_ == 0) return false;  // clean EOF: nothing of it
  return DataLossError("truncated recording: " + std::string(what) + " at offset " +
                       std::to_string(file_offset_) + " needs " + std::to_string(n) +
                       " bytes, the file ends at offset " + std::to_string(file_offset_ + end_));
}

Status RecordingReader::ParseHeader() {
  const size_t fixed = kRecordingMagic.size() + 4 + 4;
  WALRELAY_ASSIGN_OR_RETURN(bool any, Ensure(fixed, "header"));
  if (!any) return DataLossError("empty file: not a walrelay recording (offset 0)");
  const char* p = buffer_.data();
  if (std::string_view(p, kRecordingMagic.size()) != kRecordingMagic) {
    return DataLossError("not a walrelay recording: bad magic at offset 0");
  }
  header_.format_version = GetU32(p + kRecordingMagic.size());
  if (header_.format_version != kRecordingFormatVersion) {
    return DataLossError(
        "unsupported recording format version " + std::to_string(header_.format_version) +
        " at offset 8 (this build reads " + std::to_string(kRecordingFormatVersion) + ")");
  }
  const uint32_t body_len = GetU32(p + kRecordingMagic.size() + 4);
  if (body_len > kMaxHeaderBody) {
    return DataLossError("corrupt recording: header length " + std::to_string(body_len) +
                         " at offset 12 is implausible");
  }
  WALRELAY_ASSIGN_OR_RETURN(any, Ensure(fixed + body_len, "header body"));
  if (!any) return DataLossError("truncated recording: header body at offset 16");
  BodyReader b(std::string_view(buffer_.data() + fixed, body_len), fixed);
  WALRELAY_ASSIGN_OR_RETURN(uint64_t created, b.U64("creation time"));
  header_.created_unix_us = static_cast<int64_t>(created);
  WALRELAY_ASSIGN_OR_RETURN(header_.start_lsn.value, b.U64("start LSN"));
  WALRELAY_ASSIGN_OR_RETURN(header_.server_version, b.Str("server version"));
  WALRELAY_ASSIGN_OR_RETURN(header_.plugin, b.Str("plugin"));
  WALRELAY_ASSIGN_OR_RETURN(header_.slot, b.Str("slot"));
  WALRELAY_ASSIGN_OR_RETURN(uint32_t n, b.U32("option count"));
  for (uint32_t i = 0; i < n; ++i) {
    WALRELAY_ASSIGN_OR_RETURN(std::string k, b.Str("option name"));
    WALRELAY_ASSIGN_OR_RETURN(std::string v, b.Str("option value"));
    header_.options.emplace_back(std::move(k), std::move(v));
  }
  // Unknown trailing header bytes are allowed (later minor additions); skip them.
  pos_ = fixed + body_len;
  return Status::Ok();
}

Result<slot::Frame> RecordingReader::Read(std::chrono::milliseconds timeout) {
  slot::Frame frame;
  for (;;) {
    if (ended_) {
      frame.kind = slot::Frame::Kind::kEndOfStream;
      return frame;
    }
    const uint64_t at = offset();
    WALRELAY_ASSIGN_OR_RETURN(bool any, Ensure(1, "record type"));
    if (!any) {
      if (options_.allow_truncated) {
        ended_ = true;
        continue;
      }
      return DataLossError("truncated recording: no end marker, the file ends at offset " +
                           std::to_string(at) + " after " + std::to_string(xlog_records_) +
                           " records (the recorder did not finish; replay with truncation "
                           "allowed to use what is there)");
    }
    const char tag = buffer_[pos_];
    int64_t send_time = 0;
    size_t size = 0;
    if (tag == kXLogTag) {
      WALRELAY_ASSIGN_OR_RETURN(any, Ensure(kXLogFixed, "XLogData record"));
      const char* p = buffer_.data() + pos_;
      const uint32_t len = GetU32(p + 25);
      if (len > kMaxPayload) {
        return DataLossError("corrupt recording: XLogData length " + std::to_string(len) +
                             " at offset " + std::to_string(at) + " is implausible");
      }
      WALRELAY_ASSIGN_OR_RETURN(any, Ensure(kXLogFixed + len, "XLogData payload"));
      p = buffer_.data() + pos_;
      frame.kind = slot::Frame::Kind::kXLogData;
      frame.xlog.wal_start = Lsn(GetU64(p + 1));
      frame.xlog.wal_end = Lsn(GetU64(p + 9));
      frame.xlog.send_time = static_cast<int64_t>(GetU64(p + 17));
      frame.xlog.data = std::string_view(p + kXLogFixed, len);
      send_time = frame.xlog.send_time;
      size = kXLogFixed + len;
    } else if (tag == kKeepaliveTag) {
      WALRELAY_ASSIGN_OR_RETURN(any, Ensure(kKeepaliveSize, "keepalive record"));
      const char* p = buffer_.data() + pos_;
      const uint8_t reply = static_cast<uint8_t>(p[17]);
      if (reply > 1) {
        return DataLossError("corrupt recording: keepalive reply flag " + std::to_string(reply) +
                             " at offset " + std::to_string(at + 17));
      }
      frame.kind = slot::Frame::Kind::kKeepalive;
      frame.keepalive.wal_end = Lsn(GetU64(p + 1));
      frame.keepalive.send_time = static_cast<int64_t>(GetU64(p + 9));
      frame.keepalive.reply_requested = reply == 1;
      send_time = frame.keepalive.send_time;
      size = kKeepaliveSize;
    } else if (tag == kTrailerTag) {
      WALRELAY_ASSIGN_OR_RETURN(any, Ensure(kTrailerSize, "end marker"));
      const char* p = buffer_.data() + pos_;
      const uint64_t records = GetU64(p + 1), bytes = GetU64(p + 9);
      if (records != xlog_records_ || bytes != payload_bytes_) {
        return DataLossError("corrupt recording: the end marker at offset " + std::to_string(at) +
                             " counts " + std::to_string(records) + " records / " +
                             std::to_string(bytes) + " bytes, the file held " +
                             std::to_string(xlog_records_) + " / " +
                             std::to_string(payload_bytes_));
      }
      pos_ += kTrailerSize;
      ended_ = true;
      continue;
    } else {
      return DataLossError("corrupt recording: unknown record type byte " +
                           std::to_string(static_cast<uint8_t>(tag)) + " at offset " +
                           std::to_string(at));
    }

    if (options_.recorded_pace) {
      const auto now = std::chrono::steady_clock::now();
      if (!pace_started_) {
        pace_started_ = true;
        pace_origin_ = now;
        first_send_time_ = send_time;
      }
      const auto due = pace_origin_ + std::chrono::microseconds(
                                          std::max<int64_t>(0, send_time - first_send_time_));
      if (due > now) {
        if (due - now > timeout) {
          // Not due within the caller's wait: give the caller its timeout; the record is
          // read again next time (pos_ is not advanced).
          std::this_thread::sleep_for(timeout);
          return slot::Frame{};
        }
        std::this_thread::sleep_until(due);
      }
    }
    pos_ += size;
    if (frame.kind == slot::Frame::Kind::kXLogData) {
      ++xlog_records_;
      payload_bytes_ += frame.xlog.data.size();
      return frame;
    }
    if (options_.keepalives) return frame;
    frame = slot::Frame{};
  }
}

Status RecordingReader::SendStatus(Lsn, Lsn flush, Lsn, bool) {
  if (flush > last_flush_) last_flush_ = flush;
  ++status_updates_;
  return Status::Ok();
}

}  // namespace walrelay::relay
