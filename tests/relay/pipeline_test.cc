// The Pipeline against streams a correct walsender never sends: what it refuses and what
// it then confirms (nothing past the last good transaction); and how it waits for the
// database while Kafka holds its events.
#include "src/relay/core/pipeline.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "src/kafka/mock_cluster.h"
#include "src/relay/core/dead_letter.h"
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
  RelayStats stats;
  return testing::RunUntilEndOfStream(RelayConfig(), stats, source, sink);
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

// A stop (SIGTERM) requested inside a source transaction, its Insert read and its Commit
// not yet: pgoutput sends a transaction's messages together once it committed, so the
// Commit is already on its way. The relay reads on to it and confirms the transaction;
// before, it stopped there with the event published and acknowledged but its transaction
// unconfirmed, so the next start sent it again (scripts/image-check.sh caught one such
// repeat after a clean stop in CI, 2026-12-07).
TEST(PipelineTest, StopInsideATransactionReadsOnToItsCommitAndConfirmsIt) {
  class StopAfterInsert : public ListSource {
   public:
    StopAfterInsert(std::vector<std::pair<uint64_t, std::string>> frames, std::atomic<bool>* stop)
        : ListSource(std::move(frames)), stop_(stop) {}
    Result<slot::Frame> Read(std::chrono::milliseconds timeout) override {
      if (++reads_ == 3) stop_->store(true);  // frame 3 is the Insert
      return ListSource::Read(timeout);
    }

   private:
    std::atomic<bool>* stop_;
    int reads_ = 0;
  };
  std::atomic<bool> stop{false};
  StopAfterInsert source(OneEventTransaction(0x1200, 0x1230, 0x1230), &stop);
  NullSink sink;
  const RelayConfig config;  // the pipeline keeps a reference: it must outlive it
  RelayStats stats;
  LoggingDeadLetterSink dead_letters;
  Pipeline pipeline(config, stats, source, sink, dead_letters, Pipeline::Options());
  const Status run = pipeline.Run(stop);
  ASSERT_TRUE(run.ok()) << run.ToString();
  ASSERT_TRUE(stop.load()) << "the premise: the stop came inside the transaction";
  EXPECT_EQ(sink.records(), 1u);
  ASSERT_FALSE(source.flushes.empty());
  EXPECT_EQ(source.flushes.back(), Lsn(0x1230))
      << "the stopped relay left a published event's transaction unconfirmed";
}

// Hands out the frames the test released, then behaves as an idle walsender socket: waits
// the whole timeout unless the wake descriptor (SetWakeFd) becomes readable, and drains it
// then, as FrameSource's contract says. Counts reads and keeps the last flush position
// sent; thread-safe for the test thread's looks.
class IdleSource : public slot::FrameSource {
 public:
  explicit IdleSource(std::vector<std::pair<uint64_t, std::string>> frames)
      : frames_(std::move(frames)) {}
  Result<slot::Frame> Read(std::chrono::milliseconds timeout) override {
    reads.fetch_add(1);
    if (next_ < released.load()) {
      const auto& [lsn, bytes] = frames_[next_++];
      return testing::XLogFrame(Lsn(lsn), bytes);
    }
    pollfd pfd{wake_fd_.load(), POLLIN, 0};
    if (::poll(&pfd, pfd.fd >= 0 ? 1 : 0, static_cast<int>(timeout.count())) == 1) {
      uint64_t count;
      EXPECT_EQ(::read(pfd.fd, &count, sizeof count), static_cast<ssize_t>(sizeof count));
    }
    return slot::Frame{};
  }
  Status SendStatus(Lsn, Lsn flush, Lsn, bool) override {
    flushed.store(flush.value);
    return Status::Ok();
  }
  void SetWakeFd(int fd) override { wake_fd_.store(fd); }

  std::atomic<size_t> released{0};
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> flushed{0};
  int wake_fd() const { return wake_fd_.load(); }

 private:
  std::vector<std::pair<uint64_t, std::string>> frames_;
  size_t next_ = 0;
  std::atomic<int> wake_fd_{-1};
};

// While Kafka holds an event (every broker down), an idle relay sleeps on the database
// socket and the producer's wake descriptor instead of polling every millisecond (it did:
// about 1,000 wake-ups a second for as long as the outage lasted), and it still sees the
// ack at once when the brokers return.
// The pipeline tells its source where each transaction begins and ends: the replication
// connection judges its busy-stream naps separately inside and between transactions
// (slot::NapRule). Three transactions: one with an outbox row, two empty.
TEST(PipelineTest, TellsTheSourceWhereTransactionsBeginAndEnd) {
  RelayStats stats;
  testing::ScriptedSource source(2);
  testing::HoldingSink sink;
  const Status run = testing::RunUntilEndOfStream(RelayConfig(), stats, source, sink);
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_EQ(stats.transactions.load(), 3u);
  EXPECT_EQ(source.in_transaction_hints, "TETETE");
}

TEST(PipelineTest, WaitingOnKafkaSleepsUntilAnAckArrives) {
  auto cluster = kafka::MockCluster::Create(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  ASSERT_TRUE((*cluster)->CreateTopic("outbox.payment", 1).ok());
  kafka::ProducerOptions popts;
  popts.properties.emplace_back("bootstrap.servers", (*cluster)->bootstraps());
  auto sink = KafkaSink::Create(popts);
  ASSERT_TRUE(sink.ok()) << sink.status().ToString();

  std::vector<std::pair<uint64_t, std::string>> frames =
      OneEventTransaction(0x1200, 0x1230, 0x1230);
  for (auto& f : OneEventTransaction(0x2200, 0x2230, 0x2230)) {
    if (f.first == 0x1000) f.first = 0x2200;
    frames.push_back(f);
  }
  IdleSource source(frames);
  RelayConfig config;
  config.shutdown_timeout = std::chrono::milliseconds(0);
  RelayStats stats;
  LoggingDeadLetterSink dead_letters;
  Pipeline::Options options;
  options.status_interval = std::chrono::milliseconds(20);
  Pipeline pipeline(config, stats, source, **sink, dead_letters, options);
  std::atomic<bool> stop{false};
  Status result;
  std::thread runner([&] { result = pipeline.Run(stop); });
  auto wait_flushed = [&](uint64_t lsn) {
    for (int i = 0; i < 3000 && source.flushed.load() < lsn; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return source.flushed.load() >= lsn;
  };

  source.released.store(4);  // the first transaction, acked by a live broker
  EXPECT_TRUE(wait_flushed(0x1230));
  EXPECT_GE(source.wake_fd(), 0) << "the Kafka sink gives the source its wake descriptor";

  ASSERT_TRUE((*cluster)->SetAllBrokersDown().ok());
  source.released.store(8);  // the second one waits for Kafka
  for (int i = 0; i < 500 && stats.in_flight_events.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(stats.in_flight_events.load(), 1u);
  const uint64_t reads_before = source.reads.load();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const uint64_t reads_in_a_second = source.reads.load() - reads_before;
  EXPECT_LE(reads_in_a_second, 60u) << "the relay polled instead of sleeping";
  EXPECT_EQ(source.flushed.load(), 0x1230u) << "nothing unacked is confirmed";

  ASSERT_TRUE((*cluster)->SetAllBrokersUp().ok());
  EXPECT_TRUE(wait_flushed(0x2230));
  stop.store(true);
  runner.join();
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(source.wake_fd(), -1) << "the descriptor is taken back when the session ends";
}

}  // namespace
}  // namespace walrelay::relay
