#include "src/inbox/pg.h"

#include <libpq-events.h>

#include <chrono>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace walrelay::inbox::pg {

namespace {

Status Failed(PGconn* conn, const PGresult* res, std::string_view context, slot::PgFault* fault) {
  slot::PgFailure f = slot::FailureFromResult(conn, res, context);
  *fault = f.fault;
  return f.status;
}

// Parameters in libpq's arrays. Text parameters must be NUL-terminated for libpq: copied.
// Binary ones use their lengths.
struct Marshalled {
  explicit Marshalled(std::string_view sql, std::span<const RawParam> params)
      : query(sql), values(params.size()), lengths(params.size()), formats(params.size()),
        text(params.size()) {
    for (size_t i = 0; i < params.size(); ++i) {
      formats[i] = params[i].binary ? 1 : 0;
      if (!params[i].data) continue;
      lengths[i] = static_cast<int>(params[i].data->size());
      if (params[i].binary) {
        values[i] = params[i].data->empty() ? "" : params[i].data->data();
      } else {
        text[i] = std::string(*params[i].data);
        values[i] = text[i].c_str();
      }
    }
  }
  int count() const { return static_cast<int>(values.size()); }

  std::string query;
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  std::vector<std::string> text;
};

// What was just sent (`sent`: the PQsend* call's return), awaited no longer than the
// connection's bound (slot::ClientWaitBound): OK for a command or tuples result; otherwise
// the shared table's fault, kTransient when no answer came in time (the connection is
// shut down then) or sending failed.
Result<ResultPtr> Await(PGconn* conn, int sent, std::string_view context, slot::PgFault* fault) {
  Result<ResultPtr> res = sent == 1 ? slot::AwaitResults(conn, context, slot::ClientWaitBound(conn))
                                    : Result<ResultPtr>(ResultPtr());
  if (!res.ok()) {
    *fault = slot::PgFault::kTransient;
    return res.status();
  }
  const ExecStatusType st = *res ? PQresultStatus(res->get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return Failed(conn, res->get(), context, fault);
  }
  return res;
}

// A simple-protocol command (several statements allowed).
Result<ResultPtr> Simple(PGconn* conn, const std::string& query, std::string_view context,
                         slot::PgFault* fault) {
  return Await(conn, PQsendQuery(conn, query.c_str()), context, fault);
}

}  // namespace

Result<ResultPtr> Exec(PGconn* conn, std::string_view sql, std::span<const RawParam> params,
                       std::string_view context, slot::PgFault* fault) {
  const Marshalled m(sql, params);
  return Await(conn,
               PQsendQueryParams(conn, m.query.c_str(), m.count(), nullptr, m.values.data(),
                                 m.lengths.data(), m.formats.data(), 0),
               context, fault);
}

Status Command(PGconn* conn, std::string_view sql, std::string_view context, slot::PgFault* fault) {
  return Simple(conn, std::string(sql), context, fault).status();
}

Status Commit(PGconn* conn, slot::PgFault* fault) {
  WALRELAY_ASSIGN_OR_RETURN(ResultPtr res, Simple(conn, "COMMIT", "COMMIT", fault));
  if (std::strcmp(PQcmdStatus(res.get()), "COMMIT") != 0) {
    *fault = slot::PgFault::kServerState;
    return InternalError(
        "COMMIT rolled back: the transaction was aborted by an earlier error that the handler "
        "did not return");
  }
  return Status::Ok();
}

void Rollback(PGconn* conn) {
  if (PQstatus(conn) != CONNECTION_OK) return;
  slot::PgFault ignored;
  (void)Simple(conn, "ROLLBACK", "ROLLBACK", &ignored);
}

namespace {

// The statements a connection has prepared for pipelines: SQL text -> statement name.
// Lives and dies with its PGconn (a libpq event procedure owns it). Prepared statements
// are session state, not transactional: one prepared inside a transaction that rolls
// back stays prepared; one whose Parse the server skipped or refused is forgotten.
struct StatementCache {
  static constexpr size_t kMax = 64;  // beyond this, statements are sent unnamed
  std::unordered_map<std::string, std::string> names;
  uint64_t next = 0;
};

int StatementCacheProc(PGEventId id, void* info, void* /*pass_through*/) {
  if (id == PGEVT_CONNDESTROY || id == PGEVT_CONNRESET) {
    PGconn* conn = id == PGEVT_CONNDESTROY ? static_cast<PGEventConnDestroy*>(info)->conn
                                           : static_cast<PGEventConnReset*>(info)->conn;
    auto* cache = static_cast<StatementCache*>(PQinstanceData(conn, &StatementCacheProc));
    if (id == PGEVT_CONNDESTROY) {
      delete cache;
    } else if (cache != nullptr) {
      cache->names.clear();  // a reset connection is a new session
    }
  }
  return 1;
}

StatementCache* Statements(PGconn* conn) {
  return static_cast<StatementCache*>(PQinstanceData(conn, &StatementCacheProc));
}

}  // namespace

Status Pipeline::Send(std::string_view sql, std::span<const RawParam> params, size_t owner) {
  if (static_cast<int>(sent_.size()) >= kMaxPending) (void)Drain();
  if (!active_) {
    if (PQenterPipelineMode(conn_) != 1) {
      return slot::FailureFromResult(conn_, nullptr, "handler: enter pipeline mode").status;
    }
    active_ = true;
  }
  auto refused = [&](std::string_view what) {
    slot::PgFailure f = slot::FailureFromResult(conn_, nullptr, what);
    if (!failure_) failure_ = Failure{f.status, f.fault, owner};
    return f.status;
  };
  const Marshalled m(sql, params);
  // Prepared once per connection: the server parses and plans a handler's statement once,
  // not once per message.
  const std::string* name = nullptr;
  if (StatementCache* cache = Statements(conn_); cache != nullptr) {
    if (auto it = cache->names.find(m.query); it != cache->names.end()) {
      name = &it->second;
    } else if (cache->names.size() < StatementCache::kMax) {
      auto [ins, added] =
          cache->names.emplace(m.query, "walrelay_inbox_" + std::to_string(cache->next++));
      name = &ins->second;
      if (PQsendPrepare(conn_, name->c_str(), m.query.c_str(), m.count(), nullptr) != 1) {
        cache->names.erase(ins);
        return refused("handler: prepare statement");
      }
      sent_.push_back({owner, m.query});
    }
  }
  const int ok =
      name != nullptr
          ? PQsendQueryPrepared(conn_, name->c_str(), m.count(), m.values.data(),
                                m.lengths.data(), m.formats.data(), 0)
          : PQsendQueryParams(conn_, m.query.c_str(), m.count(), nullptr, m.values.data(),
                              m.lengths.data(), m.formats.data(), 0);
  if (ok != 1) return refused("handler: send statement");
  sent_.push_back({owner, {}});
  return Status::Ok();
}

const std::optional<Pipeline::Failure>& Pipeline::Drain() {
  if (!active_) return failure_;
  auto fail = [&](const PGresult* res, size_t owner) {
    if (failure_) return;
    slot::PgFailure f = slot::FailureFromResult(conn_, res, "handler: deferred statement");
    failure_ = Failure{f.status, f.fault, owner};
  };
  if (PQpipelineSync(conn_) != 1) {
    fail(nullptr, sent_.empty() ? 0 : sent_.front().owner);
  } else {
    // Per statement (and per Prepare): its result, then a null; at the end the sync's.
    // Each answer is awaited no longer than the connection's bound from the sync.
    const auto start = std::chrono::steady_clock::now();
    const std::chrono::milliseconds bound = slot::ClientWaitBound(conn_);
    size_t next = 0;
    for (;;) {
      Result<ResultPtr> got = slot::AwaitResult(conn_, "handler: deferred statements", start, bound);
      if (!got.ok()) {
        if (!failure_) {
          failure_ = Failure{got.status(), slot::PgFault::kTransient,
                             next < sent_.size() ? sent_[next].owner : 0};
        }
        break;
      }
      ResultPtr res = std::move(got).value();
      if (!res) {
        if (PQstatus(conn_) != CONNECTION_OK) {
          fail(nullptr, next < sent_.size() ? sent_[next].owner : 0);
          break;
        }
        continue;
      }
      const ExecStatusType st = PQresultStatus(res.get());
      if (st == PGRES_PIPELINE_SYNC) break;
      if (next < sent_.size()) {
        const Sent& s = sent_[next];
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && !s.prepared.empty()) {
          // Refused or skipped: the statement does not exist on the server.
          if (StatementCache* cache = Statements(conn_)) cache->names.erase(s.prepared);
        }
        if (st == PGRES_FATAL_ERROR) fail(res.get(), s.owner);
        // PGRES_PIPELINE_ABORTED: skipped behind an earlier failure, which is recorded.
      }
      ++next;
    }
  }
  sent_.clear();
  if (PQstatus(conn_) == CONNECTION_OK) PQexitPipelineMode(conn_);
  active_ = false;
  return failure_;
}

Result<PGconn*> Connect(const slot::ConnInfo& conninfo,
                        std::chrono::milliseconds statement_timeout) {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgConnPtr conn,
      slot::ConnectPg(conninfo, "false", "inbox: connect to PostgreSQL",
                      {.statement_timeout = statement_timeout}));
  PQregisterEventProc(conn.get(), &StatementCacheProc, "walrelay inbox statements", nullptr);
  PQsetInstanceData(conn.get(), &StatementCacheProc, new StatementCache);
  // NOTICEs ("relation already exists, skipping") are not errors; keep them off stderr.
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);
  return conn.release();
}

}  // namespace walrelay::inbox::pg
