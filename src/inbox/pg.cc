#include "src/inbox/pg.h"

#include <cstring>
#include <string>
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

}  // namespace

Result<ResultPtr> Exec(PGconn* conn, std::string_view sql, std::span<const RawParam> params,
                       std::string_view context, slot::PgFault* fault) {
  const Marshalled m(sql, params);
  ResultPtr res(PQexecParams(conn, m.query.c_str(), m.count(), nullptr, m.values.data(),
                             m.lengths.data(), m.formats.data(), 0));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return Failed(conn, res.get(), context, fault);
  }
  return res;
}

Status Command(PGconn* conn, std::string_view sql, std::string_view context, slot::PgFault* fault) {
  const std::string query(sql);
  ResultPtr res(PQexec(conn, query.c_str()));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return Failed(conn, res.get(), context, fault);
  }
  return Status::Ok();
}

Status Commit(PGconn* conn, slot::PgFault* fault) {
  ResultPtr res(PQexec(conn, "COMMIT"));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK) return Failed(conn, res.get(), "COMMIT", fault);
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
  ResultPtr res(PQexec(conn, "ROLLBACK"));
}

Status Pipeline::Send(std::string_view sql, std::span<const RawParam> params, size_t owner) {
  if (static_cast<int>(owners_.size()) >= kMaxPending) (void)Drain();
  if (!active_) {
    if (PQenterPipelineMode(conn_) != 1) {
      return slot::FailureFromResult(conn_, nullptr, "handler: enter pipeline mode").status;
    }
    active_ = true;
  }
  const Marshalled m(sql, params);
  if (PQsendQueryParams(conn_, m.query.c_str(), m.count(), nullptr, m.values.data(),
                        m.lengths.data(), m.formats.data(), 0) != 1) {
    slot::PgFailure f = slot::FailureFromResult(conn_, nullptr, "handler: send statement");
    if (!failure_) failure_ = Failure{f.status, f.fault, owner};
    return f.status;
  }
  owners_.push_back(owner);
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
    fail(nullptr, owners_.empty() ? 0 : owners_.front());
  } else {
    // Per statement: its result, then a null; at the end the sync's result.
    size_t next = 0;
    for (;;) {
      ResultPtr res(PQgetResult(conn_));
      if (!res) {
        if (PQstatus(conn_) != CONNECTION_OK) {
          fail(nullptr, next < owners_.size() ? owners_[next] : 0);
          break;
        }
        continue;
      }
      const ExecStatusType st = PQresultStatus(res.get());
      if (st == PGRES_PIPELINE_SYNC) break;
      const size_t owner = next < owners_.size() ? owners_[next] : owners_.back();
      ++next;
      if (st == PGRES_FATAL_ERROR) fail(res.get(), owner);
      // PGRES_PIPELINE_ABORTED: skipped behind an earlier failure, which is recorded.
    }
  }
  owners_.clear();
  if (PQstatus(conn_) == CONNECTION_OK) PQexitPipelineMode(conn_);
  active_ = false;
  return failure_;
}

Result<PGconn*> Connect(const std::string& conninfo) {
  WALRELAY_ASSIGN_OR_RETURN(slot::PgConnPtr conn,
                            slot::ConnectPg(conninfo, "false", "inbox: connect to PostgreSQL"));
  // NOTICEs ("relation already exists, skipping") are not errors; keep them off stderr.
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);
  return conn.release();
}

}  // namespace walrelay::inbox::pg
