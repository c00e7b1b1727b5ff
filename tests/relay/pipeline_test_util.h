// Shared pieces of the tests that drive the real Pipeline without PostgreSQL or Kafka: a
// scripted replication stream and a sink that accepts every record and never acknowledges
// one (a broker that is down), keeping each record's header names and values.
#pragma once

#include <atomic>
#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <optional>

#include "base/lsn.h"
#include "slot/replication_connection.h"
#include "src/relay/core/dead_letter.h"
#include "src/relay/core/pipeline.h"
#include "tests/decoder/wire_builder.h"

namespace walrelay::relay::testing {

// An XLogData frame at `lsn` carrying `data` (which must outlive the frame's use).
inline slot::Frame XLogFrame(Lsn lsn, const std::string& data) {
  slot::Frame f;
  f.kind = slot::Frame::Kind::kXLogData;
  f.xlog.wal_start = lsn;
  f.xlog.wal_end = lsn;
  f.xlog.data = data;
  return f;
}

inline slot::Frame EndOfStream() {
  slot::Frame f;
  f.kind = slot::Frame::Kind::kEndOfStream;
  return f;
}

// One outbox event in the first transaction (its headers column `headers`, NULL when
// nullopt), then `empty` transactions without events, one message per frame, generated as
// read (the script itself costs no memory). Records the last flush position sent.
class ScriptedSource : public slot::FrameSource {
 public:
  explicit ScriptedSource(uint64_t empty, std::optional<std::string> headers = std::nullopt)
      : empty_(empty), headers_(std::move(headers)) {}
  Result<slot::Frame> Read(std::chrono::milliseconds) override {
    namespace wire = pgoutput::testing::wire;
    using pgoutput::testing::Null;
    using pgoutput::testing::Text;
    // Transaction i commits at kBase + 100 i (its Begin's final LSN) and ends 10 later.
    const uint64_t tx = step_ < 4 ? 0 : 1 + (step_ - 4) / 2;
    const uint64_t lsn = 0x1000000 + tx * 100;
    switch (step_ < 4 ? step_ : 4 + (step_ - 4) % 2) {
      case 0:
        data_ = wire::OutboxRelation(16384);
        break;
      case 1:
        data_ = wire::Begin(lsn, 0, 700);
        break;
      case 2:
        data_ = wire::Insert({}, 16384,
                             {Text("1"), Text("0190a0c4-7d2e-7000-8000-000000000001"),
                              Text("payment"), Text("agg-1"), Null(), Text("PaymentCaptured"),
                              Text("{}"), headers_ ? Text(*headers_) : Null(),
                              Text("2026-12-03 09:00:00+00")});
        break;
      case 3:
        data_ = wire::Commit(lsn, lsn + 10, 0);
        break;
      case 4:  // an empty transaction (PostgreSQL 14, wal2json, a wider publication)
        data_ = wire::Begin(lsn, 0, static_cast<uint32_t>(700 + tx));
        break;
      case 5:
        data_ = wire::Commit(lsn, lsn + 10, 0);
        break;
    }
    if (step_ >= 4 + 2 * empty_) return EndOfStream();
    // As the walsender sends them: a Commit's frame is at the transaction's end LSN.
    const bool commit = step_ == 3 || (step_ >= 4 && (step_ - 4) % 2 == 1);
    ++step_;
    return XLogFrame(Lsn(commit ? lsn + 10 : lsn), data_);
  }
  Status SendStatus(Lsn, Lsn flush, Lsn, bool) override {
    last_flush = flush;
    return Status::Ok();
  }
  void SetInTransaction(bool in_transaction) override {
    in_transaction_hints += in_transaction ? 'T' : 'E';
  }
  Lsn last_flush;
  std::string in_transaction_hints;  // 'T' for each SetInTransaction(true), 'E' for false

 private:
  const uint64_t empty_;
  const std::optional<std::string> headers_;
  uint64_t step_ = 0;
  std::string data_;
};

class HoldingSink : public RecordSink {
 public:
  void SetDeliveryHandler(DeliveryHandler handler) override { handler_ = std::move(handler); }
  Status Produce(std::string_view, std::string_view, std::string_view,
                 std::span<const kafka::Header> headers, uint64_t, int64_t timestamp_ms) override {
    ++produced;
    timestamps_ms.push_back(timestamp_ms);
    std::vector<std::string> names;
    std::vector<std::optional<std::string>> values;
    for (const auto& h : headers) {
      names.emplace_back(h.name);
      // A null data pointer is what the producer hands librdkafka as "no value".
      values.push_back(h.value.data() == nullptr ? std::nullopt
                                                 : std::optional<std::string>(h.value));
    }
    header_names.push_back(std::move(names));
    header_values.push_back(std::move(values));
    return Status::Ok();
  }
  int Poll(std::chrono::milliseconds) override { return 0; }
  Status Flush(std::chrono::milliseconds) override { return DeadlineExceededError("held"); }
  Status Fatal() const override { return Status::Ok(); }
  bool has_handler() const { return static_cast<bool>(handler_); }

  int produced = 0;
  std::vector<int64_t> timestamps_ms;                    // per record, 0 = produce time
  std::vector<std::vector<std::string>> header_names;  // per record
  std::vector<std::vector<std::optional<std::string>>> header_values;  // nullopt: no value

 private:
  DeliveryHandler handler_;
};

// Runs `source` through a real pipeline under `config` (shutdown timeout 0, dead letters
// logged) into `sink` until the source ends, which is not an error here.
inline Status RunUntilEndOfStream(RelayConfig config, RelayStats& stats,
                                  slot::FrameSource& source, RecordSink& sink) {
  config.shutdown_timeout = std::chrono::milliseconds(0);
  LoggingDeadLetterSink dead_letters;
  Pipeline::Options options;
  options.end_of_stream_is_error = false;
  Pipeline pipeline(config, stats, source, sink, dead_letters, options);
  std::atomic<bool> stop{false};
  return pipeline.Run(stop);
}

}  // namespace walrelay::relay::testing
