// ReplicationConnection: one libpq connection in walsender mode (replication=database)
// that creates logical slots and streams a slot's changes (PostgreSQL docs, "Streaming
// Replication Protocol"; the pattern of src/bin/pg_basebackup/pg_recvlogical.c).
//
// Life cycle:
//   Connect → [IdentifySystem | CreateLogicalSlot | DropSlot | WalSenderTimeout]*
//           → StartLogical → (Read | SendStatus)* → Close
// Commands before StartLogical block; after it the connection is in CopyBoth and
// non-blocking: Read waits at most its timeout and SendStatus never blocks (pending
// bytes are flushed by later Read calls).
//
// Progress and timing are the caller's job: answer a keepalive with reply_requested at
// once, and send a status at least every StatusInterval(WalSenderTimeout()) (wire.h),
// else the server drops the connection after wal_sender_timeout. Report as flushed
// only what is durable downstream: the server may recycle WAL up to that point, and a
// restart resumes from max(requested LSN, confirmed_flush_lsn).
//
// Liveness: a half-open connection (the peer gone without a RST) would otherwise be
// noticed only when TCP gives up, minutes to hours later. StartLogical reads
// wal_sender_timeout (T); when Read has received nothing for 3/4 T it asks the server for
// a reply (a standby status update repeating the last positions sent, reply requested),
// and when nothing arrived for T in all and for T/4 since that request, Read fails with
// kUnavailable ("connection presumed dead"): reconnect and resume from the slot. T = 0
// (disabled on the server) disables this too.
//
// A slot is read by one connection at a time: StartLogical on a slot that another
// connection streams fails with kFailedPrecondition (SQLSTATE 55006).
//
// Thread safety: none; one thread drives a connection. The object owns its PGconn.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/lsn.h"
#include "base/status.h"
#include "slot/pg_error.h"
#include "slot/wire.h"

namespace walrelay::slot {

// Result of IDENTIFY_SYSTEM.
struct SystemIdentity {
  std::string system_id;  // decimal text, as the server prints it
  uint32_t timeline = 0;
  Lsn xlog_pos;        // current WAL flush position
  std::string dbname;  // the connection's database (walsender mode = database)
};

// Result of CREATE_REPLICATION_SLOT ... LOGICAL.
struct CreatedSlot {
  std::string slot_name;
  // Changes of transactions committing after this point are streamed from the slot.
  Lsn consistent_point;
  // Exported snapshot (SET TRANSACTION SNAPSHOT '...') when asked for; valid only until
  // the next command on this connection or its close. Empty otherwise.
  std::string snapshot_name;
  std::string output_plugin;
};

// One step of the stream from Read().
struct Frame {
  enum class Kind {
    kTimeout,      // nothing arrived within the timeout
    kXLogData,     // `xlog` holds one chunk of the plugin's output
    kKeepalive,    // `keepalive` holds the server's WAL end and reply flag
    kEndOfStream,  // the server ended COPY (after Close, or the server is shutting down)
  };
  Kind kind = Kind::kTimeout;
  // When kind == kXLogData. xlog.data points into libpq's buffer: valid until the next
  // Read() or Close() (or the connection's destruction). Copy what must live longer.
  XLogData xlog;
  // When kind == kKeepalive.
  PrimaryKeepalive keepalive;
};

// The replication stream as the relay pipeline sees it: frames in, status updates out.
// Implemented by ReplicationConnection (the live slot) and by recordings being replayed.
class FrameSource {
 public:
  virtual ~FrameSource() = default;
  // The next frame, or a kTimeout frame after `timeout`. Views in the frame are valid
  // until the next Read().
  virtual Result<Frame> Read(std::chrono::milliseconds timeout) = 0;
  // Reports the positions written, flushed (durable: safe to forget) and applied.
  virtual Status SendStatus(Lsn write, Lsn flush, Lsn apply, bool reply_requested) = 0;
  // A descriptor that ends a waiting Read() early, with a kTimeout frame, once it is
  // readable and nothing arrived from the server (the relay passes the Kafka producer's
  // delivery-report descriptor, so acks are served at once rather than after the wait).
  // -1: none. A source that wakes on it drains it (one read of up to 8 bytes: an eventfd's
  // counter), so the owner serves what it signalled without a system call of its own; the
  // caller serves after every Read() that woke and keeps it open while it is set. Sources
  // that never wait (recordings) may ignore it.
  virtual void SetWakeFd(int /*fd*/) {}
  // A hint from the consumer, which decodes the frames: whether the stream is inside a
  // transaction (after its Begin, before its Commit). ReplicationConnection judges its
  // busy-stream nap separately for each (NapRule): inside a transaction the next change
  // follows at once; after a Commit it may not (sparse single-row transactions).
  virtual void SetInTransaction(bool /*in_transaction*/) {}
};

// When a catching-up reader of a moving stream takes the busy-stream nap (Read() below).
// A nap pays only when it gathers what several wake-ups on the socket would have brought:
// one that gathered kEnough messages before the reader caught up again keeps naps on; one
// that gathered fewer (the next sparse transaction, or nothing) makes the next `skip`
// catch-ups go straight to poll(), `skip` doubling (1, 2, 4, ...) up to kMaxSkips while
// naps keep falling short. A dense drain, where a nap gathers dozens of the walsender's
// sends, naps every time; between sparse transactions (5,000 single-row transactions/s:
// 200 us apart on average) a nap found the next transaction or two about half the time, and
// the timer it cost was then no cheaper than the one wake-up it saved, so it naps once per
// kMaxSkips + 1 catch-ups instead. ReplicationConnection keeps one rule inside
// transactions and one between them (FrameSource::SetInTransaction), so that a sparse
// stream's gaps between transactions do not turn off the naps inside a large transaction.
class NapRule {
 public:
  static constexpr uint32_t kMaxSkips = 64;
  static constexpr uint32_t kEnough = 16;  // messages a nap must gather to count as found
  // Whether to nap at this catch-up (false: go to poll()).
  bool Take() {
    if (skip_ == 0) return true;
    --skip_;
    return false;
  }
  // The nap taken gathered `messages` before the reader caught up again.
  void Judge(uint32_t messages) {
    if (messages >= kEnough) {
      backoff_ = 0;
    } else {
      backoff_ = backoff_ == 0 ? 1 : std::min(backoff_ * 2, kMaxSkips);
      skip_ = backoff_;
    }
  }

 private:
  uint32_t skip_ = 0;     // catch-ups left that skip the nap
  uint32_t backoff_ = 0;  // the skip after the last short nap (0: the last nap gathered enough)
};

class ReplicationConnection : public FrameSource {
 public:
  // Opens a walsender connection. `conninfo`: a libpq keyword/value string or URI, unix
  // socket or TCP, and a password apart (ConnInfo); replication=database is forced,
  // application_name defaults to "walrelay". Errors: kUnavailable (server unreachable:
  // retry), kPermissionDenied (the role lacks REPLICATION; the message names the ALTER ROLE
  // fix), kFailedPrecondition (pg_hba.conf), kNotFound (role or database missing).
  static Result<std::unique_ptr<ReplicationConnection>> Connect(const ConnInfo& conninfo);

  ~ReplicationConnection() override;
  ReplicationConnection(const ReplicationConnection&) = delete;
  ReplicationConnection& operator=(const ReplicationConnection&) = delete;

  // REQUIRES: not streaming (before StartLogical) for the commands below.
  Result<SystemIdentity> IdentifySystem();

  // CREATE_REPLICATION_SLOT name [TEMPORARY] LOGICAL plugin [NO]EXPORT_SNAPSHOT; with
  // `failover`, the option-list form with FAILOVER true (PostgreSQL 17+: the slot is
  // synchronized to standbys that have sync_replication_slots on, and exists on one that
  // is promoted). A temporary slot is dropped when this connection closes. Slot names:
  // 1..63 of [a-z0-9_] (PostgreSQL's rule), else kInvalidArgument; failover on a server
  // before 17 or for a temporary slot is kInvalidArgument. kAlreadyExists if it exists;
  // kFailedPrecondition if wal_level is not logical.
  Result<CreatedSlot> CreateLogicalSlot(std::string_view slot_name, std::string_view plugin,
                                        bool temporary, bool export_snapshot = false,
                                        bool failover = false);

  // The server's version as PQserverVersion gives it (e.g. 170004).
  int server_version() const;

  // DROP_REPLICATION_SLOT name [WAIT]. kNotFound if missing; kFailedPrecondition if
  // active and !wait.
  Status DropSlot(std::string_view slot_name, bool wait = false);

  // SHOW wal_sender_timeout (0 = disabled).
  Result<std::chrono::milliseconds> WalSenderTimeout();

  // START_REPLICATION SLOT slot LOGICAL start (options...), e.g.
  // {{"proto_version", "1"}, {"publication_names", "p"}, {"messages", "true"}}.
  // Option names: [a-z0-9_-]+ (sent double-quoted); values are sent as quoted literals. The server
  // starts at max(start, confirmed_flush_lsn). Errors: kNotFound (no such slot),
  // kFailedPrecondition (slot active for another PID: the message names it),
  // kInvalidArgument / kFailedPrecondition for options the plugin rejects.
  Status StartLogical(std::string_view slot_name, Lsn start,
                      const std::vector<std::pair<std::string, std::string>>& options);

  // Waits up to `timeout` (0 = poll once) for the next CopyData. Invalidates the
  // previous Frame's xlog.data. Errors: kUnavailable (connection lost, or silent past
  // wal_sender_timeout — see Liveness above: restart from the slot), kDataLoss (malformed
  // framing), or the server's error mapped (pg_error.h).
  // A busy stream: when the buffered messages run out right after XLogData and `timeout`
  // is not 0, Read() first takes what the socket holds without poll(), then naps
  // kBusyStreamNap (when NapRule says so) and takes it once more, and only then sleeps in
  // poll(). A reader that sleeps on the socket whenever it catches up must be woken by the
  // walsender's every send, and on a virtual machine that wake-up is the walsender's
  // dearest step (14 % of its samples in a drain where the reader kept catching up,
  // against 2 % for pg_recvlogical, which is slower per message and rarely sleeps); the
  // nap costs the reader a timer instead and lets several messages gather per read.
  // Read(0), which returns at once when nothing is buffered, leaves the stream moving: the
  // next waiting Read() still tries and naps (a caller that reads bursts with Read(0), as
  // the relay's pipeline does, would otherwise sleep on the socket at every catch-up).
  // Measured (bench/README.md, "Reading a busy stream" and performance round three): the
  // read path's CPU per event halved in a drain; `walrelay run`'s fell ~10 % once Read(0)
  // kept the stream moving; at 5,000 single-row transactions/s, where naps seldom gather
  // enough, NapRule keeps the relay's CPU per event within noise of a reader that never
  // naps. Adds at most one nap (plus timer slack) of latency when a stream stops; nothing
  // once it is idle.
  // REQUIRES: streaming().
  Result<Frame> Read(std::chrono::milliseconds timeout) override;
  static constexpr std::chrono::microseconds kBusyStreamNap{50};
  // Whether the stream is moving: the next Read() with a timeout takes what the socket
  // holds, and naps when NapRule says so, before it sleeps in poll().
  bool moving() const { return moving_; }

  // Queues a standby status update ('r') with client time = now and flushes what the
  // socket takes without blocking. kUnavailable if the connection is broken.
  // REQUIRES: streaming().
  Status SendStatus(Lsn write, Lsn flush, Lsn apply, bool reply_requested = false) override;
  void SetWakeFd(int fd) override { wake_fd_ = fd; }
  void SetInTransaction(bool in_transaction) override { in_transaction_ = in_transaction; }

  // Ends COPY (CopyDone), drains the server's remaining output and closes the
  // connection. Idempotent. After Close, only the destructor may be called.
  Status Close();

  bool streaming() const { return streaming_; }
  // The server process serving this connection (pg_replication_slots.active_pid).
  int backend_pid() const;
  // The socket, for callers that multiplex it in their own poll loop (-1 when closed).
  int socket() const;
  // The connection's role.
  std::string user() const;

 private:
  explicit ReplicationConnection(PgConnPtr conn) : conn_(std::move(conn)) {}
  Result<PgResultPtr> Command(const std::string& command, ExecStatusType expected);
  void FreeCopyBuffer();
  // Liveness (see the top comment): OK, or kUnavailable when the server is presumed gone.
  // Sends the reply request when due. Sets `*next_check` to when to look again.
  Status CheckLiveness(std::chrono::steady_clock::time_point now,
                       std::chrono::steady_clock::time_point* next_check);

  PgConnPtr conn_;
  std::chrono::milliseconds silence_limit_{0};  // wal_sender_timeout; 0 = no check
  std::chrono::steady_clock::time_point last_received_;
  bool received_unstamped_ = false;  // messages returned since last_received_ was set
  std::optional<std::chrono::steady_clock::time_point> reply_requested_at_;
  StandbyStatusUpdate last_status_{};  // repeated by the reply request
  char* copy_buf_ = nullptr;           // libpq-allocated; backs the last Frame's xlog.data
  bool streaming_ = false;
  bool moving_ = false;  // XLogData was the last frame and no Read() slept since: try before poll()
  NapRule naps_[2];  // [in_transaction_]: each state learns whether its naps find data
  NapRule* napped_ = nullptr;  // the rule of the last nap, until the reader catches up again
  uint32_t gathered_ = 0;      // messages handed out since that nap
  bool in_transaction_ = false;
  int wake_fd_ = -1;     // SetWakeFd
  std::string slot_;  // slot being streamed, for messages
};

// Validates a replication slot name: 1..63 characters of [a-z0-9_].
Status ValidateSlotName(std::string_view name);

}  // namespace walrelay::slot
