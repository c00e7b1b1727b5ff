#include "src/audit/audit.h"

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <ctime>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

#include "base/json.h"
#include "base/position.h"
#include "base/sql.h"

namespace walrelay::audit {
namespace {

using Clock = std::chrono::steady_clock;

struct PgDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Conn = std::unique_ptr<PGconn, PgDeleter>;
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

struct PartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const {
    rd_kafka_topic_partition_list_destroy(l);
  }
};
using PartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, PartitionListDeleter>;

Result<PgResult> Exec(PGconn* conn, const std::string& sql, ExecStatusType expected) {
  PgResult r(PQexec(conn, sql.c_str()));
  if (PQresultStatus(r.get()) != expected) {
    return UnavailableError(std::string("audit query failed: ") + PQerrorMessage(conn) +
                            " (statement: " + sql.substr(0, 200) + ")");
  }
  return r;
}

Status ExecOk(PGconn* conn, const std::string& sql) {
  WALRELAY_ASSIGN_OR_RETURN(PgResult r, Exec(conn, sql, PGRES_COMMAND_OK));
  (void)r;
  return Status::Ok();
}

Result<PgResult> Query(PGconn* conn, const std::string& sql) {
  return Exec(conn, sql, PGRES_TUPLES_OK);
}

uint64_t U64(PGresult* r, int row, int col) {
  return PQgetisnull(r, row, col) ? 0 : std::strtoull(PQgetvalue(r, row, col), nullptr, 10);
}

// COPY text format: backslash, tab, newline and carriage return escaped.
void AppendCopyText(std::string* out, std::string_view v) {
  for (char c : v) {
    switch (c) {
      case '\\': out->append("\\\\"); break;
      case '\t': out->append("\\t"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      default: out->push_back(c);
    }
  }
}

std::string_view HeaderValue(rd_kafka_headers_t* headers, const std::string& name) {
  if (headers == nullptr) return {};
  const void* value = nullptr;
  size_t size = 0;
  // The last one of that name, as the inbox reads it.
  if (rd_kafka_header_get_last(headers, name.c_str(), &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      value == nullptr) {
    return {};
  }
  return {static_cast<const char*>(value), size};
}

// The timestamp of the record at offset high - 1 of topic/partition.
Result<int64_t> LastTimestampMs(rd_kafka_t* consumer, const char* topic, int32_t partition,
                                int64_t high) {
  PartitionList one(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(one.get(), topic, partition)->offset = high - 1;
  if (rd_kafka_resp_err_t e = rd_kafka_assign(consumer, one.get()); e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return UnavailableError(std::string("kafka assign: ") + rd_kafka_err2str(e));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  int64_t ts = -1;
  while (Clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(consumer, 500);
    if (m == nullptr) continue;
    const bool found = m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->partition == partition;
    const bool eof = m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF;
    if (found) ts = rd_kafka_message_timestamp(m, nullptr);
    rd_kafka_message_destroy(m);
    if (found || eof) break;  // eof: an aborted transaction's marker ends the partition
  }
  rd_kafka_assign(consumer, nullptr);
  return ts;
}

// The audit's consumer for these properties: made on first use, then reused by every later
// audit of the process (a sidecar's rounds) and never destroyed. librdkafka 2.0.2 (Debian
// 12's) can abort while destroying a short-lived client (rd_kafka_broker_destroy_final:
// Assertion 'thrd_is_current(rkb->rkb_thread)', confluentinc/librdkafka#3608, open
// upstream): a one-shot audit that destroyed its consumer died of it now and then before
// printing its report (exit 134). Nothing is joined to a group (assign() only), so a
// consumer left to the process's exit leaves nothing behind on the brokers.
Result<rd_kafka_t*> ProcessConsumer(const AuditOptions& options) {
  std::map<std::string, std::string> conf_values = options.kafka_properties;
  conf_values["group.id"] = "walrelay-audit";  // assign() only: nothing is committed
  conf_values["enable.auto.commit"] = "false";
  conf_values["enable.auto.offset.store"] = "false";
  conf_values["enable.partition.eof"] = "true";
  conf_values["isolation.level"] = options.read_committed ? "read_committed" : "read_uncommitted";
  static std::mutex mu;
  static auto* consumers = new std::map<std::map<std::string, std::string>, rd_kafka_t*>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = consumers->find(conf_values); it != consumers->end()) return it->second;
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  for (const auto& [k, v] : conf_values) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return InvalidArgumentError("kafka property " + k + ": " + err);
    }
  }
  rd_kafka_t* consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (consumer == nullptr) {
    rd_kafka_conf_destroy(conf);
    return InvalidArgumentError(std::string("kafka consumer: ") + err);
  }
  consumers->emplace(std::move(conf_values), consumer);
  return consumer;
}

// Reads every record of `options.topics` from the window's start (minus slack) to each
// partition's end as of now, and COPYs them into walrelay_audit_seen.
Status ReadKafka(const AuditOptions& options, PGconn* conn, int64_t from_ms, AuditReport* report) {
  WALRELAY_ASSIGN_OR_RETURN(rd_kafka_t* consumer, ProcessConsumer(options));
  // Whatever this read assigns is unassigned when it ends, however it ends.
  struct Unassign {
    rd_kafka_t* consumer;
    ~Unassign() { rd_kafka_assign(consumer, nullptr); }
  } unassign{consumer};

  // Partitions of each topic, and where each one ends now.
  PartitionList assignment(rd_kafka_topic_partition_list_new(16));
  std::map<std::pair<std::string, int32_t>, int64_t> end;  // (topic, partition) -> high
  for (const std::string& topic : options.topics) {
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(consumer, topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t e = rd_kafka_metadata(consumer, 0, rkt, &md, 10000);
    rd_kafka_topic_destroy(rkt);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return UnavailableError("kafka metadata of topic " + topic + ": " + rd_kafka_err2str(e) +
                              " (is the cluster reachable with these properties?)");
    }
    const bool missing = md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR;
    const int partitions = missing ? 0 : md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    if (missing) {
      return NotFoundError("kafka topic " + topic +
                           " does not exist (a deleted topic loses its records: every row of "
                           "the window would be missing; check the --topic list)");
    }
    for (int p = 0; p < partitions; ++p) {
      int64_t low = 0, high = 0;
      e = rd_kafka_query_watermark_offsets(consumer, topic.c_str(), p, &low, &high, 10000);
      if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return UnavailableError("kafka offsets of " + topic + "/" + std::to_string(p) + ": " +
                                rd_kafka_err2str(e));
      }
      if (high <= low) continue;  // empty
      end[{topic, p}] = high;
      rd_kafka_topic_partition_list_add(assignment.get(), topic.c_str(), p)->offset = from_ms;
    }
  }
  if (assignment->cnt > 0) {
    rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(consumer, assignment.get(), 10000);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return UnavailableError(std::string("kafka offsets for the window's start: ") +
                              rd_kafka_err2str(e));
    }
    // A partition with no record at or after the time has nothing to read, unless its
    // last record says otherwise: a broker that does not look offsets up by time
    // (librdkafka's mock cluster, the dev broker) answers "none" too. Such a partition is
    // read from its start.
    PartitionList start(rd_kafka_topic_partition_list_new(assignment->cnt));
    for (int i = 0; i < assignment->cnt; ++i) {
      const auto& tp = assignment->elems[i];
      int64_t offset = tp.offset;
      if (offset < 0) {
        const int64_t high = end[{tp.topic, tp.partition}];
        WALRELAY_ASSIGN_OR_RETURN(int64_t last_ms, LastTimestampMs(consumer, tp.topic, tp.partition, high));
        // -1: the last offset held no record this consumer reads (an aborted or open
        // transaction's marker): read the partition whole rather than skip it.
        if (last_ms >= 0 && last_ms < from_ms) {
          end.erase({tp.topic, tp.partition});
          continue;
        }
        offset = RD_KAFKA_OFFSET_BEGINNING;
        ++report->partitions_read_whole;
      }
      rd_kafka_topic_partition_list_add(start.get(), tp.topic, tp.partition)->offset = offset;
    }
    assignment = std::move(start);
  }
  const size_t partitions = end.size();
  if (partitions == 0) return Status::Ok();
  if (rd_kafka_resp_err_t e = rd_kafka_assign(consumer, assignment.get());
      e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return UnavailableError(std::string("kafka assign: ") + rd_kafka_err2str(e));
  }

  WALRELAY_ASSIGN_OR_RETURN(PgResult copy,
                            Exec(conn,
                                 "COPY walrelay_audit_seen (event_id, topic, part, off, key, lsn, "
                                 "ordinal, xid, commit_us, recovered, source, produced_us) FROM STDIN",
                                 PGRES_COPY_IN));
  std::string buf;
  auto flush = [&]() -> Status {
    if (buf.empty()) return Status::Ok();
    if (PQputCopyData(conn, buf.data(), static_cast<int>(buf.size())) != 1) {
      return UnavailableError(std::string("COPY to the audit's table: ") + PQerrorMessage(conn));
    }
    buf.clear();
    return Status::Ok();
  };
  size_t done = 0;
  auto last_progress = Clock::now();
  auto last_record = Clock::now();
  while (done < partitions) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(consumer, 500);
    if (options.progress && Clock::now() - last_progress > std::chrono::seconds(5)) {
      options.progress(report->records_read, done, partitions);
      last_progress = Clock::now();
    }
    if (m == nullptr) {
      if (Clock::now() - last_record > std::chrono::seconds(60)) {
        return UnavailableError("kafka: no record and no end of partition for 60 s (" +
                                std::to_string(done) + " of " + std::to_string(partitions) +
                                " partitions read to their end)");
      }
      continue;
    }
    last_record = Clock::now();
    std::unique_ptr<rd_kafka_message_t, void (*)(rd_kafka_message_t*)> guard(m, rd_kafka_message_destroy);
    const std::string topic = rd_kafka_topic_name(m->rkt);
    auto it = end.find({topic, m->partition});
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (it != end.end() && m->offset >= it->second - 1) {
        end.erase(it);
        ++done;
      }
      continue;
    }
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return UnavailableError("kafka: " + topic + "/" + std::to_string(m->partition) + ": " +
                              rd_kafka_message_errstr(m));
    }
    if (it == end.end()) continue;  // already done
    if (m->offset >= it->second) {  // past the end the audit began with
      end.erase(it);
      ++done;
      continue;
    }
    ++report->records_read;
    rd_kafka_headers_t* headers = nullptr;
    rd_kafka_message_headers(m, &headers);
    const std::string_view id = HeaderValue(headers, options.event_id_header);
    const std::string_view pos_text = HeaderValue(headers, options.position_header);
    const auto pos = ParsePosition(pos_text);
    rd_kafka_timestamp_type_t tstype;
    const int64_t produced_ms = rd_kafka_message_timestamp(m, &tstype);
    auto field = [&](std::string_view v) {
      AppendCopyText(&buf, v);
      buf.push_back('\t');
    };
    if (id.empty()) {
      buf.append("\\N\t");  // NULL: a record without the event id header
    } else {
      field(id);
    }
    field(topic);
    field(std::to_string(m->partition));
    field(std::to_string(m->offset));
    field(std::string_view(static_cast<const char*>(m->key), m->key_len));
    if (pos) {
      field(pos->lsn.ToString());
      field(std::to_string(pos->ordinal));
      field(std::to_string(pos->xid));
      field(std::to_string(pos->commit_time_us));
      field(pos->recovered ? "t" : "f");
      field(pos->source);
    } else {
      buf.append("\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t");
    }
    buf.append(produced_ms >= 0 ? std::to_string(produced_ms * 1000) : "\\N");
    buf.push_back('\n');
    if (buf.size() > (1 << 20)) WALRELAY_RETURN_IF_ERROR(flush());
  }
  WALRELAY_RETURN_IF_ERROR(flush());
  if (PQputCopyEnd(conn, nullptr) != 1) {
    return UnavailableError(std::string("COPY end: ") + PQerrorMessage(conn));
  }
  PgResult end_result(PQgetResult(conn));
  if (PQresultStatus(end_result.get()) != PGRES_COMMAND_OK) {
    return UnavailableError(std::string("COPY of the records: ") + PQerrorMessage(conn));
  }
  while (PGresult* r = PQgetResult(conn)) PQclear(r);
  if (options.progress) options.progress(report->records_read, done, partitions);
  return Status::Ok();
}

// Fills `finding` from a query whose rows are (sample id, total count).
Status Fill(PGconn* conn, const std::string& sql, Finding* finding) {
  WALRELAY_ASSIGN_OR_RETURN(PgResult r, Query(conn, sql));
  finding->count = PQntuples(r.get()) > 0 ? U64(r.get(), 0, 1) : 0;
  for (int i = 0; i < PQntuples(r.get()); ++i) finding->samples.emplace_back(PQgetvalue(r.get(), i, 0));
  return Status::Ok();
}

}  // namespace

Result<AuditReport> RunAudit(const AuditOptions& options) {
  if (options.topics.empty()) return InvalidArgumentError("audit: no topic to read (--topic)");
  if (options.tables.empty()) return InvalidArgumentError("audit: no outbox table (--source-table)");
  if (options.since <= options.grace) {
    return InvalidArgumentError("audit: --since (" + std::to_string(options.since.count()) +
                                " s) must be longer than --grace (" +
                                std::to_string(options.grace.count()) + " s)");
  }
  if (options.janitor_retention.count() > 0 && options.since >= options.janitor_retention) {
    return FailedPreconditionError(
        "audit: a window of " + std::to_string(options.since.count()) +
        " s reaches past the janitor's retention (" +
        std::to_string(options.janitor_retention.count()) +
        " s): rows it deleted would make their records look like phantoms. Use a --since "
        "shorter than the retention");
  }
  Conn conn(PQconnectdb(options.source_dsn.c_str()));
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    return UnavailableError(std::string("audit: cannot connect to the source database: ") +
                            PQerrorMessage(conn.get()));
  }
  AuditReport report;
  const std::string ns = "walrelay_audit_";
  // The window, on the database's clock.
  {
    WALRELAY_ASSIGN_OR_RETURN(
        PgResult r, Query(conn.get(), "SELECT (extract(epoch FROM now()) * 1000000)::bigint"));
    const int64_t now_us = std::strtoll(PQgetvalue(r.get(), 0, 0), nullptr, 10);
    report.window_start_us = now_us - options.since.count() * 1000000;
    report.window_end_us = now_us - options.grace.count() * 1000000;
  }
  const std::string start = std::to_string(report.window_start_us);
  const std::string end = std::to_string(report.window_end_us);
  const std::string in_window = "commit_us >= " + start + " AND commit_us < " + end;

  // The outbox tables, resolved by the database (their names as positions spell them).
  std::string sources, reference_union, all_ids_union;
  for (const std::string& t : options.tables) {
    auto name = ParseQualifiedName(t);
    if (!name.ok()) return InvalidArgumentError("audit: --source-table " + t + ": " + name.status().message());
    const std::string q = name->Quoted();
    WALRELAY_ASSIGN_OR_RETURN(
        PgResult r, Query(conn.get(), "SELECT n.nspname || '.' || c.relname, c.relkind = 'p' OR EXISTS "
                                      "(SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = "
                                      "i.indrelid AND a.attnum = i.indkey[0] WHERE i.indrelid = c.oid "
                                      "AND i.indisvalid AND a.attname = " +
                                      QuoteLiteral(options.created_at_column) + ") FROM pg_class c JOIN "
                                      "pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = "
                                      "to_regclass(" + QuoteLiteral(q) + ")"));
    if (PQntuples(r.get()) != 1) return NotFoundError("audit: outbox table " + t + " does not exist");
    if (std::string_view(PQgetvalue(r.get(), 0, 1)) != "t") report.tables_scanned_whole.push_back(t);
    if (!sources.empty()) sources += ", ";
    sources += QuoteLiteral(PQgetvalue(r.get(), 0, 0));
    const std::string id = QuoteIdentifier(options.event_id_column);
    if (!reference_union.empty()) reference_union += " UNION ALL ";
    reference_union += "SELECT " + id + "::text AS event_id, " +
                       QuoteIdentifier(options.aggregate_id_column) +
                       "::text AS aggregate_id, xmin::text::bigint AS xid FROM " + q + " WHERE " +
                       QuoteIdentifier(options.created_at_column) + " >= to_timestamp(" + start +
                       " / 1000000.0) AND " + QuoteIdentifier(options.created_at_column) +
                       " < to_timestamp(" + end + " / 1000000.0)";
    if (!all_ids_union.empty()) all_ids_union += " UNION ALL ";
    all_ids_union += "SELECT " + id + "::text AS event_id FROM " + q;
  }

  WALRELAY_RETURN_IF_ERROR(ExecOk(
      conn.get(), "CREATE TEMP TABLE " + ns + "seen (event_id text, topic text, part int, off bigint, "
                  "key text, lsn pg_lsn, ordinal bigint, xid bigint, commit_us bigint, recovered "
                  "bool, source text, produced_us bigint)"));
  WALRELAY_RETURN_IF_ERROR(ReadKafka(
      options, conn.get(),
      (report.window_start_us - options.slack.count() * 1000000) / 1000, &report));
  // Every finding is a join or a grouping over the two temporary tables, planned as hash or
  // merge joins: no correlated subquery per row (one under an OR made the phantom check
  // quadratic: minutes for 200,000 records; bench/audit_window.sh measures the whole).
  // No index on the records: an index-ordered read of a temporary table larger than the
  // session's temp_buffers reads a block per row (measured: 40 times the table's size).
  WALRELAY_RETURN_IF_ERROR(ExecOk(conn.get(), "ANALYZE " + ns + "seen"));
  // The reference rows, each marked delivered when some record carries its event id.
  WALRELAY_RETURN_IF_ERROR(ExecOk(
      conn.get(), "CREATE TEMP TABLE " + ns + "ref AS SELECT q.event_id, q.aggregate_id, q.xid, "
                  "d.event_id IS NOT NULL AS delivered FROM (" + reference_union + ") q LEFT JOIN "
                  "(SELECT DISTINCT event_id FROM " + ns + "seen WHERE event_id IS NOT NULL) d ON "
                  "d.event_id = q.event_id"));
  WALRELAY_RETURN_IF_ERROR(ExecOk(conn.get(), "ANALYZE " + ns + "ref"));

  {
    WALRELAY_ASSIGN_OR_RETURN(
        PgResult r, Query(conn.get(), "SELECT (SELECT count(*) FROM " + ns + "ref), (SELECT count(*) FROM " +
                                          ns + "seen WHERE " + in_window + "), (SELECT count(*) FROM " + ns +
                                          "ref WHERE delivered)"));
    report.reference_rows = U64(r.get(), 0, 0);
    report.records_in_window = U64(r.get(), 0, 1);
    report.delivered_rows = U64(r.get(), 0, 2);
  }
  const std::string limit = " LIMIT " + std::to_string(std::max<size_t>(options.samples, 1));
  // Dead letters: rows accounted for in the dead-letter table instead.
  bool have_dead_letters = false;
  {
    WALRELAY_ASSIGN_OR_RETURN(PgResult r, Query(conn.get(), "SELECT to_regclass(" +
                                                                QuoteLiteral(QuoteQualifiedName(options.dead_letter_table)) +
                                                                ") IS NOT NULL"));
    have_dead_letters = std::string_view(PQgetvalue(r.get(), 0, 0)) == "t";
  }
  const std::string dead_letters = "(SELECT DISTINCT event_id::text AS event_id FROM " +
                                   QuoteQualifiedName(options.dead_letter_table) +
                                   " WHERE event_id IS NOT NULL)";
  if (have_dead_letters) {
    WALRELAY_RETURN_IF_ERROR(Fill(conn.get(),
                                  "SELECT r.event_id, count(*) OVER () FROM " + ns + "ref r JOIN " +
                                  dead_letters + " d ON d.event_id = r.event_id WHERE NOT r.delivered "
                                  "ORDER BY 1" + limit,
                                  &report.dead_lettered));
    WALRELAY_RETURN_IF_ERROR(Fill(conn.get(),
                                  "SELECT r.event_id, count(*) OVER () FROM " + ns + "ref r LEFT JOIN " +
                                  dead_letters + " d ON d.event_id = r.event_id WHERE NOT r.delivered "
                                  "AND d.event_id IS NULL ORDER BY 1" + limit,
                                  &report.missing));
  } else {
    WALRELAY_RETURN_IF_ERROR(Fill(conn.get(),
                                  "SELECT event_id, count(*) OVER () FROM " + ns + "ref WHERE NOT "
                                  "delivered ORDER BY 1" + limit,
                                  &report.missing));
  }
  // Phantoms: records of the window whose event id no row of the window has (a hash anti
  // join), then of those (almost always none) the ones no row of the whole tables has:
  // only then are the tables read whole (a row created before the window and committed in
  // it, e.g.).
  WALRELAY_RETURN_IF_ERROR(ExecOk(
      conn.get(), "CREATE TEMP TABLE " + ns + "unmatched AS SELECT s.event_id FROM " + ns + "seen s "
                  "LEFT JOIN " + ns + "ref r ON r.event_id = s.event_id WHERE " + in_window +
                  " AND NOT s.recovered AND s.source IN (" + sources + ") AND r.event_id IS NULL"));
  {
    WALRELAY_ASSIGN_OR_RETURN(PgResult r, Query(conn.get(), "SELECT count(*) FROM " + ns + "unmatched"));
    if (U64(r.get(), 0, 0) > 0) {
      WALRELAY_RETURN_IF_ERROR(Fill(conn.get(),
                                    "SELECT u.event_id, count(*) OVER () FROM " + ns + "unmatched u "
                                    "LEFT JOIN (" + all_ids_union + ") o ON o.event_id = u.event_id "
                                    "WHERE o.event_id IS NULL ORDER BY 1" + limit,
                                    &report.phantom));
    }
  }
  {
    WALRELAY_ASSIGN_OR_RETURN(
        PgResult r, Query(conn.get(), "SELECT event_id, count(*) OVER (), sum(n - 1) OVER () FROM (SELECT "
                                      "event_id, count(*) AS n FROM " + ns + "seen WHERE " + in_window +
                                      " AND event_id IS NOT NULL GROUP BY event_id HAVING count(*) > 1) d "
                                      "ORDER BY 1" + limit));
    report.duplicated.count = PQntuples(r.get()) > 0 ? U64(r.get(), 0, 1) : 0;
    report.duplicate_copies = PQntuples(r.get()) > 0 ? U64(r.get(), 0, 2) : 0;
    for (int i = 0; i < PQntuples(r.get()); ++i) report.duplicated.samples.emplace_back(PQgetvalue(r.get(), i, 0));
  }
  if (options.inbox_retention.count() > 0) {
    WALRELAY_RETURN_IF_ERROR(Fill(conn.get(),
                                  "SELECT event_id, count(*) OVER () FROM " + ns + "seen WHERE " + in_window +
                                  " AND event_id IS NOT NULL GROUP BY event_id HAVING count(*) > 1 AND "
                                  "max(produced_us) - min(produced_us) > " +
                                  std::to_string(options.inbox_retention.count() * 1000000) +
                                  " ORDER BY 1" + limit,
                                  &report.duplicated_beyond_inbox));
  }
  // First deliveries (the earliest offset of each event id in its partition), per key in
  // offset order: a position below the previous one is out of order.
  WALRELAY_RETURN_IF_ERROR(Fill(
      conn.get(),
      "SELECT event_id, count(*) OVER () FROM (SELECT event_id, lsn, ordinal, commit_us, lag(lsn) "
      "OVER w AS prev_lsn, lag(ordinal) OVER w AS prev_ordinal FROM (SELECT DISTINCT ON (event_id) * "
      "FROM " + ns + "seen WHERE event_id IS NOT NULL AND lsn IS NOT NULL AND NOT recovered ORDER BY "
          "event_id, off) f WINDOW w AS (PARTITION BY topic, part, key ORDER BY off)) o WHERE " +
          "prev_lsn IS NOT NULL AND (lsn, ordinal) < (prev_lsn, prev_ordinal) AND " + in_window +
          " ORDER BY 1" + limit,
      &report.out_of_order));
  WALRELAY_RETURN_IF_ERROR(Fill(conn.get(),
                                "SELECT xid::text, count(*) OVER () FROM (SELECT xid FROM " + ns +
                                "ref GROUP BY xid HAVING bool_or(delivered) AND bool_or(NOT delivered)) t "
                                "ORDER BY 1" + limit,
                                &report.torn));
  WALRELAY_RETURN_IF_ERROR(Fill(
      conn.get(),
      "SELECT event_id, count(*) OVER () FROM (SELECT DISTINCT ON (event_id) event_id, produced_us, "
      "commit_us FROM " + ns + "seen WHERE event_id IS NOT NULL AND NOT recovered AND " + in_window +
          " ORDER BY event_id, produced_us) f WHERE produced_us - commit_us > " +
          std::to_string(options.late.count() * 1000) + " ORDER BY 1" + limit,
      &report.late));
  return report;
}

namespace {

std::string Micros(int64_t us) {
  const time_t secs = static_cast<time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void AppendFinding(std::string* out, const char* name, const Finding& f, const char* what) {
  out->append("  ");
  out->append(name);
  out->append(": ");
  out->append(std::to_string(f.count));
  if (f.count > 0) {
    out->append(" (");
    out->append(what);
    out->append("; e.g. ");
    for (size_t i = 0; i < f.samples.size(); ++i) {
      if (i > 0) out->append(", ");
      out->append(f.samples[i]);
    }
    if (f.count > f.samples.size()) out->append(", ...");
    out->append(")");
  }
  out->push_back('\n');
}

void AppendJsonFinding(std::string* out, const char* name, const Finding& f) {
  out->append(",\"");
  out->append(name);
  out->append("\":{\"count\":");
  out->append(std::to_string(f.count));
  out->append(",\"samples\":[");
  for (size_t i = 0; i < f.samples.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonQuoted(out, f.samples[i]);
  }
  out->append("]}");
}

}  // namespace

std::string FormatReport(const AuditReport& r, const AuditOptions& options) {
  std::string out = "audit of " + Micros(r.window_start_us) + " .. " + Micros(r.window_end_us) +
                    " (rows by created_at; the last " + std::to_string(options.grace.count()) +
                    " s left out), " + std::string(options.read_committed ? "read_committed" : "read_uncommitted") +
                    ":\n";
  out += "  " + std::to_string(r.reference_rows) + " rows committed in the window, " +
         std::to_string(r.delivered_rows) + " of them in Kafka; " + std::to_string(r.records_read) +
         " records read, " + std::to_string(r.records_in_window) + " committed in the window\n";
  if (r.partitions_read_whole > 0) {
    out += "  (" + std::to_string(r.partitions_read_whole) +
           " partitions read from their start: the broker did not look offsets up by time)\n";
  }
  for (const std::string& t : r.tables_scanned_whole) {
    out += "  (" + t + " has no index on " + options.created_at_column +
           ": every audit reads the whole table; `walrelay setup --audit-index` makes one)\n";
  }
  AppendFinding(&out, "missing", r.missing, "committed, in no record and no dead letter: LOST unless the relay is still behind");
  AppendFinding(&out, "phantom", r.phantom, "in Kafka, no such row: a rolled-back row or another producer");
  AppendFinding(&out, "out of order", r.out_of_order, "a first delivery below its key's previous position");
  AppendFinding(&out, "torn", r.torn, "source transactions (xids) partly in Kafka");
  AppendFinding(&out, "duplicated", r.duplicated, "events in more than one record; the inbox absorbs them");
  if (options.inbox_retention.count() > 0) {
    AppendFinding(&out, "duplicated beyond the inbox's retention", r.duplicated_beyond_inbox,
                  "copies produced further apart than --inbox-retention: APPLIED TWICE by an inbox that forgot the first");
  }
  AppendFinding(&out, "late", r.late, "first delivered more than --late after commit");
  AppendFinding(&out, "dead-lettered", r.dead_lettered, "in the dead-letter table, with their reasons");
  out += r.clean() ? "  verdict: clean (nothing lost, no phantom, order kept, no torn transaction)\n"
                   : "  verdict: FINDINGS (above)\n";
  return out;
}

std::string FormatReportJson(const AuditReport& r) {
  std::string out = "{\"window_start_us\":" + std::to_string(r.window_start_us) +
                    ",\"window_end_us\":" + std::to_string(r.window_end_us) +
                    ",\"reference_rows\":" + std::to_string(r.reference_rows) +
                    ",\"delivered_rows\":" + std::to_string(r.delivered_rows) +
                    ",\"records_read\":" + std::to_string(r.records_read) +
                    ",\"records_in_window\":" + std::to_string(r.records_in_window) +
                    ",\"duplicate_copies\":" + std::to_string(r.duplicate_copies) +
                    ",\"partitions_read_whole\":" + std::to_string(r.partitions_read_whole) +
                    ",\"clean\":" + (r.clean() ? "true" : "false") + ",\"tables_scanned_whole\":[";
  for (size_t i = 0; i < r.tables_scanned_whole.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendJsonQuoted(&out, r.tables_scanned_whole[i]);
  }
  out += "]";
  AppendJsonFinding(&out, "missing", r.missing);
  AppendJsonFinding(&out, "phantom", r.phantom);
  AppendJsonFinding(&out, "out_of_order", r.out_of_order);
  AppendJsonFinding(&out, "torn", r.torn);
  AppendJsonFinding(&out, "duplicated", r.duplicated);
  AppendJsonFinding(&out, "duplicated_beyond_inbox_retention", r.duplicated_beyond_inbox);
  AppendJsonFinding(&out, "late", r.late);
  AppendJsonFinding(&out, "dead_lettered", r.dead_lettered);
  out += "}";
  return out;
}

}  // namespace walrelay::audit
