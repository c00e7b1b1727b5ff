#include "src/relay/core/progress.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <vector>

#include "src/relay/core/schema.h"

namespace walrelay::relay {
Result<std::unique_ptr<ProgressStore>> ProgressStore::Open(const slot::ConnInfo& conninfo,
                                                           const std::string& table) {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgConnPtr conn,
      slot::ConnectPg(conninfo, nullptr, "progress store connection", slot::kRelaySession));
  std::unique_ptr<ProgressStore> store(
      new ProgressStore(std::move(conn), QuoteQualifiedName(table)));
  WALRELAY_RETURN_IF_ERROR(slot::CreateTableIfMissing(store->conn_.get(), store->table_,
                                                      ProgressTableDdl(store->table_),
                                                      "creating the progress table " + table));
  WALRELAY_RETURN_IF_ERROR(slot::ExecPg(store->conn_.get(), ProgressTableUpgradeSql(store->table_),
                                        {}, "upgrading the progress table " + table)
                               .status());
  return store;
}

Result<slot::PgResultPtr> ProgressStore::Exec(const std::string& sql,
                                              const std::vector<std::string>& params,
                                              std::string_view what) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p.c_str());
  return slot::ExecPg(conn_.get(), sql, values, what);
}

uint64_t SnapshotBound::Xmin() const {
  uint64_t xmin = 0;
  const char* end = snapshot.data() + snapshot.size();
  auto [p, ec] = std::from_chars(snapshot.data(), end, xmin);
  if (ec != std::errc() || p == end || *p != ':') return 0;
  return xmin;
}

uint64_t SnapshotBound::Xmax() const {
  const size_t colon = snapshot.find(':');
  if (colon == std::string::npos) return 0;
  uint64_t xmax = 0;
  const char* end = snapshot.data() + snapshot.size();
  auto [p, ec] = std::from_chars(snapshot.data() + colon + 1, end, xmax);
  if (ec != std::errc() || p == end || *p != ':') return 0;
  return xmax;
}

Result<Progress> ProgressStore::Load(const std::string& slot) {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr r, Exec("SELECT source, recovering, bound_snapshot::text, bound_lsn::text, "
                                "extract(epoch FROM updated_at)::bigint, delivered_lsn::text, "
                                "slot_origin, backfill_after_id FROM " +
                                    table_ + " WHERE slot = $1",
                                {slot}, "reading recovery progress"));
  Progress p;
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    p.exists = true;
    if (std::string_view(PQgetvalue(r.get(), i, 0)) != "*") continue;  // an older version's
    p.recovering = std::string_view(PQgetvalue(r.get(), i, 1)) == "t";
    p.updated_at_unix = std::stoll(PQgetvalue(r.get(), i, 4));
    if (!PQgetisnull(r.get(), i, 5)) {
      auto delivered = Lsn::Parse(PQgetvalue(r.get(), i, 5));
      if (!delivered) return DataLossError("progress table: bad delivered_lsn for slot " + slot);
      p.delivered = *delivered;
    }
    p.slot_origin = PQgetvalue(r.get(), i, 6);
    p.backfill_after_id = PQgetvalue(r.get(), i, 7);
    if (PQgetisnull(r.get(), i, 2) || PQgetisnull(r.get(), i, 3)) continue;
    auto lsn = Lsn::Parse(PQgetvalue(r.get(), i, 3));
    if (!lsn) return DataLossError("progress table: bad bound_lsn for slot " + slot);
    p.bound = SnapshotBound{PQgetvalue(r.get(), i, 2), *lsn};
  }
  return p;
}

Result<SnapshotBound> ProgressStore::ReadCandidate() {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr r,
      Exec("SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text", {},
           "reading a snapshot bound"));
  auto lsn = Lsn::Parse(PQgetvalue(r.get(), 0, 1));
  if (!lsn) return InternalError("pg_current_wal_insert_lsn() returned no LSN");
  return SnapshotBound{PQgetvalue(r.get(), 0, 0), *lsn};
}

Status ProgressStore::SaveBound(const std::string& slot, const SnapshotBound& bound) {
  return Exec("INSERT INTO " + table_ +
                  " AS p (slot, source, bound_snapshot, bound_lsn) VALUES ($1, '*', "
                  "$2::pg_snapshot, $3::pg_lsn) ON CONFLICT (slot, source) DO UPDATE SET "
                  "bound_snapshot = EXCLUDED.bound_snapshot, bound_lsn = EXCLUDED.bound_lsn, "
                  "updated_at = now()",
              {slot, bound.snapshot, bound.lsn.ToString()}, "saving recovery progress")
      .status();
}

Status ProgressStore::SetRecovering(const std::string& slot, bool recovering) {
  return Exec("INSERT INTO " + table_ +
                  " AS p (slot, source, recovering) VALUES ($1, '*', $2::boolean) ON CONFLICT "
                  "(slot, source) DO UPDATE SET recovering = EXCLUDED.recovering, updated_at = "
                  "now()",
              {slot, recovering ? "true" : "false"}, "marking recovery")
      .status();
}

Status ProgressStore::SetColumn(const std::string& slot, std::string_view column,
                                std::string_view type, const std::string& value,
                                std::string_view what) {
  const std::string c(column), cast = "$2::" + std::string(type);
  std::vector<const char*> values = {slot.c_str(), value.empty() ? nullptr : value.c_str()};
  return slot::ExecPg(conn_.get(),
                      "INSERT INTO " + table_ + " AS p (slot, source, " + c + ") VALUES ($1, '*', " +
                          cast + ") ON CONFLICT (slot, source) DO UPDATE SET " + c +
                          " = EXCLUDED." + c + ", updated_at = now()",
                      values, what)
      .status();
}

Status ProgressStore::SaveDelivered(const std::string& slot, Lsn lsn) {
  return SetColumn(slot, "delivered_lsn", "pg_lsn", lsn.ToString(),
                   "recording the delivered position");
}

Status ProgressStore::SaveSlotOrigin(const std::string& slot, std::string_view origin) {
  WALRELAY_RETURN_IF_ERROR(SaveBackfillAfterId(slot, ""));
  return SetColumn(slot, "slot_origin", "text", std::string(origin), "recording the slot's origin");
}

Status ProgressStore::SaveBackfillAfterId(const std::string& slot, const std::string& id) {
  return SetColumn(slot, "backfill_after_id", "text", id, "recording the backfill's progress");
}

Status ProgressStore::KeepAlive() {
  return Exec("SELECT 1", {}, "keeping the progress connection alive").status();
}

Result<Lsn> ProgressStore::WalInsertPosition() {
  WALRELAY_ASSIGN_OR_RETURN(slot::PgResultPtr r, Exec("SELECT pg_current_wal_insert_lsn()::text",
                                                      {}, "reading the WAL insert position"));
  auto lsn = Lsn::Parse(PQgetvalue(r.get(), 0, 0));
  if (!lsn) return InternalError("pg_current_wal_insert_lsn() returned no LSN");
  return *lsn;
}

Result<Lsn> ProgressStore::StandbysFlushed(const std::vector<std::string>& physical_slots) {
  std::string names = "{";
  for (const auto& s : physical_slots) {
    if (names.size() > 1) names += ',';
    names += '"' + s + '"';  // slot names are [a-z0-9_]
  }
  names += '}';
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr r,
      Exec("SELECT CASE WHEN count(restart_lsn) = cardinality($1::text[]) THEN "
           "min(restart_lsn)::text END FROM pg_replication_slots WHERE slot_name = ANY($1::text[]) "
           "AND slot_type = 'physical'",
           {names}, "reading the standbys' flush positions (synchronized_standby_slots)"));
  if (PQgetisnull(r.get(), 0, 0)) return Lsn();
  auto lsn = Lsn::Parse(PQgetvalue(r.get(), 0, 0));
  return lsn ? *lsn : Lsn();
}

Result<Lsn> DeliveredRecorder::Record(Lsn acked) {
  const auto now = std::chrono::steady_clock::now();
  if (acked > recorded_) {
    WALRELAY_RETURN_IF_ERROR(store_.SaveDelivered(slot_, acked));
    recorded_ = acked;
    if (standby_slots_.empty()) {
      released_ = acked;
      return released_;
    }
    WALRELAY_ASSIGN_OR_RETURN(Lsn end, store_.WalInsertPosition());
    if (pending_.size() == kMaxPending) {
      // The newest entry stands for both: its record ends later, so it waits no less.
      pending_.back().delivered = acked;
      pending_.back().record_end = end;
    } else {
      pending_.push_back({acked, end, now});
    }
  }
  if (pending_.empty()) return released_;
  WALRELAY_ASSIGN_OR_RETURN(Lsn flushed, store_.StandbysFlushed(standby_slots_));
  size_t done = 0;
  while (done < pending_.size() && pending_[done].record_end <= flushed) {
    released_ = pending_[done].delivered;
    ++done;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
  if (!pending_.empty() && now - pending_.front().at > std::chrono::seconds(10) &&
      now - last_warning_ > std::chrono::seconds(60)) {
    last_warning_ = now;
    spdlog::warn(
        "slot {}: delivered events are not confirmed to PostgreSQL for {} s: the standbys of "
        "synchronized_standby_slots ({}) have flushed WAL to {}, not yet the progress record "
        "of {} (walrelay confirms a failover slot only once its standbys hold that record, "
        "so that a promoted standby trusts its copy of the slot). Nothing is lost; WAL is "
        "retained and a restart would repeat these events. Check the standbys' replication "
        "(pg_stat_replication), or remove a standby that is gone from "
        "synchronized_standby_slots (PostgreSQL holds the stream back for it too)",
        slot_,
        std::chrono::duration_cast<std::chrono::seconds>(now - pending_.front().at).count(),
        fmt::join(standby_slots_, ", "), flushed.ToString(),
        pending_.front().delivered.ToString());
  }
  return released_;
}

std::chrono::steady_clock::duration DeliveredRecorder::Waiting() const {
  if (pending_.empty()) return {};
  return std::chrono::steady_clock::now() - pending_.front().at;
}

std::string DeliveredBeforeBoundPredicate(std::string_view progress_table, std::string_view slot) {
  return "age(xmin) > (SELECT age((pg_snapshot_xmin(bound_snapshot)::text::bigint % "
         "4294967296)::text::xid) FROM " +
         QuoteQualifiedName(progress_table) + " WHERE slot = " + QuoteLiteral(slot) +
         " AND source = '*')";
}

}  // namespace walrelay::relay
