// The Pipeline against streams a correct walsender never sends: what it refuses and what
// it then confirms (nothing past the last good transaction).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/relay/dead_letter.h"
#include "src/relay/pipeline.h"
#include "tests/relay/pipeline_test_util.h"

namespace walrelay::relay {
namespace {

namespace wire = pgoutput::testing::wire;
using pgoutput::testing::Null;
using pgoutput::testing::Text;

// Replays fixed (frame LSN, bytes) pairs, then ends; records every flush position sent.
class ListSource : public slot::FrameSource {
 public:
  explicit ListSource(std::vector<std::pair<uint64_t, std::string>> frames)
      : frames_(std::move(frames)) {}
  Result<slot::Frame> Read(std::chrono::milliseconds) override {
    if (next_ == frames_.size()) return testing::EndOfStream();
    const auto& [lsn, bytes] = frames_[next_++];
    return testing::XLogFrame(Lsn(lsn), bytes);
  }
  Status SendStatus(Lsn, Lsn flush, Lsn, bool) override {
    flushes.push_back(flush);
    return Status::Ok();
  }
  std::vector<Lsn> flushes;

 private:
  std::vector<std::pair<uint64_t, std::string>> frames_;
  size_t next_ = 0;
};

std::vector<std::pair<uint64_t, std::string>> OneEventTransaction(uint64_t final_lsn,
                                                                  uint64_t end_lsn,
                                                                  uint64_t commit_frame) {
  return {{0x1000, wire::OutboxRelation(16384)},
          {0x1000, wire::Begin(final_lsn, 0, 700)},
          {0x1100, wire::Insert({}, 16384,
                                {Text("1"), Text("0190a0c4-7d2e-7000-8000-000000000001"),
                                 Text("payment"), Text("agg-1"), Null(), Text("PaymentCaptured"),
                                 Text("{}"), Null(), Text("2026-12-04 09:00:00+00")})},
          {commit_frame, wire::Commit(final_lsn, end_lsn, 0)}};
}

Status RunToEnd(ListSource& source, NullSink& sink) {
  RelayConfig config;
  config.shutdown_timeout = std::chrono::milliseconds(0);
  RelayStats stats;
  LoggingDeadLetterSink dead_letters;
  Pipeline::Options options;
  options.end_of_stream_is_error = false;
  Pipeline pipeline(config, stats, source, sink, dead_letters, options);
  std::atomic<bool> stop{false};
  return pipeline.Run(stop);
}

// The walsender sends a Commit in a frame at the transaction's end LSN. A Commit that
// claims to end further would have the relay confirm WAL the server never sent (the slot
// would skip it for good): the session ends with the reason, nothing of it confirmed.
TEST(PipelineTest, CommitClaimingWalPastItsFrameIsRefusedAndNotConfirmed) {
  ListSource good(OneEventTransaction(0x1200, 0x1230, 0x1230));
  NullSink good_sink;
  ASSERT_TRUE(RunToEnd(good, good_sink).ok());
  ASSERT_FALSE(good.flushes.empty());
  EXPECT_EQ(good.flushes.back(), Lsn(0x1230));

  ListSource corrupt(OneEventTransaction(0x1200, 0x9000000, 0x1230));
  NullSink sink;
  const Status st = RunToEnd(corrupt, sink);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("claims to end at 0/9000000, past the WAL position 0/1230"),
            std::string::npos)
      << st.message();
  for (Lsn flush : corrupt.flushes) EXPECT_EQ(flush, Lsn()) << "confirmed a corrupt commit";
}

}  // namespace
}  // namespace walrelay::relay
