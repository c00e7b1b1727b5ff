// Shared pieces of the tests that drive the real Pipeline without PostgreSQL or Kafka: a
// frame for scripted replication streams and a sink that accepts every record and never
// acknowledges one (a broker that is down), keeping each record's header names.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/lsn.h"
#include "slot/replication_connection.h"
#include "src/relay/pipeline.h"

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

class HoldingSink : public RecordSink {
 public:
  void SetDeliveryHandler(DeliveryHandler handler) override { handler_ = std::move(handler); }
  Status Produce(std::string_view, std::string_view, std::string_view,
                 std::span<const kafka::Header> headers, uint64_t) override {
    ++produced;
    std::vector<std::string> names;
    for (const auto& h : headers) names.emplace_back(h.name);
    header_names.push_back(std::move(names));
    return Status::Ok();
  }
  int Poll(std::chrono::milliseconds) override { return 0; }
  Status Flush(std::chrono::milliseconds) override { return DeadlineExceededError("held"); }
  Status Fatal() const override { return Status::Ok(); }
  bool has_handler() const { return static_cast<bool>(handler_); }

  int produced = 0;
  std::vector<std::vector<std::string>> header_names;  // per record

 private:
  DeliveryHandler handler_;
};

}  // namespace walrelay::relay::testing
