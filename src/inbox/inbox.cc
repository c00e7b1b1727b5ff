// The API surface of walrelay::inbox (inbox.h): InboxMessage, Transaction and the
// InboxConsumer forwarding to its Impl (src/inbox/impl.h, which lists the other files).
#include "src/inbox/inbox.h"

#include <cstdlib>
#include <cstring>

#include "src/inbox/impl.h"
#include "src/inbox/pg.h"

namespace walrelay::inbox {

std::optional<std::string_view> InboxMessage::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return std::nullopt;
}

namespace {

std::vector<pg::RawParam> ToRaw(const std::vector<Param>& params) {
  std::vector<pg::RawParam> raw;
  raw.reserve(params.size());
  for (const Param& p : params) {
    raw.push_back(pg::RawParam{p.value ? std::optional<std::string_view>(*p.value) : std::nullopt});
  }
  return raw;
}

}  // namespace

Status Transaction::WaitDeferred() {
  if (pipeline_ == nullptr) return Status::Ok();
  const std::optional<pg::Pipeline::Failure>& f = pipeline_->Drain();
  if (!f) return Status::Ok();
  TransactionAccess::Record(*this, f->status, f->fault);
  return f->status;
}

Status Transaction::Defer(std::string_view sql, const std::vector<Param>& params) {
  if (pipeline_ == nullptr) return Exec(sql, params).status();
  auto raw = ToRaw(params);
  Status st = pipeline_->Send(sql, raw, owner_);
  if (!st.ok()) {
    const auto& f = pipeline_->failure();
    TransactionAccess::Record(*this, st, f ? f->fault : slot::PgFault::kTransient);
  }
  return st;
}

Result<int64_t> Transaction::Exec(std::string_view sql, const std::vector<Param>& params) {
  WALRELAY_RETURN_IF_ERROR(WaitDeferred());
  auto raw = ToRaw(params);
  slot::PgFault fault;
  Result<pg::ResultPtr> r = pg::Exec(conn_, sql, raw, "handler statement", &fault);
  if (!r.ok()) {
    TransactionAccess::Record(*this, r.status(), fault);
    return r.status();
  }
  pg::ResultPtr res = std::move(r).value();
  const char* n = PQcmdTuples(res.get());
  return static_cast<int64_t>(n != nullptr && *n != '\0' ? std::strtoll(n, nullptr, 10) : 0);
}

Result<std::vector<Row>> Transaction::Query(std::string_view sql,
                                            const std::vector<Param>& params) {
  WALRELAY_RETURN_IF_ERROR(WaitDeferred());
  auto raw = ToRaw(params);
  slot::PgFault fault;
  Result<pg::ResultPtr> r = pg::Exec(conn_, sql, raw, "handler query", &fault);
  if (!r.ok()) {
    TransactionAccess::Record(*this, r.status(), fault);
    return r.status();
  }
  pg::ResultPtr res = std::move(r).value();
  std::vector<Row> rows;
  const int nrows = PQntuples(res.get());
  const int ncols = PQnfields(res.get());
  rows.reserve(static_cast<size_t>(nrows));
  for (int r = 0; r < nrows; ++r) {
    Row row;
    row.reserve(static_cast<size_t>(ncols));
    for (int c = 0; c < ncols; ++c) {
      if (PQgetisnull(res.get(), r, c)) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(std::string(PQgetvalue(res.get(), r, c),
                                     static_cast<size_t>(PQgetlength(res.get(), r, c))));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

InboxConsumer::InboxConsumer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InboxConsumer::~InboxConsumer() = default;

Result<std::unique_ptr<InboxConsumer>> InboxConsumer::Create(InboxOptions options,
                                                             Handler handler) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler));
  WALRELAY_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<InboxConsumer>(new InboxConsumer(std::move(impl)));
}

Status InboxConsumer::EnsureSchema() { return impl_->EnsureSchema(); }
Status InboxConsumer::Run() { return impl_->Run(); }
void InboxConsumer::Stop() { impl_->Stop(); }
Result<int64_t> InboxConsumer::RunRetentionOnce() { return impl_->RunRetentionOnce(); }
InboxStats InboxConsumer::stats() const { return impl_->stats(); }
const std::optional<ReplayWindow>& InboxConsumer::replay_window() const { return impl_->window(); }

}  // namespace walrelay::inbox
