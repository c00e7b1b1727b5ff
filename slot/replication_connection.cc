#include "slot/replication_connection.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "base/sql.h"
#include "slot/server_version.h"

namespace walrelay::slot {
namespace {

using Clock = std::chrono::steady_clock;

bool IsIdentChar(char c, bool allow_upper) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         (allow_upper && c >= 'A' && c <= 'Z');
}

Status ValidateIdent(std::string_view what, std::string_view s, bool allow_upper) {
  if (s.empty() || s.size() > 63) {
    return InvalidArgumentError(std::string(what) + " '" + std::string(s) +
                                "' must be 1 to 63 characters long");
  }
  for (char c : s) {
    if (!IsIdentChar(c, allow_upper)) {
      return InvalidArgumentError(
          std::string(what) + " '" + std::string(s) + "' may contain only " +
          (allow_upper ? "letters" : "lower-case letters") + ", digits and underscores");
    }
  }
  return Status::Ok();
}

std::string Value(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return {};
  return std::string(PQgetvalue(r, row, col), PQgetlength(r, row, col));
}

}  // namespace

Status ValidateSlotName(std::string_view name) {
  return ValidateIdent("replication slot name", name, /*allow_upper=*/false);
}

Result<std::unique_ptr<ReplicationConnection>> ReplicationConnection::Connect(
    const ConnInfo& conninfo) {
  auto conn = ConnectPg(conninfo, "database", "replication connection");
  if (!conn.ok()) {
    Status st = conn.status();
    if (st.code() == StatusCode::kUnavailable) {
      // The server may have rejected the role in a language we do not match on: ask it
      // over a normal connection whether the role may replicate.
      auto plain = ConnectPg(conninfo, "false", "replication privilege probe");
      if (plain.ok()) {
        PgResultPtr r(PQexec(plain->get(), kMayReplicateSql));
        if (r && PQresultStatus(r.get()) == PGRES_TUPLES_OK && PQntuples(r.get()) == 1 &&
            Value(r.get(), 0, 0) == "f") {
          const char* user = PQuser(plain->get());
          return MapPgError("42501", st.message(), user ? user : "", "replication connection");
        }
      }
    }
    return st;
  }
  return std::unique_ptr<ReplicationConnection>(new ReplicationConnection(std::move(*conn)));
}

ReplicationConnection::~ReplicationConnection() { FreeCopyBuffer(); }

void ReplicationConnection::FreeCopyBuffer() {
  if (copy_buf_ != nullptr) {
    PQfreemem(copy_buf_);
    copy_buf_ = nullptr;
  }
}

int ReplicationConnection::backend_pid() const { return conn_ ? PQbackendPID(conn_.get()) : 0; }
int ReplicationConnection::socket() const { return conn_ ? PQsocket(conn_.get()) : -1; }
std::string ReplicationConnection::user() const {
  const char* u = conn_ ? PQuser(conn_.get()) : nullptr;
  return u ? u : "";
}

Result<PgResultPtr> ReplicationConnection::Command(const std::string& command,
                                                   ExecStatusType expected) {
  if (!conn_) return FailedPreconditionError(command + ": the connection is closed");
  if (streaming_) {
    return FailedPreconditionError(command + ": the connection is streaming; Close it first");
  }
  // No bound: a slot's creation waits for every transaction open on the server, however
  // long (the thread's ServerWaitObserver hears about it each second). A peer that
  // vanished (half-open) ends the wait only through libpq's TCP keepalives (on by default;
  // the kernel's idle time, 2 h unless the DSN sets keepalives_idle).
  WALRELAY_ASSIGN_OR_RETURN(PgResultPtr res, SendAndAwait(conn_.get(), command, {}, true, command,
                                                          std::chrono::milliseconds(0)));
  if (!res || PQresultStatus(res.get()) != expected) {
    Status st = StatusFromResult(conn_.get(), res.get(), command);
    if (PQstatus(conn_.get()) == CONNECTION_BAD) {
      return UnavailableError(st.message());
    }
    return st;
  }
  return res;
}

Result<SystemIdentity> ReplicationConnection::IdentifySystem() {
  WALRELAY_ASSIGN_OR_RETURN(PgResultPtr r, Command("IDENTIFY_SYSTEM", PGRES_TUPLES_OK));
  if (PQntuples(r.get()) != 1 || PQnfields(r.get()) < 4) {
    return InternalError("IDENTIFY_SYSTEM: unexpected result shape (" +
                         std::to_string(PQntuples(r.get())) + " rows, " +
                         std::to_string(PQnfields(r.get())) + " columns)");
  }
  SystemIdentity id;
  id.system_id = Value(r.get(), 0, 0);
  id.timeline = static_cast<uint32_t>(std::strtoul(Value(r.get(), 0, 1).c_str(), nullptr, 10));
  auto pos = Lsn::Parse(Value(r.get(), 0, 2));
  if (!pos) return InternalError("IDENTIFY_SYSTEM: bad xlogpos '" + Value(r.get(), 0, 2) + "'");
  id.xlog_pos = *pos;
  id.dbname = Value(r.get(), 0, 3);
  return id;
}

Result<CreatedSlot> ReplicationConnection::CreateLogicalSlot(std::string_view slot_name,
                                                             std::string_view plugin,
                                                             bool temporary, bool export_snapshot,
                                                             bool failover) {
  WALRELAY_RETURN_IF_ERROR(ValidateSlotName(slot_name));
  WALRELAY_RETURN_IF_ERROR(ValidateIdent("output plugin name", plugin, /*allow_upper=*/true));
  if (failover && (temporary || !SupportsFailoverSlots(server_version()))) {
    return InvalidArgumentError(
        "a failover slot needs PostgreSQL 17 or later and a permanent slot (server " +
        std::to_string(server_version()) + (temporary ? ", temporary slot)" : ")"));
  }
  // Without failover, the pre-15 keyword syntax, which PostgreSQL 10 and later all accept;
  // with it, the option list of 15+ (FAILOVER exists since 17).
  std::string cmd = "CREATE_REPLICATION_SLOT " + std::string(slot_name) +
                    (temporary ? " TEMPORARY" : "") + " LOGICAL " + std::string(plugin) +
                    (failover ? std::string(" (SNAPSHOT '") +
                                    (export_snapshot ? "export" : "nothing") + "', FAILOVER true)"
                     : export_snapshot ? " EXPORT_SNAPSHOT"
                                       : " NOEXPORT_SNAPSHOT");
  WALRELAY_ASSIGN_OR_RETURN(PgResultPtr r, Command(cmd, PGRES_TUPLES_OK));
  if (PQntuples(r.get()) != 1 || PQnfields(r.get()) < 4) {
    return InternalError(cmd + ": unexpected result shape");
  }
  CreatedSlot s;
  s.slot_name = Value(r.get(), 0, 0);
  auto cp = Lsn::Parse(Value(r.get(), 0, 1));
  if (!cp) return InternalError(cmd + ": bad consistent_point '" + Value(r.get(), 0, 1) + "'");
  s.consistent_point = *cp;
  s.snapshot_name = Value(r.get(), 0, 2);
  s.output_plugin = Value(r.get(), 0, 3);
  return s;
}

int ReplicationConnection::server_version() const { return PQserverVersion(conn_.get()); }

Status ReplicationConnection::DropSlot(std::string_view slot_name, bool wait) {
  WALRELAY_RETURN_IF_ERROR(ValidateSlotName(slot_name));
  std::string cmd = "DROP_REPLICATION_SLOT " + std::string(slot_name) + (wait ? " WAIT" : "");
  return Command(cmd, PGRES_COMMAND_OK).status();
}

Result<std::chrono::milliseconds> ReplicationConnection::WalSenderTimeout() {
  WALRELAY_ASSIGN_OR_RETURN(PgResultPtr r, Command("SHOW wal_sender_timeout", PGRES_TUPLES_OK));
  if (PQntuples(r.get()) != 1) return InternalError("SHOW wal_sender_timeout: no row");
  return ParseDurationSetting(Value(r.get(), 0, 0));
}

Status ReplicationConnection::StartLogical(
    std::string_view slot_name, Lsn start,
    const std::vector<std::pair<std::string, std::string>>& options) {
  WALRELAY_RETURN_IF_ERROR(ValidateSlotName(slot_name));
  std::string cmd =
      "START_REPLICATION SLOT " + std::string(slot_name) + " LOGICAL " + start.ToString();
  if (!options.empty()) {
    cmd += " (";
    for (size_t i = 0; i < options.size(); ++i) {
      // '-' is allowed too (wal2json's options: format-version, include-xids, ...): the
      // name is sent double-quoted.
      std::string name = options[i].first;
      std::replace(name.begin(), name.end(), '-', '_');
      WALRELAY_RETURN_IF_ERROR(ValidateIdent("plugin option name", name, /*allow_upper=*/false));
      if (i > 0) cmd += ", ";
      cmd += "\"" + options[i].first + "\" " + QuoteLiteral(options[i].second);
    }
    cmd += ")";
  }
  WALRELAY_ASSIGN_OR_RETURN(silence_limit_, WalSenderTimeout());
  WALRELAY_ASSIGN_OR_RETURN(PgResultPtr r, Command(cmd, PGRES_COPY_BOTH));
  (void)r;
  last_received_ = Clock::now();
  reply_requested_at_.reset();
  last_status_ = {};
  if (PQsetnonblocking(conn_.get(), 1) != 0) {
    return UnavailableError("START_REPLICATION: cannot make the connection non-blocking: " +
                            std::string(PQerrorMessage(conn_.get())));
  }
  streaming_ = true;
  slot_ = std::string(slot_name);
  return Status::Ok();
}

Result<Frame> ReplicationConnection::Read(std::chrono::milliseconds timeout) {
  FreeCopyBuffer();
  if (!conn_ || !streaming_) {
    return FailedPreconditionError("Read: the connection is not streaming (call StartLogical)");
  }
  // Built only on the error paths: Read() runs once per message.
  auto context = [this] { return "replication stream of slot " + slot_; };
  auto broken = [&] {  // the connection failed: this stream is over
    streaming_ = false;
    return UnavailableError(context() + ": " + PQerrorMessage(conn_.get()) +
                            "; reconnect and resume from the slot");
  };
  // The clock is read only once the buffered messages ran out (not per message): the
  // deadline from then, and the time the last buffered bytes were taken as "received".
  std::optional<Clock::time_point> deadline;
  int tries = 0;  // reads of a moving stream's socket before poll() (see moving_)
  for (;;) {
    char* buf = nullptr;
    const int n = PQgetCopyData(conn_.get(), &buf, /*async=*/1);
    if (n > 0) {
      ++gathered_;
      received_unstamped_ = true;
      copy_buf_ = buf;
      auto msg = ParseServerMessage(std::string_view(buf, static_cast<size_t>(n)));
      if (!msg.ok()) return msg.status().WithContext(context());
      Frame f;
      if (auto* x = std::get_if<XLogData>(&*msg)) {
        f.kind = Frame::Kind::kXLogData;
        f.xlog = *x;
        moving_ = true;
      } else {
        f.kind = Frame::Kind::kKeepalive;
        f.keepalive = std::get<PrimaryKeepalive>(*msg);
      }
      return f;
    }
    if (n == -1) {
      // The server ended COPY. Collect the command's final result.
      streaming_ = false;
      Status st;
      while (PGresult* raw = PQgetResult(conn_.get())) {
        PgResultPtr r(raw);
        const ExecStatusType es = PQresultStatus(r.get());
        if (st.ok() && es != PGRES_COMMAND_OK && es != PGRES_TUPLES_OK && es != PGRES_COPY_OUT &&
            es != PGRES_COPY_BOTH) {
          st = StatusFromResult(conn_.get(), r.get(), context());
        }
      }
      if (!st.ok()) return st;
      Frame f;
      f.kind = Frame::Kind::kEndOfStream;
      return f;
    }
    if (n == -2) return broken();
    if (napped_ != nullptr) {  // caught up again: what did the last nap gather?
      napped_->Judge(gathered_);
      napped_ = nullptr;
    }
    // n == 0: nothing complete buffered. Flush pending output, then wait on the socket.
    const int flush = PQflush(conn_.get());
    if (flush < 0) {
      return UnavailableError(context() + ": sending failed: " + PQerrorMessage(conn_.get()));
    }
    // A moving stream: take what the socket holds without poll(), then once more after a
    // nap off the socket's wait queue, before sleeping on it (the header's "busy stream").
    if (moving_ && timeout.count() > 0 && tries < 2) {
      const bool nap = tries++ == 1;
      NapRule& rule = naps_[in_transaction_ ? 1 : 0];
      if (!nap || rule.Take()) {
        if (nap) {
          std::this_thread::sleep_for(kBusyStreamNap);
          napped_ = &rule;
          gathered_ = 0;
        }
        if (PQconsumeInput(conn_.get()) == 0) return broken();
        continue;
      }
    }
    // Only a reader about to sleep on the socket has stopped the stream; Read(0) returns
    // without sleeping and leaves it moving (the header's "busy stream").
    if (timeout.count() > 0) moving_ = false;
    const auto now = Clock::now();
    if (!deadline) deadline = now + timeout;
    if (received_unstamped_) {  // messages were handed out since bytes were last stamped
      last_received_ = now;
      reply_requested_at_.reset();
      received_unstamped_ = false;
    }
    auto wake = *deadline;
    WALRELAY_RETURN_IF_ERROR(CheckLiveness(now, &wake));
    if (now >= *deadline) return Frame{};
    wake = std::min(wake, *deadline);
    const auto wait_ms =
        std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(wake - now).count());
    pollfd fds[2] = {};
    pollfd& pfd = fds[0];
    pfd.fd = PQsocket(conn_.get());
    pfd.events = static_cast<short>(POLLIN | (flush == 1 ? POLLOUT : 0));
    fds[1].fd = wake_fd_;  // a negative fd is ignored by poll()
    fds[1].events = POLLIN;
    const int pr =
        ::poll(fds, wake_fd_ >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(wait_ms, 1 << 30)));
    if (pr < 0) {
      const int e = errno;
      if (e == EINTR) continue;
      return UnavailableError(context() + ": poll: " + std::strerror(e));
    }
    if (pr == 0) continue;  // the deadline, or a liveness check, is due
    if (fds[1].revents & POLLIN) {
      // Cleared here, where the wake-up is seen: the caller serves whatever it signalled
      // after this Read() (SetWakeFd), and an eventfd holds one counter, so one read does.
      uint64_t count;
      const ssize_t n = ::read(wake_fd_, &count, sizeof count);
      (void)n;  // -1 (EAGAIN): already drained; either way it is clear now
      if (!(pfd.revents & (POLLIN | POLLERR | POLLHUP))) {
        return Frame{};  // woken (e.g. delivery reports to serve), nothing from the server
      }
    }
    if (pfd.revents & (POLLIN | POLLERR | POLLHUP)) {
      if (PQconsumeInput(conn_.get()) == 0) return broken();
      if (pfd.revents & POLLIN) {  // bytes arrived: the server is alive
        last_received_ = Clock::now();
        reply_requested_at_.reset();
      }
    }
  }
}

Status ReplicationConnection::CheckLiveness(Clock::time_point now, Clock::time_point* next_check) {
  if (silence_limit_.count() <= 0) return Status::Ok();
  const auto request_at = last_received_ + silence_limit_ * 3 / 4;
  if (!reply_requested_at_) {
    if (now < request_at) {
      *next_check = std::min(*next_check, request_at);
      return Status::Ok();
    }
    // Ask the server to answer at once (a walsender answers a reply request with a
    // keepalive): a healthy idle stream is otherwise silent while we report regularly.
    StandbyStatusUpdate ping = last_status_;
    ping.client_time = PgTimeNow();
    ping.reply_requested = true;
    const std::string msg = EncodeStandbyStatusUpdate(ping);
    if (PQputCopyData(conn_.get(), msg.data(), static_cast<int>(msg.size())) != 1 ||
        PQflush(conn_.get()) < 0) {
      streaming_ = false;
      return UnavailableError("replication stream of slot " + slot_ +
                              ": cannot send a reply request: " + PQerrorMessage(conn_.get()) +
                              "; reconnect and resume from the slot");
    }
    reply_requested_at_ = now;
  }
  const auto dead_at =
      std::max(last_received_ + silence_limit_, *reply_requested_at_ + silence_limit_ / 4);
  if (now < dead_at) {
    *next_check = std::min(*next_check, dead_at);
    return Status::Ok();
  }
  streaming_ = false;
  const auto silent_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - last_received_).count();
  return UnavailableError(
      "replication stream of slot " + slot_ + ": no message from the server for " +
      std::to_string(silent_ms / 1000) + "." + std::to_string(silent_ms % 1000 / 100) +
      " s (wal_sender_timeout " + std::to_string(silence_limit_.count()) +
      " ms), not even an answer to a reply request: connection presumed dead (half-open); "
      "reconnecting and resuming from the slot. If this repeats, check the network path "
      "(firewalls, NAT, proxies dropping idle connections) to the server");
}

Status ReplicationConnection::SendStatus(Lsn write, Lsn flush, Lsn apply, bool reply_requested) {
  if (!conn_ || !streaming_) {
    return FailedPreconditionError("SendStatus: the connection is not streaming");
  }
  last_status_ = {write, flush, apply, 0, false};
  const std::string msg =
      EncodeStandbyStatusUpdate({write, flush, apply, PgTimeNow(), reply_requested});
  const int put = PQputCopyData(conn_.get(), msg.data(), static_cast<int>(msg.size()));
  if (put != 1) {
    return UnavailableError("standby status update for slot " + slot_ +
                            ": cannot queue: " + PQerrorMessage(conn_.get()));
  }
  if (PQflush(conn_.get()) < 0) {
    return UnavailableError("standby status update for slot " + slot_ +
                            ": send failed: " + PQerrorMessage(conn_.get()));
  }
  return Status::Ok();
}

Status ReplicationConnection::Close() {
  FreeCopyBuffer();
  if (!conn_) return Status::Ok();
  Status st;
  if (streaming_) {
    streaming_ = false;
    PQsetnonblocking(conn_.get(), 0);
    if (PQputCopyEnd(conn_.get(), nullptr) != 1 || PQflush(conn_.get()) != 0) {
      st = UnavailableError("closing the replication stream: " +
                            std::string(PQerrorMessage(conn_.get())));
    } else {
      // Drain what the server sent before it saw CopyDone, then the final results.
      char* buf = nullptr;
      int n;
      while ((n = PQgetCopyData(conn_.get(), &buf, /*async=*/0)) > 0) PQfreemem(buf);
      if (n == -2) {
        st = UnavailableError("closing the replication stream: " +
                              std::string(PQerrorMessage(conn_.get())));
      }
      while (PGresult* raw = PQgetResult(conn_.get())) {
        PgResultPtr r(raw);
        if (st.ok() && PQresultStatus(r.get()) == PGRES_FATAL_ERROR) {
          st = StatusFromResult(conn_.get(), r.get(), "closing the replication stream");
        }
      }
    }
  }
  conn_.reset();
  return st;
}

}  // namespace walrelay::slot
