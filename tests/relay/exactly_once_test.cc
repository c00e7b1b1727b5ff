// Exactly-once mode's broker-free decisions (src/relay/core/exactly_once.h).
#include "src/relay/core/exactly_once.h"

#include <gtest/gtest.h>

namespace walrelay::relay {
namespace {

const StreamIdentity kStream{"7312345678901234567", "app", "walrelay"};

TEST(ExactlyOnceTest, TheStreamIdentityNamesTheCheckpointAndTheTransactionalId) {
  EXPECT_EQ(kStream.Key(), "7312345678901234567/app/walrelay");
  EXPECT_EQ(kStream.TransactionalId(), "walrelay-7312345678901234567-app-walrelay");
}

TEST(ExactlyOnceTest, ACheckpointRoundTripsInThePositionFormat) {
  const Checkpoint c{Lsn(0x16B374D848), 745, 1764681600000000, 3};
  const std::string text = FormatCheckpoint(c);
  EXPECT_EQ(text, "lsn=16/B374D848;ordinal=3;xid=745;commit_time_us=1764681600000000;"
                  "source=checkpoint");
  const auto back = ParseCheckpoint(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->commit_lsn, c.commit_lsn);
  EXPECT_EQ(back->xid, 745u);
  EXPECT_EQ(back->commit_time_us, 1764681600000000);
  EXPECT_EQ(back->events, 3u);
  EXPECT_FALSE(ParseCheckpoint("lsn=16/B374D848;ordinal=3;xid=745;commit_time_us=1;"
                               "source=public.outbox"))
      << "an event's position is not a checkpoint";
  EXPECT_FALSE(ParseCheckpoint("garbage"));
}

TEST(ExactlyOnceTest, ResumeSkipsWhatTheCheckpointHoldsAndRefusesAnotherHistory) {
  const Lsn checkpoint_lsn(0x2000), wal_end(0x3000);
  // First start: nothing to skip.
  ResumeDecision d = DecideResume(std::nullopt, wal_end, "walrelay.checkpoints", kStream);
  EXPECT_EQ(d.kind, ResumeDecision::Kind::kFromSlot);
  EXPECT_FALSE(d.AlreadyPublished(Lsn(0x10)));
  // The usual restart: what the checkpoint covers is skipped, the first after it is not.
  d = DecideResume(Checkpoint{checkpoint_lsn}, wal_end, "walrelay.checkpoints", kStream);
  ASSERT_EQ(d.kind, ResumeDecision::Kind::kSkipThrough);
  EXPECT_TRUE(d.AlreadyPublished(Lsn(0x1800)));
  EXPECT_TRUE(d.AlreadyPublished(checkpoint_lsn)) << "the checkpoint's own transaction";
  EXPECT_FALSE(d.AlreadyPublished(Lsn(0x2001))) << "the first after it is published";
  // Ahead of the server: another history.
  d = DecideResume(Checkpoint{Lsn(0x4000)}, wal_end, "walrelay.checkpoints", kStream);
  ASSERT_EQ(d.kind, ResumeDecision::Kind::kRefuse);
  EXPECT_NE(d.message.find("ahead of the server's WAL (0/3000)"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("(0/4000)"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("7312345678901234567/app/walrelay"), std::string::npos) << d.message;
  EXPECT_FALSE(d.AlreadyPublished(Lsn(0x10))) << "a refusal skips nothing";
}

TEST(ExactlyOnceTest, KafkaTransactionsHoldWholeSourceTransactionsAndBoundTheConfirmation) {
  using namespace std::chrono_literals;
  TransactionBatcher batcher(100ms, 1000);
  const auto t0 = TransactionBatcher::Clock::now();
  // A source transaction without records (e.g. only dead letters or other tables):
  // nothing waits in Kafka, so it is confirmable at once.
  EXPECT_FALSE(batcher.OnSourceCommit(Checkpoint{Lsn(0x100)}, Lsn(0x110), t0));
  EXPECT_EQ(batcher.ConfirmLimit(), Lsn(0x110));
  // Two source transactions within the interval go into one Kafka transaction.
  batcher.OnRecord(t0);
  batcher.OnRecord(t0);
  EXPECT_FALSE(batcher.OnSourceCommit(Checkpoint{Lsn(0x200), 7, 0, 2}, Lsn(0x210), t0 + 10ms));
  EXPECT_TRUE(batcher.open());
  // An empty one after it: not confirmable past the open Kafka transaction.
  EXPECT_FALSE(batcher.OnSourceCommit(Checkpoint{Lsn(0x250)}, Lsn(0x260), t0 + 20ms));
  EXPECT_EQ(batcher.ConfirmLimit(), Lsn(0x110));
  batcher.OnRecord(t0 + 30ms);
  // The interval is over only at a source commit: never inside a source transaction.
  batcher.OnRecord(t0 + 200ms);
  EXPECT_FALSE(batcher.pending_checkpoint());
  ASSERT_TRUE(batcher.OnSourceCommit(Checkpoint{Lsn(0x300), 9, 0, 2}, Lsn(0x310), t0 + 200ms));
  ASSERT_TRUE(batcher.pending_checkpoint());
  EXPECT_EQ(batcher.pending_checkpoint()->commit_lsn, Lsn(0x300));
  EXPECT_EQ(batcher.ConfirmLimit(), Lsn(0x110)) << "not before the commit returned";
  batcher.OnKafkaCommitted();
  EXPECT_EQ(batcher.ConfirmLimit(), Lsn(0x310)) << "the end LSN of its last source transaction";
  EXPECT_FALSE(batcher.open());

  // Idle after a source commit inside the interval: Due() commits it once the interval is
  // over, so the stream's last events do not wait for the next source transaction.
  batcher.OnRecord(t0 + 300ms);
  EXPECT_FALSE(batcher.OnSourceCommit(Checkpoint{Lsn(0x350)}, Lsn(0x360), t0 + 310ms));
  EXPECT_FALSE(batcher.Due(t0 + 350ms));
  ASSERT_TRUE(batcher.Due(t0 + 400ms));
  EXPECT_EQ(batcher.pending_checkpoint()->commit_lsn, Lsn(0x350));
  batcher.OnKafkaCommitted();
  EXPECT_EQ(batcher.ConfirmLimit(), Lsn(0x360));
  EXPECT_FALSE(batcher.Due(t0 + 1h)) << "nothing open";

  // A size bound cuts earlier than the interval; an abort confirms nothing.
  TransactionBatcher small(1h, 3);
  for (int i = 0; i < 2; ++i) small.OnRecord(t0);
  EXPECT_FALSE(small.OnSourceCommit(Checkpoint{Lsn(0x400)}, Lsn(0x410), t0));
  for (int i = 0; i < 5; ++i) small.OnRecord(t0);  // one source transaction larger than 3
  EXPECT_TRUE(small.OnSourceCommit(Checkpoint{Lsn(0x500)}, Lsn(0x510), t0)) << "whole, then cut";
  small.OnKafkaAborted();
  EXPECT_EQ(small.ConfirmLimit(), Lsn()) << "nothing of an aborted transaction is confirmed";
  EXPECT_FALSE(small.pending_checkpoint());
}

}  // namespace
}  // namespace walrelay::relay
