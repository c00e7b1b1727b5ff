#include "src/relay/core/ack_tracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace walrelay::relay {
namespace {

TEST(AckTrackerTest, StartsEmpty) {
  AckTracker t;
  EXPECT_FALSE(t.FlushLsn().valid());
  EXPECT_EQ(t.InFlightEvents(), 0u);
  EXPECT_EQ(t.PendingTransactions(), 0u);
}

TEST(AckTrackerTest, InOrderAcks) {
  AckTracker t;
  auto tx1 = t.BeginTransaction();
  auto a = t.AddEvent(tx1);
  auto b = t.AddEvent(tx1);
  EXPECT_EQ(t.InFlightEvents(), 2u);
  t.CommitTransaction(tx1, Lsn(100));
  EXPECT_FALSE(t.FlushLsn().valid());
  t.Ack(a);
  EXPECT_FALSE(t.FlushLsn().valid());
  t.Ack(b);
  EXPECT_EQ(t.FlushLsn(), Lsn(100));
  EXPECT_EQ(t.InFlightEvents(), 0u);
  EXPECT_EQ(t.PendingTransactions(), 0u);
}

TEST(AckTrackerTest, AcksBeforeCommitDoNotFlush) {
  AckTracker t;
  auto tx = t.BeginTransaction();
  t.Ack(t.AddEvent(tx));
  // Acked, but the Commit is not seen yet: more events may follow.
  EXPECT_FALSE(t.FlushLsn().valid());
  auto c = t.AddEvent(tx);
  t.CommitTransaction(tx, Lsn(50));
  EXPECT_FALSE(t.FlushLsn().valid());
  t.Ack(c);
  EXPECT_EQ(t.FlushLsn(), Lsn(50));
}

TEST(AckTrackerTest, FullyAckedAtCommit) {
  AckTracker t;
  auto tx = t.BeginTransaction();
  t.Ack(t.AddEvent(tx));
  t.CommitTransaction(tx, Lsn(70));
  EXPECT_EQ(t.FlushLsn(), Lsn(70));
}

TEST(AckTrackerTest, ReverseOrderAcrossTransactions) {
  AckTracker t;
  std::vector<AckTracker::Token> tokens;
  for (uint64_t i = 1; i <= 3; ++i) {
    auto tx = t.BeginTransaction();
    tokens.push_back(t.AddEvent(tx));
    tokens.push_back(t.AddEvent(tx));
    t.CommitTransaction(tx, Lsn(i * 100));
  }
  std::reverse(tokens.begin(), tokens.end());
  // tx3 fully acked, then tx2: still nothing, tx1 is unacked.
  for (int i = 0; i < 4; ++i) {
    t.Ack(tokens[i]);
    EXPECT_FALSE(t.FlushLsn().valid()) << i;
  }
  t.Ack(tokens[4]);
  EXPECT_FALSE(t.FlushLsn().valid());
  t.Ack(tokens[5]);  // the last of tx1: everything flushes at once
  EXPECT_EQ(t.FlushLsn(), Lsn(300));
  EXPECT_EQ(t.PendingTransactions(), 0u);
}

TEST(AckTrackerTest, ZeroEventTransactions) {
  AckTracker t;
  auto tx1 = t.BeginTransaction();
  t.CommitTransaction(tx1, Lsn(10));
  EXPECT_EQ(t.FlushLsn(), Lsn(10));

  auto tx2 = t.BeginTransaction();
  auto e = t.AddEvent(tx2);
  t.CommitTransaction(tx2, Lsn(20));
  auto tx3 = t.BeginTransaction();  // no outbox rows
  t.CommitTransaction(tx3, Lsn(30));
  // tx3 is acked by construction but waits behind tx2.
  EXPECT_EQ(t.FlushLsn(), Lsn(10));
  t.Ack(e);
  EXPECT_EQ(t.FlushLsn(), Lsn(30));
}

TEST(AckTrackerTest, IdlePositionOnlyWhenNothingPending) {
  AckTracker t;
  EXPECT_EQ(t.ObserveIdlePosition(Lsn(5)), Lsn(5));
  auto tx = t.BeginTransaction();
  // Open transaction: the keepalive position may be past its events; do not confirm it.
  EXPECT_EQ(t.ObserveIdlePosition(Lsn(500)), Lsn(5));
  auto e = t.AddEvent(tx);
  t.CommitTransaction(tx, Lsn(40));
  EXPECT_EQ(t.ObserveIdlePosition(Lsn(600)), Lsn(5));
  t.Ack(e);
  EXPECT_EQ(t.FlushLsn(), Lsn(40));
  EXPECT_EQ(t.ObserveIdlePosition(Lsn(700)), Lsn(700));
  // Never backwards.
  EXPECT_EQ(t.ObserveIdlePosition(Lsn(650)), Lsn(700));
  auto tx2 = t.BeginTransaction();
  t.CommitTransaction(tx2, Lsn(690));  // an older end LSN cannot lower the flush LSN
  EXPECT_EQ(t.FlushLsn(), Lsn(700));
}

TEST(AckTrackerTest, ResetDropsInFlightAndIgnoresStaleTokens) {
  AckTracker t;
  auto tx1 = t.BeginTransaction();
  auto a = t.AddEvent(tx1);
  t.CommitTransaction(tx1, Lsn(100));
  t.Ack(a);
  auto tx2 = t.BeginTransaction();
  auto stale = t.AddEvent(tx2);
  t.CommitTransaction(tx2, Lsn(200));
  t.Reset();
  EXPECT_EQ(t.InFlightEvents(), 0u);
  EXPECT_EQ(t.PendingTransactions(), 0u);
  EXPECT_EQ(t.FlushLsn(), Lsn(100));

  // Streaming restarts from the slot; tx2 is replayed as a new transaction.
  auto tx3 = t.BeginTransaction();
  auto b = t.AddEvent(tx3);
  t.CommitTransaction(tx3, Lsn(200));
  t.Ack(stale);  // a late report from the torn-down producer must not count
  EXPECT_EQ(t.FlushLsn(), Lsn(100));
  EXPECT_EQ(t.InFlightEvents(), 1u);
  t.Ack(b);
  EXPECT_EQ(t.FlushLsn(), Lsn(200));
}

// Brute-force model: every transaction with its per-event ack flags.
struct ModelTx {
  std::vector<bool> acked;
  bool committed = false;
  Lsn end_lsn;
  bool Done() const {
    return committed && std::all_of(acked.begin(), acked.end(), [](bool b) { return b; });
  }
};

struct Outstanding {
  AckTracker::Token token;
  size_t tx_index;
  size_t event_index;
};

// Streams random transactions while acking random outstanding events, and checks after
// every step that the tracker's flush LSN equals the model's and never passes an
// unacked event or an earlier unfinished transaction.
void RunRandomized(uint32_t seed) {
  std::mt19937 rng(seed);
  AckTracker t;
  std::vector<ModelTx> model;
  std::vector<Outstanding> outstanding;
  Lsn idle_floor;  // the highest idle position the model allowed
  Lsn last_flush;
  uint64_t lsn = 1000;

  auto model_flush = [&]() {
    Lsn flush = idle_floor;
    for (const ModelTx& m : model) {
      if (!m.Done()) break;
      flush = std::max(flush, m.end_lsn);
    }
    return flush;
  };
  auto check = [&](const char* step) {
    const Lsn flush = t.FlushLsn();
    ASSERT_EQ(flush, model_flush()) << "seed " << seed << " after " << step;
    ASSERT_GE(flush, last_flush) << "seed " << seed << ": flush LSN went backwards";
    last_flush = flush;
    // Safety, independent of the model's formula: the first unfinished transaction has a
    // larger end LSN than what was confirmed, and so have all transactions after it.
    bool seen_unfinished = false;
    for (const ModelTx& m : model) {
      if (!m.Done()) seen_unfinished = true;
      if (seen_unfinished && m.committed) {
        ASSERT_LT(flush, m.end_lsn) << "seed " << seed << ": flush passed an unacked event";
      }
    }
    uint64_t unacked = outstanding.size();
    ASSERT_EQ(t.InFlightEvents(), unacked);
  };
  auto ack_random = [&]() {
    if (outstanding.empty()) return;
    std::uniform_int_distribution<size_t> pick(0, outstanding.size() - 1);
    size_t i = pick(rng);
    Outstanding o = outstanding[i];
    outstanding[i] = outstanding.back();
    outstanding.pop_back();
    model[o.tx_index].acked[o.event_index] = true;
    t.Ack(o.token);
  };

  std::uniform_int_distribution<int> events_dist(0, 6);
  std::uniform_int_distribution<int> coin(0, 3);
  const int kTransactions = 60;
  for (int n = 0; n < kTransactions; ++n) {
    auto tx = t.BeginTransaction();
    model.push_back({});
    const size_t ti = model.size() - 1;
    const int events = events_dist(rng) == 0 ? 0 : events_dist(rng);
    for (int e = 0; e < events; ++e) {
      model[ti].acked.push_back(false);
      outstanding.push_back({t.AddEvent(tx), ti, static_cast<size_t>(e)});
      // Acks interleave with the stream, also before the Commit.
      while (coin(rng) == 0) ack_random();
      check("add");
      if (::testing::Test::HasFatalFailure()) return;
      // The keepalive position is ahead; must not be confirmed while streaming.
      t.ObserveIdlePosition(Lsn(lsn + 1'000'000));
      check("idle while open");
      if (::testing::Test::HasFatalFailure()) return;
    }
    lsn += 1 + rng() % 100;
    t.CommitTransaction(tx, Lsn(lsn));
    model[ti].committed = true;
    model[ti].end_lsn = Lsn(lsn);
    check("commit");
    if (::testing::Test::HasFatalFailure()) return;
    while (coin(rng) != 0) ack_random();
    check("ack");
    if (::testing::Test::HasFatalFailure()) return;
    if (outstanding.empty() && coin(rng) == 0) {
      lsn += rng() % 50;
      t.ObserveIdlePosition(Lsn(lsn));
      idle_floor = std::max(idle_floor, Lsn(lsn));
      check("idle");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  while (!outstanding.empty()) {
    ack_random();
    check("drain");
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_EQ(t.FlushLsn(), std::max(Lsn(lsn), idle_floor));
  EXPECT_EQ(t.PendingTransactions(), 0u);
}

TEST(AckTrackerTest, RandomizedOutOfOrderAcksMatchModel) {
  for (uint32_t seed = 1; seed <= 500; ++seed) {
    RunRandomized(seed);
    if (HasFatalFailure()) return;
  }
}

// PostgreSQL 14, wal2json or a publication wider than the outbox send transactions without
// events; behind one unacked event they must not pile up (each used to keep an entry).
TEST(AckTrackerTest, EmptyTransactionsBehindAnUnackedEventAreFolded) {
  AckTracker t;
  auto tx = t.BeginTransaction();
  const auto e = t.AddEvent(tx);
  t.CommitTransaction(tx, Lsn(100));
  for (uint64_t i = 1; i <= 1'000'000; ++i) {
    t.CommitTransaction(t.BeginTransaction(), Lsn(100 + i));
  }
  EXPECT_EQ(t.PendingTransactions(), 1u);
  EXPECT_EQ(t.FlushLsn(), Lsn());  // nothing passes the unacked event
  // A transaction with an event after them keeps its own entry and its own token.
  auto tx2 = t.BeginTransaction();
  const auto e2 = t.AddEvent(tx2);
  t.CommitTransaction(tx2, Lsn(2'000'000));
  EXPECT_EQ(t.PendingTransactions(), 2u);
  t.Ack(e);
  EXPECT_EQ(t.FlushLsn(), Lsn(1'000'100)) << "the folded transactions flush with the event's";
  t.Ack(e2);
  EXPECT_EQ(t.FlushLsn(), Lsn(2'000'000));
  EXPECT_EQ(t.PendingTransactions(), 0u);
}

TEST(AckTrackerTest, MillionEventTransactionIsConstantMemory) {
  AckTracker t;
  auto tx = t.BeginTransaction();
  for (int i = 0; i < 1'000'000; ++i) t.Ack(t.AddEvent(tx));
  EXPECT_EQ(t.PendingTransactions(), 1u);
  EXPECT_EQ(t.InFlightEvents(), 0u);
  t.CommitTransaction(tx, Lsn(1));
  EXPECT_EQ(t.FlushLsn(), Lsn(1));
}

// Front(): unchanged while the oldest transaction's events go unacknowledged, even as later
// transactions' events are acked (a broker only the relay cannot reach); changed by an ack
// of the front or by its flush; not waiting once the front has nothing unacked.
TEST(AckTrackerTest, FrontProgressIgnoresAcksOfLaterTransactions) {
  AckTracker t;
  EXPECT_FALSE(t.Front().waiting);
  auto tx1 = t.BeginTransaction();
  const auto stuck = t.AddEvent(tx1);
  const auto other = t.AddEvent(tx1);
  t.CommitTransaction(tx1, Lsn(100));
  auto tx2 = t.BeginTransaction();
  const auto later = t.AddEvent(tx2);
  t.CommitTransaction(tx2, Lsn(200));
  const AckTracker::FrontProgress before = t.Front();
  EXPECT_TRUE(before.waiting);
  t.Ack(later);  // another partition's event: the confirmed position is still held
  EXPECT_EQ(t.Front(), before);
  t.Ack(other);  // the front moves on
  const AckTracker::FrontProgress after_other = t.Front();
  EXPECT_NE(after_other, before);
  EXPECT_TRUE(after_other.waiting);
  t.Ack(stuck);
  EXPECT_EQ(t.FlushLsn(), Lsn(200));
  EXPECT_FALSE(t.Front().waiting);
  // An open transaction whose events are all acked is not waiting for Kafka.
  auto tx3 = t.BeginTransaction();
  t.Ack(t.AddEvent(tx3));
  EXPECT_FALSE(t.Front().waiting);
}

}  // namespace
}  // namespace walrelay::relay
