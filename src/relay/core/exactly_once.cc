#include "src/relay/core/exactly_once.h"

#include "base/position.h"

namespace walrelay::relay {

namespace {
constexpr std::string_view kCheckpointSource = "checkpoint";
}  // namespace

std::string StreamIdentity::Key() const { return system_id + "/" + database + "/" + slot; }

std::string StreamIdentity::TransactionalId() const {
  return "walrelay-" + system_id + "-" + database + "-" + slot;
}

std::string FormatCheckpoint(const Checkpoint& checkpoint) {
  SourcePosition p;
  p.lsn = checkpoint.commit_lsn;
  p.ordinal = checkpoint.events;
  p.xid = checkpoint.xid;
  p.commit_time_us = checkpoint.commit_time_us;
  p.source = kCheckpointSource;
  std::string out;
  FormatPosition(p, &out);
  return out;
}

std::optional<Checkpoint> ParseCheckpoint(std::string_view text) {
  const std::optional<SourcePosition> p = ParsePosition(text);
  if (!p || p->source != kCheckpointSource || p->recovered) return std::nullopt;
  return Checkpoint{p->lsn, p->xid, p->commit_time_us, p->ordinal};
}

ResumeDecision DecideResume(const std::optional<Checkpoint>& checkpoint, Lsn server_wal_end, std::string_view checkpoint_topic,
                            const StreamIdentity& stream) {
  ResumeDecision d;
  if (!checkpoint) return d;
  const std::string where = "the checkpoint of stream " + stream.Key() + " in topic " +
                            std::string(checkpoint_topic) + " (" +
                            checkpoint->commit_lsn.ToString() + ")";
  if (checkpoint->commit_lsn > server_wal_end) {
    d.kind = ResumeDecision::Kind::kRefuse;
    d.message =
        where + " is ahead of the server's WAL (" + server_wal_end.ToString() +
        "): Kafka holds a history this database does not have (a restored backup, or another "
        "server under the same identity). Skipping up to it would drop every event committed "
        "here since " + server_wal_end.ToString() +
        ". Nothing was published or confirmed. Fix: if this database is the source now, give "
        "the stream a new identity (another slot name, or --kafka-transactional-id and a "
        "new checkpoint topic) and republish what consumers miss";
    return d;
  }
  d.kind = ResumeDecision::Kind::kSkipThrough;
  d.skip_through = checkpoint->commit_lsn;
  return d;
}

void TransactionBatcher::OnRecord(Clock::time_point now) {
  if (records_ == 0) began_ = now;
  ++records_;
}

bool TransactionBatcher::OnSourceCommit(const Checkpoint& source, Lsn end_lsn,
                                        Clock::time_point now) {
  if (records_ == 0) {
    // Nothing of it waits in Kafka: confirmable at once.
    if (end_lsn > limit_) limit_ = end_lsn;
    return false;
  }
  last_whole_ = source;
  last_whole_end_ = end_lsn;
  return Due(now);
}

bool TransactionBatcher::Due(Clock::time_point now) {
  if (pending_) return true;
  if (!last_whole_ || (now - began_ < interval_ && records_ < max_records_)) return false;
  pending_ = last_whole_;
  pending_end_ = last_whole_end_;
  return true;
}

void TransactionBatcher::OnKafkaCommitted() {
  if (pending_ && pending_end_ > limit_) limit_ = pending_end_;
  pending_.reset();
  last_whole_.reset();
  records_ = 0;
}

void TransactionBatcher::OnKafkaAborted() {
  pending_.reset();
  last_whole_.reset();
  records_ = 0;
}

}  // namespace walrelay::relay
