// `walrelay record`: see record.h.
#include "src/cli/record.h"

#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "slot/pg_error.h"
#include "slot/replication_connection.h"
#include "slot/slot_admin.h"
#include "slot/wire.h"
#include "src/relay/core/plugin_options.h"
#include "src/relay/commands/recording.h"

namespace walrelay::cli {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::atomic<bool> g_record_stop{false};
extern "C" void OnRecordSignal(int) { g_record_stop.store(true, std::memory_order_relaxed); }

enum class Boundary { kNone, kBegin, kCommit };

// Only the first bytes are looked at: a transaction's Begin and Commit, per plugin.
Boundary Classify(bool wal2json, std::string_view data) {
  if (!wal2json) {
    if (data.empty()) return Boundary::kNone;
    if (data[0] == 'B') return Boundary::kBegin;
    if (data[0] == 'C') return Boundary::kCommit;
    return Boundary::kNone;
  }
  // format-version 2 documents start with {"action":"X"
  constexpr std::string_view kKey = "\"action\":\"";
  const size_t at = data.substr(0, 32).find(kKey);
  if (at == std::string_view::npos || at + kKey.size() >= data.size()) return Boundary::kNone;
  const char action = data[at + kKey.size()];
  if (action == 'B') return Boundary::kBegin;
  if (action == 'C') return Boundary::kCommit;
  return Boundary::kNone;
}

std::string VersionText(int num) {
  if (num <= 0) return "unknown";
  return std::to_string(num / 10000) + "." + std::to_string(num % 100);
}

int64_t NowUnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RecordCommand::RecordCommand(CLI::App* parent) {
  app_ = parent->add_subcommand(
      "record",
      "Record a logical slot's raw stream (every XLogData with its LSNs and send time) into a "
      "file for `walrelay replay`. Does not advance the slot unless --advance.");
  app_->add_option("--dsn", dsn_, "libpq connection string of the source database")
      ->envname("WALRELAY_SOURCE_DSN");
  app_->add_option("--password-file", password_file_,
                   "File whose first line is the password (owner-only, like .pgpass); never "
                   "logged")
      ->envname("WALRELAY_SOURCE_PASSWORD_FILE");
  app_->add_option("-o,--output", output_, "Recording file to write (truncated)")->required();
  app_->add_option("--slot", slot_,
                   "Logical slot to read; when missing, created TEMPORARY (dropped when the "
                   "recording ends) unless --create-slot")
      ->capture_default_str();
  app_->add_option("--plugin", plugin_, "Output plugin: pgoutput or wal2json")
      ->check(CLI::IsMember({"pgoutput", "wal2json"}))
      ->capture_default_str();
  app_->add_option("--publication", publication_, "Publication (pgoutput)")->capture_default_str();
  app_->add_option("--table", tables_,
                   "wal2json only: restrict to these schema.table names (add-tables)");
  app_->add_flag("--create-slot", create_slot_,
                 "Create a missing slot as a permanent slot (it then pins WAL on the server "
                 "until dropped: pg_drop_replication_slot)");
  app_->add_flag("--temporary", temporary_, "Accepted for old scripts: temporary is the default");
  app_->add_option("--max-events", max_events_,
                   "Stop after this many XLogData messages (then at the end of the open "
                   "transaction)");
  app_->add_option("--max-bytes", max_bytes_,
                   "Stop after this many payload bytes (then at the end of the open "
                   "transaction)");
  app_->add_option("--until-lsn", until_lsn_,
                   "Stop at the first transaction boundary at or after this LSN (X/Y)");
  app_->add_flag("--advance", advance_,
                 "Confirm (flush) the end of each transaction once it is fsync'd to the file; "
                 "default: never advance the slot");
  app_->add_flag("--no-keepalives", no_keepalives_, "Do not store keepalive messages");
  app_->add_flag("-q,--quiet", quiet_, "No progress lines");
}

bool RecordCommand::parsed() const { return app_->parsed(); }

int RecordCommand::Run() const {
  auto fail = [](const std::string& msg, int code) {
    std::cerr << "walrelay record: " << msg << "\n";
    return code;
  };
  std::optional<Lsn> until;
  if (!until_lsn_.empty()) {
    until = Lsn::Parse(until_lsn_);
    if (!until) return fail("--until-lsn: expected X/Y, got '" + until_lsn_ + "'", 2);
  }
  if (Status st = slot::ValidateSlotName(slot_); !st.ok()) return fail(st.message(), 2);
  const bool wal2json = plugin_ == "wal2json";

  slot::ConnInfo dsn(dsn_);
  if (!password_file_.empty()) {
    Result<std::string> password = slot::ReadPasswordFile(password_file_);
    if (!password.ok()) return fail("--password-file: " + password.status().message(), 2);
    dsn.password = *password;
  }
  auto admin = slot::SlotAdmin::Connect(dsn);
  if (!admin.ok()) return fail(admin.status().ToString(), 1);
  auto settings = (*admin)->GetServerSettings();
  if (!settings.ok()) return fail(settings.status().ToString(), 1);
  auto conn = slot::ReplicationConnection::Connect(dsn);
  if (!conn.ok()) return fail(conn.status().ToString(), 1);
  slot::ReplicationConnection& c = **conn;
  auto timeout = c.WalSenderTimeout();
  if (!timeout.ok()) return fail(timeout.status().ToString(), 1);
  const milliseconds status_interval = slot::StatusInterval(*timeout);

  relay::RecordingHeader header;
  header.created_unix_us = NowUnixMicros();
  header.server_version = VersionText(settings->server_version_num);
  header.plugin = plugin_;
  header.slot = slot_;
  auto existing = (*admin)->GetSlot(slot_);
  if (existing.ok()) {
    if (existing->plugin != plugin_) {
      return fail("slot " + slot_ + " uses plugin '" + existing->plugin + "', not " + plugin_, 2);
    }
    header.start_lsn = existing->confirmed_flush_lsn.value_or(Lsn());
  } else if (existing.status().code() == StatusCode::kNotFound) {
    // A forgotten permanent slot pins WAL on a production server: temporary unless asked.
    const bool temporary = !create_slot_;
    auto created = c.CreateLogicalSlot(slot_, plugin_, temporary);
    if (!created.ok()) return fail(created.status().ToString(), 1);
    header.start_lsn = created->consistent_point;
    std::cerr << "walrelay record: created " << (temporary ? "temporary " : "permanent ")
              << "slot " << slot_ << " (" << plugin_ << ") at "
              << created->consistent_point.ToString()
              << (temporary ? "; it is dropped when the recording ends"
                            : "; drop it when done: it keeps WAL on the server")
              << "\n";
  } else {
    return fail(existing.status().ToString(), 1);
  }
  header.options = relay::StartReplicationOptions(plugin_, publication_, tables_);
  if (wal2json && tables_.empty()) {
    std::cerr << "walrelay record: warning: wal2json without --table records every table of "
                 "the database (other services' rows included) into "
              << output_ << "; restrict it with --table schema.outbox\n";
  }

  auto writer = relay::RecordingWriter::Create(output_, header);
  if (!writer.ok()) return fail(writer.status().ToString(), 1);
  relay::RecordingWriter& w = **writer;
  if (Status st = c.StartLogical(slot_, Lsn(0), header.options); !st.ok()) {
    return fail(st.ToString(), 1);
  }

  struct sigaction sa {};
  sa.sa_handler = OnRecordSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  bool in_tx = false, limit_reached = false;
  Lsn confirmable;  // end of the last whole transaction (or idle keepalive) written
  Lsn received;
  const auto started = Clock::now();
  auto next_status = started + status_interval;
  auto next_progress = started + std::chrono::seconds(1);
  uint64_t last_bytes = 0;
  auto last_progress = started;
  std::string stop_reason = "interrupted";

  // Status update: without --advance nothing is confirmed (flush 0/0 leaves the slot
  // alone); with it, the file is synced first, then its last transaction end confirmed.
  auto send_status = [&](bool sync) -> Status {
    Lsn flush;
    if (advance_) {
      if (sync) WALRELAY_RETURN_IF_ERROR(w.Sync());
      flush = confirmable;
    }
    next_status = Clock::now() + status_interval;
    return c.SendStatus(advance_ ? received : Lsn(), flush, flush, false);
  };
  auto progress = [&](bool final) {
    if (quiet_) return;
    const auto now = Clock::now();
    const double total_s = std::chrono::duration<double>(now - started).count();
    const double step_s = std::chrono::duration<double>(now - last_progress).count();
    const double mb = w.payload_bytes() / 1e6;
    const double rate = final ? (total_s > 0 ? mb / total_s : 0)
                              : (step_s > 0 ? (w.payload_bytes() - last_bytes) / 1e6 / step_s : 0);
    std::fprintf(stderr, "walrelay record: %llu events, %.1f MB, %.1f MB/s%s\n",
                 static_cast<unsigned long long>(w.xlog_records()), mb, rate,
                 final ? " (average)" : "");
    last_bytes = w.payload_bytes();
    last_progress = now;
  };

  Status st;
  bool done = false;
  while (!done && !g_record_stop.load(std::memory_order_relaxed)) {
    auto frame = c.Read(milliseconds(100));
    if (!frame.ok()) {
      st = frame.status();
      break;
    }
    switch (frame->kind) {
      case slot::Frame::Kind::kXLogData: {
        const slot::XLogData& x = frame->xlog;
        const Boundary b = Classify(wal2json, x.data);
        if (!in_tx && (limit_reached || (until && x.wal_start >= *until))) {
          stop_reason = limit_reached ? "limit reached" : "--until-lsn reached";
          done = true;  // the next unit is not recorded
          break;
        }
        st = w.AppendXLogData(x);
        if (!st.ok()) break;
        if (x.wal_end > received) received = x.wal_end;
        if (b == Boundary::kBegin) in_tx = true;
        if (b == Boundary::kCommit) {
          in_tx = false;
          confirmable = std::max(confirmable, x.wal_start);  // the Commit's end LSN
        }
        if ((max_events_ && w.xlog_records() >= max_events_) ||
            (max_bytes_ && w.payload_bytes() >= max_bytes_)) {
          limit_reached = true;
        }
        if (!in_tx && limit_reached) {
          stop_reason = "limit reached";
          done = true;
        } else if (!in_tx && b == Boundary::kCommit && until && x.wal_start >= *until) {
          stop_reason = "--until-lsn reached";
          done = true;
        }
        break;
      }
      case slot::Frame::Kind::kKeepalive: {
        const slot::PrimaryKeepalive& k = frame->keepalive;
        if (!no_keepalives_) st = w.AppendKeepalive(k);
        if (!st.ok()) break;
        if (k.wal_end > received) received = k.wal_end;
        if (!in_tx) {
          confirmable = std::max(confirmable, k.wal_end);
          if (until && k.wal_end >= *until) {
            stop_reason = "--until-lsn reached";
            done = true;
          }
        }
        if (k.reply_requested) st = send_status(true);
        break;
      }
      case slot::Frame::Kind::kEndOfStream:
        stop_reason = "the server ended the stream";
        done = true;
        break;
      case slot::Frame::Kind::kTimeout:
        break;
    }
    if (!st.ok()) break;
    const auto now = Clock::now();
    if (now >= next_status) st = send_status(true);
    if (!st.ok()) break;
    if (now >= next_progress) {
      progress(false);
      next_progress = now + std::chrono::seconds(1);
    }
  }
  if (!st.ok()) {
    (void)w.Finish();
    return fail(st.ToString() + " (the recording holds what came before)", 1);
  }
  if (Status fin = w.Finish(); !fin.ok()) return fail(fin.ToString(), 1);
  if (advance_) (void)send_status(false);  // Finish() synced the file
  (void)c.Close();
  progress(true);
  std::fprintf(stderr, "walrelay record: %s; %llu events, %llu payload bytes in %s%s\n",
               stop_reason.c_str(), static_cast<unsigned long long>(w.xlog_records()),
               static_cast<unsigned long long>(w.payload_bytes()), output_.c_str(),
               advance_ ? (", slot confirmed to " + confirmable.ToString()).c_str()
                        : " (slot not advanced)");
  return 0;
}

}  // namespace walrelay::cli
