// libFuzzer target for what any database role can write into the stream: OutboxMapper and
// the Pipeline behind the decoders, fed decoded messages exactly as the relay is.
//
// Input: byte 0 picks the session: protocol version (b % 4 + 1), wal2json instead of
// pgoutput (b & 0x10), an in-flight cap of two events (b & 0x20, so backpressure runs).
// Then frames: [Int16 length][bytes] is one XLogData frame (one pgoutput message, or one
// wal2json document) at the next LSN; length 0xFFFF is a keepalive that asks for a reply.
// The sink acknowledges every record at the next poll and refuses, as a broker refuses a
// record too large, every record whose value contains "REFUSE" (dead-lettered).
//
// Checked on every input (any violation aborts): the confirmed (flush) position sent to
// the server never goes back and never passes the end of what was read; every record has
// a valid topic, a non-empty key and exactly one event id header; every dead letter has a
// reason and a source; no more records and letters than frames. Errors from Run() are fine
// (malformed input ends a session; the next one would replay): crashes, sanitizer reports
// and broken checks are bugs.
// Build: cmake -DWALRELAY_FUZZ=ON with clang; seeds: tests/decoder/corpus (seq_*).
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "src/relay/core/pipeline.h"

namespace {

using namespace walrelay;  // NOLINT: test-only file

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "pipeline_fuzz: %s\n", what);
  std::abort();
}

class FuzzSource : public slot::FrameSource {
 public:
  explicit FuzzSource(std::string_view input) : input_(input) {}

  Result<slot::Frame> Read(std::chrono::milliseconds) override {
    slot::Frame f;
    if (pos_ + 2 > input_.size()) {
      f.kind = slot::Frame::Kind::kEndOfStream;
      return f;
    }
    const size_t len = (size_t{static_cast<uint8_t>(input_[pos_])} << 8) |
                       static_cast<uint8_t>(input_[pos_ + 1]);
    pos_ += 2;
    if (len == 0xFFFF) {
      f.kind = slot::Frame::Kind::kKeepalive;
      f.keepalive.wal_end = Lsn(end_);
      f.keepalive.reply_requested = true;
      return f;
    }
    const size_t n = std::min(len, input_.size() - pos_);
    copy_.assign(input_.substr(pos_, n));  // the view dies at the next Read(), as libpq's
    pos_ += n;
    f.kind = slot::Frame::Kind::kXLogData;
    f.xlog.wal_start = Lsn(end_);
    end_ += n + 1;
    f.xlog.wal_end = Lsn(end_);
    f.xlog.data = copy_;
    ++frames_;
    return f;
  }

  Status SendStatus(Lsn, Lsn flush, Lsn, bool) override {
    if (flush.value < last_flush_) Fail("the confirmed position went back");
    if (flush.value > end_) Fail("confirmed past the end of what was read");
    last_flush_ = flush.value;
    return Status::Ok();
  }

  uint64_t frames() const { return frames_; }

 private:
  std::string_view input_;
  size_t pos_ = 0;
  std::string copy_;
  // Frames start at 1/0, above the LSNs the seeds carry, so their commits are in range.
  uint64_t end_ = uint64_t{1} << 32, last_flush_ = 0, frames_ = 0;
};

class CheckingSink : public relay::RecordSink {
 public:
  explicit CheckingSink(const relay::HeaderNames& names) : names_(names) {}
  void SetDeliveryHandler(DeliveryHandler handler) override { handler_ = std::move(handler); }
  Status Produce(std::string_view topic, std::string_view key, std::string_view value,
                 std::span<const kafka::Header> headers, uint64_t cookie, int64_t) override {
    if (topic.empty() || topic.size() > 249) Fail("record with an invalid topic");
    if (key.empty()) Fail("record with an empty key");
    int ids = 0;
    for (const kafka::Header& h : headers) ids += h.name == names_.event_id;
    if (ids != 1) Fail("record without exactly one event id header");
    if (value.find("REFUSE") != std::string_view::npos) {
      return InvalidArgumentError("record refused by the test sink");
    }
    ++records_;
    pending_.emplace_back(cookie, key.size() + value.size());
    return Status::Ok();
  }
  int Poll(std::chrono::milliseconds) override {
    std::vector<std::pair<uint64_t, size_t>> acks;
    acks.swap(pending_);
    for (const auto& [cookie, bytes] : acks) {
      if (handler_) handler_(cookie, Status::Ok(), bytes, nullptr);
    }
    return static_cast<int>(acks.size());
  }
  Status Flush(std::chrono::milliseconds timeout) override {
    Poll(timeout);
    return Status::Ok();
  }
  Status Fatal() const override { return Status::Ok(); }
  uint64_t records() const { return records_; }

 private:
  const relay::HeaderNames& names_;
  DeliveryHandler handler_;
  std::vector<std::pair<uint64_t, size_t>> pending_;
  uint64_t records_ = 0;
};

class CheckingDeadLetters : public relay::DeadLetterSink {
 public:
  Status Write(const relay::DeadLetter& letter) override {
    if (letter.reason.empty()) Fail("dead letter without a reason");
    if (letter.source.empty()) Fail("dead letter without a source");
    ++letters_;
    return Status::Ok();
  }
  uint64_t letters() const { return letters_; }

 private:
  uint64_t letters_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  if (size < 1) return 0;
  relay::RelayConfig config;
  config.tables = {"public.outbox"};
  config.message_prefix = "outbox";
  if (data[0] & 0x10) config.plugin = "wal2json";
  if (data[0] & 0x20) config.max_in_flight_events = 2;
  config.shutdown_timeout = std::chrono::milliseconds(0);
  relay::Pipeline::Options options;
  options.protocol_version = data[0] % 4 + 1;
  options.end_of_stream_is_error = false;
  options.status_interval = std::chrono::milliseconds(0);

  FuzzSource source(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  CheckingSink sink(config.header_names);
  CheckingDeadLetters letters;
  relay::RelayStats stats;
  std::atomic<bool> stop{false};
  {
    relay::Pipeline pipeline(config, stats, source, sink, letters, options);
    (void)pipeline.Run(stop).ok();
  }
  if (sink.records() + letters.letters() > source.frames()) Fail("more events out than frames in");
  return 0;
}
