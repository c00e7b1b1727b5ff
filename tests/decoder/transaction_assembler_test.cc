#include "decoder/transaction_assembler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/decoder/wire_builder.h"

namespace walrelay::pgoutput {
namespace {

using ::testing::HasSubstr;
using Boundary = TransactionAssembler::Boundary;
namespace wire = testing::wire;

Insert Ins(std::optional<Xid> xid = std::nullopt) {
  Insert i;
  i.xid = xid;
  i.relation_id = 1;
  return i;
}

LogicalMessage Msg(bool transactional, std::optional<Xid> xid = std::nullopt) {
  LogicalMessage m;
  m.xid = xid;
  m.flags = transactional ? LogicalMessage::kFlagTransactional : 0;
  m.lsn = Lsn(1);
  return m;
}

class AssemblerTest : public ::testing::Test {
 protected:
  TransactionAssembler::Event Ok(const Message& m) {
    Result<TransactionAssembler::Event> r = a_.Feed(m);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : TransactionAssembler::Event{};
  }
  // The error message ("" if the message was accepted).
  std::string Err(const Message& m) {
    Result<TransactionAssembler::Event> r = a_.Feed(m);
    EXPECT_FALSE(r.ok()) << "accepted message type " << static_cast<char>(TypeOf(m));
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    }
    return r.status().message();
  }
  TransactionAssembler a_;
};

TEST_F(AssemblerTest, TransactionReportsXidTimeAndEndLsn) {
  EXPECT_FALSE(a_.in_transaction());
  TransactionAssembler::Event e = Ok(Begin{Lsn(0x100), 777, 42});
  EXPECT_EQ(e.boundary, Boundary::kBegin);
  EXPECT_EQ(e.xid, 42u);
  EXPECT_EQ(e.commit_time, 777);
  EXPECT_TRUE(a_.in_transaction());
  EXPECT_EQ(a_.xid(), 42u);
  EXPECT_EQ(a_.commit_time(), 777);
  EXPECT_EQ(a_.final_lsn(), Lsn(0x100));
  Ok(Origin{Lsn(5), "node"});
  Ok(Relation{});
  e = Ok(Ins());
  EXPECT_EQ(e.boundary, Boundary::kNone);
  EXPECT_EQ(e.xid, 42u);
  Ok(Update{});
  Ok(Delete{});
  Ok(Truncate{});
  Ok(Msg(true));
  e = Ok(Commit{0, Lsn(0x100), Lsn(0x130), 777});
  EXPECT_EQ(e.boundary, Boundary::kCommit);
  EXPECT_EQ(e.end_lsn, Lsn(0x130));
  EXPECT_EQ(e.xid, 42u);
  EXPECT_EQ(e.commit_time, 777);
  EXPECT_FALSE(a_.in_transaction());
  EXPECT_EQ(a_.xid(), 0u);
  EXPECT_EQ(a_.last_commit_lsn(), Lsn(0x100));
}

TEST_F(AssemblerTest, NestedBeginIsAnError) {
  Ok(Begin{Lsn(0x100), 1, 1});
  EXPECT_THAT(Err(Begin{Lsn(0x200), 1, 2}), HasSubstr("inside the transaction"));
}

TEST_F(AssemblerTest, CommitLsnMustMatchFinalLsn) {
  Ok(Begin{Lsn(0x100), 1, 1});
  EXPECT_THAT(Err(Commit{0, Lsn(0x101), Lsn(0x130), 1}),
              HasSubstr("differs from Begin's final lsn 0/100"));
}

TEST_F(AssemblerTest, EndLsnMustFollowCommitLsn) {
  Ok(Begin{Lsn(0x100), 1, 1});
  Err(Commit{0, Lsn(0x100), Lsn(0x100), 1});
}

TEST_F(AssemblerTest, CommitsMustMoveForward) {
  Ok(Begin{Lsn(0x100), 1, 1});
  Ok(Commit{0, Lsn(0x100), Lsn(0x130), 1});
  EXPECT_THAT(Err(Begin{Lsn(0x100), 1, 2}), HasSubstr("not after the previous"));
}

TEST_F(AssemblerTest, CommitWithoutBegin) {
  EXPECT_THAT(Err(Commit{0, Lsn(0x100), Lsn(0x130), 1}), HasSubstr("without Begin"));
}

TEST_F(AssemblerTest, ChangesOutsideATransaction) {
  Err(Ins());
  Err(Update{});
  Err(Delete{});
  Err(Truncate{});
  Err(Msg(true));
}

TEST_F(AssemblerTest, NonTransactionalMessageRelationAndTypeAnywhere) {
  Ok(Msg(false));
  Ok(Relation{});
  Ok(Type{});
  Ok(Begin{Lsn(0x100), 1, 1});
  Ok(Msg(false));
  Ok(Commit{0, Lsn(0x100), Lsn(0x130), 1});
}

TEST_F(AssemblerTest, OriginOnlyRightAfterBegin) {
  Err(Origin{});
  a_.Reset();
  Ok(Begin{Lsn(0x100), 1, 1});
  Ok(Ins());
  Err(Origin{});
  a_.Reset();
  Ok(Begin{Lsn(0x100), 1, 1});
  Ok(Origin{});
  Err(Origin{});
}

TEST_F(AssemblerTest, StreamedTransaction) {
  TransactionAssembler::Event e = Ok(StreamStart{900, true});
  EXPECT_EQ(e.boundary, Boundary::kStreamStart);
  EXPECT_TRUE(a_.in_stream());
  EXPECT_EQ(a_.xid(), 900u);
  Ok(Origin{});
  Ok(Relation{900});
  Ok(Ins(900));
  Ok(Ins(901));  // a subtransaction's xid
  Ok(Msg(true, 900));
  Ok(StreamStop{});
  EXPECT_FALSE(a_.in_stream());
  // A regular transaction may commit between two segments.
  Ok(Begin{Lsn(0x100), 1, 5});
  Ok(Ins());
  Ok(Commit{0, Lsn(0x100), Lsn(0x120), 1});
  Ok(StreamStart{900, false});
  Ok(Ins(900));
  Ok(StreamStop{});
  e = Ok(StreamAbort{900, 901});  // subtransaction only
  EXPECT_EQ(a_.open_streams(), 1u);
  e = Ok(StreamCommit{900, 0, Lsn(0x200), Lsn(0x250), 99});
  EXPECT_EQ(e.boundary, Boundary::kStreamCommit);
  EXPECT_EQ(e.end_lsn, Lsn(0x250));
  EXPECT_EQ(e.xid, 900u);
  EXPECT_EQ(e.commit_time, 99);
  EXPECT_EQ(a_.open_streams(), 0u);
}

TEST_F(AssemblerTest, StreamPairingErrors) {
  Err(StreamStop{});
  a_.Reset();
  Err(StreamStart{900, false});  // later segment of an unknown stream
  a_.Reset();
  Ok(StreamStart{900, true});
  Err(StreamStart{901, true});  // nested
  a_.Reset();
  Ok(StreamStart{900, true});
  Ok(StreamStop{});
  Err(StreamStart{900, true});  // first segment twice
  a_.Reset();
  Ok(StreamStart{900, true});
  Err(Begin{Lsn(0x100), 1, 1});
  a_.Reset();
  Ok(StreamStart{900, true});
  Err(StreamCommit{900, 0, Lsn(0x200), Lsn(0x250), 1});  // commit inside the segment
  a_.Reset();
  Err(StreamCommit{900, 0, Lsn(0x200), Lsn(0x250), 1});  // never streamed
  a_.Reset();
  Err(StreamAbort{900, 900});
  a_.Reset();
  Ok(Begin{Lsn(0x100), 1, 1});
  Err(StreamStart{900, true});
}

TEST_F(AssemblerTest, XidPresenceMustMatchStreamState) {
  Ok(Begin{Lsn(0x100), 1, 1});
  EXPECT_THAT(Err(Ins(5)), HasSubstr("with an xid outside a stream segment"));
  a_.Reset();
  Ok(StreamStart{900, true});
  EXPECT_THAT(Err(Ins()), HasSubstr("without an xid inside a stream segment"));
}

TEST_F(AssemblerTest, TopLevelStreamAbortClosesTheStream) {
  Ok(StreamStart{900, true});
  Ok(StreamStop{});
  TransactionAssembler::Event e = Ok(StreamAbort{900, 900, Lsn(0x300), 5});
  EXPECT_EQ(e.boundary, Boundary::kStreamAbort);
  EXPECT_EQ(a_.open_streams(), 0u);
  Err(StreamCommit{900, 0, Lsn(0x200), Lsn(0x250), 1});
}

TEST_F(AssemblerTest, TwoPhase) {
  TransactionAssembler::Event e = Ok(BeginPrepare{Lsn(0x400), Lsn(0x450), 9, 950, "g"});
  EXPECT_EQ(e.boundary, Boundary::kBeginPrepare);
  EXPECT_TRUE(a_.in_transaction());
  EXPECT_EQ(a_.commit_time(), 9);
  Ok(Origin{});
  Ok(Ins());
  Err(Commit{0, Lsn(0x400), Lsn(0x450), 9});
  e = Ok(Prepare{0, Lsn(0x400), Lsn(0x450), 9, 950, "g"});
  EXPECT_EQ(e.boundary, Boundary::kPrepare);
  EXPECT_EQ(e.end_lsn, Lsn(0x450));
  e = Ok(CommitPrepared{0, Lsn(0x500), Lsn(0x550), 10, 950, "g"});
  EXPECT_EQ(e.boundary, Boundary::kCommitPrepared);
  EXPECT_EQ(e.end_lsn, Lsn(0x550));
  e = Ok(RollbackPrepared{0, Lsn(0x450), Lsn(0x600), 9, 11, 951, "h"});
  EXPECT_EQ(e.boundary, Boundary::kRollbackPrepared);
  EXPECT_EQ(e.end_lsn, Lsn(0x600));
}

TEST_F(AssemblerTest, TwoPhaseErrors) {
  Err(Prepare{0, Lsn(0x400), Lsn(0x450), 9, 950, "g"});
  a_.Reset();
  Ok(BeginPrepare{Lsn(0x400), Lsn(0x450), 9, 950, "g"});
  EXPECT_THAT(Err(Prepare{0, Lsn(0x400), Lsn(0x450), 9, 951, "g"}),
              HasSubstr("does not match Begin Prepare"));
  a_.Reset();
  Ok(Begin{Lsn(0x100), 1, 1});
  Err(Prepare{0, Lsn(0x100), Lsn(0x150), 9, 1, "g"});
  Err(CommitPrepared{0, Lsn(0x500), Lsn(0x550), 10, 950, "g"});
  a_.Reset();
  Ok(StreamStart{900, true});
  Ok(StreamStop{});
  TransactionAssembler::Event e = Ok(StreamPrepare{0, Lsn(0x600), Lsn(0x650), 12, 900, "g2"});
  EXPECT_EQ(e.boundary, Boundary::kStreamPrepare);
  EXPECT_EQ(e.end_lsn, Lsn(0x650));
  Err(StreamPrepare{0, Lsn(0x700), Lsn(0x750), 12, 900, "g2"});
}

// Bytes -> Decode (with the assembler's in_stream) -> Feed, like the relay loop.
TEST(AssemblerPipelineTest, DecodesAndAssemblesAWireSequence) {
  const std::vector<std::string> wire_msgs = {
      wire::Begin(0x100, 5, 10),
      wire::Relation({}, 16384, "public", "outbox", 'd', {{1, "id", 23, -1}}),
      wire::Insert({}, 16384, {testing::Text("1")}),
      wire::Commit(0x100, 0x140, 5),
      wire::StreamStart(11, 1),
      wire::Insert(11, 16384, {testing::Text("2")}),
      wire::StreamStop(),
      wire::StreamCommit(11, 0x200, 0x240, 6),
  };
  TransactionAssembler a;
  std::vector<Lsn> confirmed;
  for (const std::string& bytes : wire_msgs) {
    Result<Message> m = Decode(bytes, DecodeOptions{2, a.in_stream(), false});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    Result<TransactionAssembler::Event> e = a.Feed(*m);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    if (e->end_lsn.valid()) confirmed.push_back(e->end_lsn);
  }
  EXPECT_EQ(confirmed, (std::vector<Lsn>{Lsn(0x140), Lsn(0x240)}));
}

}  // namespace
}  // namespace walrelay::pgoutput
