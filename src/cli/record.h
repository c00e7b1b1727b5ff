// `walrelay record` and `walrelay replay`: capture a slot's raw stream into a recording
// (src/relay/commands/recording.h, docs/recording-format.md) and feed a recording back through the
// relay's Pipeline, for benchmarks and for reproducing what a server sent.
//
// record: reads a logical slot (creating it when missing; --temporary for a slot dropped
//   at exit) with pgoutput (proto_version 1, publication, messages) or wal2json (the
//   decoder's required options) and appends every XLogData (and keepalive) to FILE. Stops
//   at --max-events / --max-bytes (rounded up to the end of the open transaction, so a
//   recording holds whole transactions), at --until-lsn (the first transaction boundary
//   at or past it), or on SIGINT/SIGTERM; then writes the end marker and fsyncs.
//   Progress (events, MB, MB/s) on stderr about once a second.
//   The slot is NOT advanced by default: status updates report flush 0/0, which leaves
//   confirmed_flush_lsn where it was, so the same backlog can be recorded (or relayed)
//   again. --advance confirms, after an fsync, the end of the last transaction written.
//
// replay: reads FILE through the Pipeline into the null sink (decode + map only; every
//   record acked at the next poll) or Kafka (--kafka-bootstrap-servers, or
//   --kafka-embedded for an in-process mock cluster), as fast as possible or
//   --pace recorded. Dead letters go to a counting LoggingDeadLetterSink. At the end it
//   prints events/s, MB/s, CPU time per event (getrusage, the whole process: with
//   --kafka-embedded that includes the mock brokers), peak RSS (VmHWM) and per-event
//   latency percentiles: produce -> ack for Kafka; for the null sink, decode + map time
//   (frame read -> record handed to the sink). --json prints one JSON object instead.
//
// Exit codes: 0 success, 1 runtime failure, 2 bad usage.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "src/cli/options.h"

namespace walrelay::cli {

class RecordCommand {
 public:
  explicit RecordCommand(CLI::App* parent);
  bool parsed() const;
  int Run() const;

 private:
  CLI::App* app_;
  std::string dsn_;
  std::string password_file_;
  std::string output_;
  std::string slot_ = "walrelay_record";
  std::string plugin_ = "pgoutput";
  std::string publication_ = "walrelay_outbox";
  std::vector<std::string> tables_;
  bool temporary_ = false;  // accepted, ignored: temporary is the default
  bool create_slot_ = false;
  bool advance_ = false;
  bool no_keepalives_ = false;
  bool quiet_ = false;
  uint64_t max_events_ = 0;
  uint64_t max_bytes_ = 0;
  std::string until_lsn_;
};

class ReplayCommand {
 public:
  explicit ReplayCommand(CLI::App* parent);
  bool parsed() const;
  int Run() const;

 private:
  CLI::App* app_;
  std::string file_;
  std::string sink_ = "null";
  std::string pace_ = "full";
  bool json_ = false;
  bool allow_truncated_ = false;
  int topic_partitions_ = 0;
  // Mapping, flow and Kafka options borrowed from the run registry (options.h).
  std::vector<const OptionSpec*> specs_;
  std::vector<CLI::Option*> options_;
  std::deque<std::vector<std::string>> values_;  // stable addresses for CLI11
};

}  // namespace walrelay::cli
