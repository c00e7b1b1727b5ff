#include "decoder/transaction_assembler.h"

#include <algorithm>
#include <string>
#include <utility>

namespace walrelay::pgoutput {
namespace {

Status Violation(MessageType type, std::string what) {
  std::string s = "pgoutput transaction order: ";
  s += MessageTypeName(type);
  s += ": ";
  s += what;
  return DataLossError(std::move(s));
}

std::string XidText(Xid xid) { return "xid " + std::to_string(xid); }

}  // namespace

void TransactionAssembler::Reset() { *this = TransactionAssembler(); }

Result<TransactionAssembler::Event> TransactionAssembler::Feed(const Message& message) {
  const bool origin_allowed = origin_allowed_;
  origin_allowed_ = false;
  if (std::holds_alternative<Origin>(message)) {
    if (!origin_allowed) {
      return Violation(MessageType::kOrigin,
                       "only allowed right after Begin, Begin Prepare or Stream Start");
    }
    return Inside();
  }
  return std::visit([this](const auto& m) { return On(m); }, message);
}

TransactionAssembler::Event TransactionAssembler::Inside(Boundary b) const {
  Event e;
  e.boundary = b;
  e.xid = xid();
  e.commit_time = commit_time();
  return e;
}

Status TransactionAssembler::CheckIdle(MessageType type) const {
  switch (state_) {
    case State::kIdle:
      return Status::Ok();
    case State::kTransaction:
    case State::kPrepared:
      return Violation(type, "inside the transaction with " + XidText(xid_) +
                                 " (begun at final lsn " + final_lsn_.ToString() + ")");
    case State::kStream:
      return Violation(type, "inside the stream segment of " + XidText(xid_));
  }
  return Status::Ok();
}

Status TransactionAssembler::CheckStreamXid(MessageType type, const std::optional<Xid>& xid) const {
  if (xid.has_value() != in_stream()) {
    return Violation(type, in_stream() ? "without an xid inside a stream segment"
                                       : "with an xid outside a stream segment");
  }
  return Status::Ok();
}

Status TransactionAssembler::CheckChange(MessageType type, const std::optional<Xid>& xid) const {
  if (state_ == State::kIdle) return Violation(type, "outside a transaction");
  return CheckStreamXid(type, xid);
}

Status TransactionAssembler::CheckCommitLsn(MessageType type, Lsn commit_lsn, Lsn end_lsn) const {
  if (end_lsn <= commit_lsn) {
    return Violation(
        type, "end lsn " + end_lsn.ToString() + " not after commit lsn " + commit_lsn.ToString());
  }
  if (last_commit_lsn_.valid() && commit_lsn <= last_commit_lsn_) {
    return Violation(type, "commit lsn " + commit_lsn.ToString() +
                               " not after the previous commit lsn " + last_commit_lsn_.ToString());
  }
  return Status::Ok();
}

bool TransactionAssembler::StreamOpen(Xid xid) const {
  return std::find(open_streams_.begin(), open_streams_.end(), xid) != open_streams_.end();
}

void TransactionAssembler::CloseStream(Xid xid) {
  auto it = std::find(open_streams_.begin(), open_streams_.end(), xid);
  if (it != open_streams_.end()) {
    *it = open_streams_.back();
    open_streams_.pop_back();
  }
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const Begin& m) {
  WALRELAY_RETURN_IF_ERROR(CheckIdle(MessageType::kBegin));
  if (last_commit_lsn_.valid() && m.final_lsn <= last_commit_lsn_) {
    return Violation(MessageType::kBegin, "final lsn " + m.final_lsn.ToString() +
                                              " not after the previous commit lsn " +
                                              last_commit_lsn_.ToString());
  }
  state_ = State::kTransaction;
  xid_ = m.xid;
  commit_time_ = m.commit_time;
  final_lsn_ = m.final_lsn;
  origin_allowed_ = true;
  return Inside(Boundary::kBegin);
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const Commit& m) {
  if (state_ != State::kTransaction) {
    if (state_ == State::kPrepared) {
      return Violation(MessageType::kCommit,
                       "closes a Begin Prepare (" + XidText(xid_) + "); expected Prepare");
    }
    return Violation(MessageType::kCommit,
                     state_ == State::kStream ? "inside a stream segment" : "without Begin");
  }
  if (m.commit_lsn != final_lsn_) {
    return Violation(MessageType::kCommit, "commit lsn " + m.commit_lsn.ToString() +
                                               " differs from Begin's final lsn " +
                                               final_lsn_.ToString() + " (" + XidText(xid_) + ")");
  }
  WALRELAY_RETURN_IF_ERROR(CheckCommitLsn(MessageType::kCommit, m.commit_lsn, m.end_lsn));
  Event e = Inside(Boundary::kCommit);
  e.end_lsn = m.end_lsn;
  last_commit_lsn_ = m.commit_lsn;
  state_ = State::kIdle;
  return e;
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const Origin&) {
  return Inside();  // handled in Feed
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const Relation& m) {
  WALRELAY_RETURN_IF_ERROR(CheckStreamXid(MessageType::kRelation, m.xid));
  return Inside();
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const Type& m) {
  WALRELAY_RETURN_IF_ERROR(CheckStreamXid(MessageType::kType, m.xid));
  return Inside();
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const Insert& m) {
  WALRELAY_RETURN_IF_ERROR(CheckChange(MessageType::kInsert, m.xid));
  return Inside();
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const Update& m) {
  WALRELAY_RETURN_IF_ERROR(CheckChange(MessageType::kUpdate, m.xid));
  return Inside();
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const Delete& m) {
  WALRELAY_RETURN_IF_ERROR(CheckChange(MessageType::kDelete, m.xid));
  return Inside();
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const Truncate& m) {
  WALRELAY_RETURN_IF_ERROR(CheckChange(MessageType::kTruncate, m.xid));
  return Inside();
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const LogicalMessage& m) {
  if (m.transactional()) {
    WALRELAY_RETURN_IF_ERROR(CheckChange(MessageType::kMessage, m.xid));
  } else {
    WALRELAY_RETURN_IF_ERROR(CheckStreamXid(MessageType::kMessage, m.xid));
  }
  return Inside();
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const StreamStart& m) {
  WALRELAY_RETURN_IF_ERROR(CheckIdle(MessageType::kStreamStart));
  const bool open = StreamOpen(m.xid);
  if (m.first_segment && open) {
    return Violation(MessageType::kStreamStart,
                     "first segment for " + XidText(m.xid) + ", which is already streaming");
  }
  if (!m.first_segment && !open) {
    return Violation(MessageType::kStreamStart,
                     "later segment for " + XidText(m.xid) + ", whose first segment was not seen");
  }
  if (m.first_segment) open_streams_.push_back(m.xid);
  state_ = State::kStream;
  xid_ = m.xid;
  origin_allowed_ = true;
  return Inside(Boundary::kStreamStart);
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const StreamStop&) {
  if (state_ != State::kStream) {
    return Violation(MessageType::kStreamStop, "without Stream Start");
  }
  Event e = Inside(Boundary::kStreamStop);
  state_ = State::kIdle;
  return e;
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const StreamCommit& m) {
  WALRELAY_RETURN_IF_ERROR(CheckIdle(MessageType::kStreamCommit));
  if (!StreamOpen(m.xid)) {
    return Violation(MessageType::kStreamCommit, "for " + XidText(m.xid) + ", never streamed");
  }
  WALRELAY_RETURN_IF_ERROR(CheckCommitLsn(MessageType::kStreamCommit, m.commit_lsn, m.end_lsn));
  CloseStream(m.xid);
  last_commit_lsn_ = m.commit_lsn;
  Event e;
  e.boundary = Boundary::kStreamCommit;
  e.xid = m.xid;
  e.end_lsn = m.end_lsn;
  e.commit_time = m.commit_time;
  return e;
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const StreamAbort& m) {
  WALRELAY_RETURN_IF_ERROR(CheckIdle(MessageType::kStreamAbort));
  if (!StreamOpen(m.xid)) {
    return Violation(MessageType::kStreamAbort, "for " + XidText(m.xid) + ", never streamed");
  }
  // A subtransaction abort leaves the top-level transaction streaming.
  if (m.aborts_top_level()) CloseStream(m.xid);
  Event e;
  e.boundary = Boundary::kStreamAbort;
  e.xid = m.xid;
  return e;
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const BeginPrepare& m) {
  WALRELAY_RETURN_IF_ERROR(CheckIdle(MessageType::kBeginPrepare));
  state_ = State::kPrepared;
  xid_ = m.xid;
  commit_time_ = m.prepare_time;
  final_lsn_ = m.prepare_lsn;
  prepare_end_lsn_ = m.end_lsn;
  origin_allowed_ = true;
  return Inside(Boundary::kBeginPrepare);
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const Prepare& m) {
  if (state_ != State::kPrepared) {
    return Violation(MessageType::kPrepare, "without Begin Prepare");
  }
  if (m.xid != xid_ || m.prepare_lsn != final_lsn_ || m.end_lsn != prepare_end_lsn_) {
    return Violation(MessageType::kPrepare,
                     "(" + XidText(m.xid) + ", prepare lsn " + m.prepare_lsn.ToString() +
                         ", end lsn " + m.end_lsn.ToString() + ") does not match Begin Prepare (" +
                         XidText(xid_) + ", prepare lsn " + final_lsn_.ToString() + ", end lsn " +
                         prepare_end_lsn_.ToString() + ")");
  }
  Event e = Inside(Boundary::kPrepare);
  e.end_lsn = m.end_lsn;
  state_ = State::kIdle;
  return e;
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const CommitPrepared& m) {
  WALRELAY_RETURN_IF_ERROR(CheckIdle(MessageType::kCommitPrepared));
  WALRELAY_RETURN_IF_ERROR(CheckCommitLsn(MessageType::kCommitPrepared, m.commit_lsn, m.end_lsn));
  last_commit_lsn_ = m.commit_lsn;
  Event e;
  e.boundary = Boundary::kCommitPrepared;
  e.xid = m.xid;
  e.end_lsn = m.end_lsn;
  e.commit_time = m.commit_time;
  return e;
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const RollbackPrepared& m) {
  WALRELAY_RETURN_IF_ERROR(CheckIdle(MessageType::kRollbackPrepared));
  Event e;
  e.boundary = Boundary::kRollbackPrepared;
  e.xid = m.xid;
  e.end_lsn = m.rollback_end_lsn;
  e.commit_time = m.rollback_time;
  return e;
}

Result<TransactionAssembler::Event> TransactionAssembler::On(const StreamPrepare& m) {
  WALRELAY_RETURN_IF_ERROR(CheckIdle(MessageType::kStreamPrepare));
  if (!StreamOpen(m.xid)) {
    return Violation(MessageType::kStreamPrepare, "for " + XidText(m.xid) + ", never streamed");
  }
  CloseStream(m.xid);
  Event e;
  e.boundary = Boundary::kStreamPrepare;
  e.xid = m.xid;
  e.end_lsn = m.end_lsn;
  e.commit_time = m.prepare_time;
  return e;
}

}  // namespace walrelay::pgoutput
