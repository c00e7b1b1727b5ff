// e2e_probe: the writer and the reader around a CDC relay, for benchmarks that compare
// relays from the outside (bench/vs_debezium.sh): whatever sits between PostgreSQL and
// Kafka (walrelay, Debezium), the same two programs measure it the same way.
//
//   e2e_probe write --dsn DSN --rate TX_PER_S --seconds S [--connections C]
//                   [--first-seq N] [--out FILE]
//     single-row transactions INSERTed into Debezium's outbox table (id, aggregatetype,
//     aggregateid, type, payload jsonb of ~300 bytes), paced at TX_PER_S over C
//     connections (default 4), synchronous_commit = on. Event seq k gets the id
//     00000000-0000-4000-8000-<k as 12 hex digits>. FILE: "seq commit_us" per event, the
//     wall clock (CLOCK_REALTIME, microseconds) when COMMIT returned to the writer.
//   e2e_probe read --bootstrap HOST:PORT,... --topic T --count N [--from beginning|end]
//                  [--timeout S] [--out FILE] [--records FILE] [--id-header NAME]
//     an independent consumer (librdkafka, no group): every partition from its beginning
//     or from its end as of the start; reads until N distinct events arrived (the event id
//     header, `id` unless --id-header, parsed back to its seq: the id's last 12 hex
//     digits) or S seconds (default 600) passed without a record.
//     --out FILE: "seq receive_us" per first arrival. --records FILE: every record read,
//     "partition offset seq" in the order read (per partition, offset order). Prints one
//     line: count, distinct, first_us, last_us (when the first and the N-th distinct event
//     were read). Exit 1 on timeout.
//
// The probe shares no code with walrelay on purpose: it is the outside observer.
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

int64_t NowUs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "e2e_probe: %s\n", what.c_str());
  std::exit(2);
}

std::map<std::string, std::string> Flags(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 2; i < argc; ++i) {
    std::string name = argv[i];
    if (name.rfind("--", 0) != 0 || i + 1 >= argc) Die("expected --flag value, got " + name);
    flags[name.substr(2)] = argv[++i];
  }
  return flags;
}

std::string Need(const std::map<std::string, std::string>& flags, const std::string& name) {
  auto it = flags.find(name);
  if (it == flags.end()) Die("--" + name + " is required");
  return it->second;
}

std::string Get(const std::map<std::string, std::string>& flags, const std::string& name,
                const std::string& fallback) {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : it->second;
}

std::string EventId(uint64_t seq) {
  char id[40];
  std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012" PRIx64, seq);
  return id;
}

int Write(const std::map<std::string, std::string>& flags) {
  const std::string dsn = Need(flags, "dsn");
  const double rate = std::stod(Need(flags, "rate"));
  const double seconds = std::stod(Need(flags, "seconds"));
  const int connections = std::stoi(Get(flags, "connections", "4"));
  const uint64_t first = std::stoull(Get(flags, "first-seq", "1"));
  const uint64_t total = static_cast<uint64_t>(rate * seconds);
  std::vector<int64_t> commit_us(total, 0);
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  const auto start = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      PGconn* conn = PQconnectdb(dsn.c_str());
      if (PQstatus(conn) != CONNECTION_OK) {
        std::fprintf(stderr, "e2e_probe: connection %d: %s", c, PQerrorMessage(conn));
        failed = true;
        return;
      }
      PQclear(PQexec(conn, "SET synchronous_commit = on"));
      PGresult* prep = PQprepare(
          conn, "ins",
          "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
          "VALUES ($1::uuid, 'payment', $2, 'PaymentCaptured', $3::jsonb)",
          3, nullptr);
      if (PQresultStatus(prep) != PGRES_COMMAND_OK) {
        std::fprintf(stderr, "e2e_probe: prepare: %s", PQerrorMessage(conn));
        failed = true;
      }
      PQclear(prep);
      const std::string pad(200, 'x');
      while (!failed) {
        const uint64_t k = next.fetch_add(1);
        if (k >= total) break;
        std::this_thread::sleep_until(
            start + std::chrono::nanoseconds(static_cast<int64_t>(k * 1e9 / rate)));
        const uint64_t seq = first + k;
        const std::string id = EventId(seq);
        const std::string agg = "agg-" + std::to_string(seq % 1000);
        const std::string payload = "{\"seq\": " + std::to_string(seq) +
                                    ", \"amount\": 12550, \"currency\": \"EUR\", \"pad\": \"" +
                                    pad + "\"}";
        const char* values[3] = {id.c_str(), agg.c_str(), payload.c_str()};
        PGresult* r = PQexecPrepared(conn, "ins", 3, values, nullptr, nullptr, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
          std::fprintf(stderr, "e2e_probe: insert %" PRIu64 ": %s", seq, PQerrorMessage(conn));
          failed = true;
        } else {
          commit_us[k] = NowUs();
        }
        PQclear(r);
      }
      PQfinish(conn);
    });
  }
  for (auto& t : threads) t.join();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (auto out = Get(flags, "out", ""); !out.empty()) {
    FILE* f = std::fopen(out.c_str(), "w");
    if (f == nullptr) Die("cannot write " + out);
    for (uint64_t k = 0; k < total; ++k) {
      if (commit_us[k] != 0) std::fprintf(f, "%" PRIu64 " %" PRId64 "\n", first + k, commit_us[k]);
    }
    std::fclose(f);
  }
  std::printf("written=%" PRIu64 " seconds=%.3f rate=%.1f\n", total, took, total / took);
  return failed ? 1 : 0;
}

int Read(const std::map<std::string, std::string>& flags) {
  const std::string topic = Need(flags, "topic");
  const uint64_t count = std::stoull(Need(flags, "count"));
  const bool from_end = Get(flags, "from", "beginning") == "end";
  const int timeout_s = std::stoi(Get(flags, "timeout", "600"));
  const std::string id_header = Get(flags, "id-header", "id");
  FILE* records_file = nullptr;
  if (auto path = Get(flags, "records", ""); !path.empty()) {
    records_file = std::fopen(path.c_str(), "w");
    if (records_file == nullptr) Die("cannot write " + path);
  }
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  const std::pair<const char*, std::string> settings[] = {
      {"bootstrap.servers", Need(flags, "bootstrap")},
      {"group.id", "e2e-probe"},  // required by the consumer API; no offsets are committed
      {"enable.auto.commit", "false"},
      {"enable.partition.eof", "false"},
      {"fetch.wait.max.ms", "10"},  // the broker answers a fetch within 10 ms when empty
      {"fetch.min.bytes", "1"},
  };
  for (const auto& [k, v] : settings) {
    if (rd_kafka_conf_set(conf, k, v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) Die(err);
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (rk == nullptr) Die(err);
  rd_kafka_poll_set_consumer(rk);
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR || md->topic_cnt != 1 ||
      md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    Die("no metadata for topic " + topic);
  }
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
  for (int i = 0; i < md->topics[0].partition_cnt; ++i) {
    int64_t low = 0, high = 0;
    if (rd_kafka_query_watermark_offsets(rk, topic.c_str(), md->topics[0].partitions[i].id, &low,
                                         &high, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      Die("no watermarks for " + topic);
    }
    rd_kafka_topic_partition_list_add(parts, topic.c_str(), md->topics[0].partitions[i].id)->offset =
        from_end ? high : low;
  }
  rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(rkt);
  if (rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR) Die("assign failed");
  rd_kafka_topic_partition_list_destroy(parts);
  std::printf("ready\n");
  std::fflush(stdout);

  std::unordered_map<uint64_t, int64_t> first_seen;
  first_seen.reserve(std::min<uint64_t>(count, 4000000) * 2);
  uint64_t records = 0;
  int64_t first_us = 0, last_us = 0, idle_since = NowUs();
  while (first_seen.size() < count) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    const int64_t now = NowUs();
    if (m == nullptr) {
      if (now - idle_since > int64_t{timeout_s} * 1000000) break;
      continue;
    }
    idle_since = now;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      ++records;
      rd_kafka_headers_t* hdrs = nullptr;
      const void* v = nullptr;
      size_t n = 0;
      if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
          rd_kafka_header_get_last(hdrs, id_header.c_str(), &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR &&
          n >= 12) {
        const std::string hex(static_cast<const char*>(v) + n - 12, 12);
        const uint64_t seq = std::strtoull(hex.c_str(), nullptr, 16);
        if (records_file != nullptr) {
          std::fprintf(records_file, "%" PRId32 " %" PRId64 " %" PRIu64 "\n", m->partition, m->offset,
                       seq);
        }
        if (first_seen.emplace(seq, now).second) {
          if (first_us == 0) first_us = now;
          last_us = now;
        }
      }
    } else {
      std::fprintf(stderr, "e2e_probe: consume: %s\n", rd_kafka_message_errstr(m));
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  if (records_file != nullptr) std::fclose(records_file);
  if (auto out = Get(flags, "out", ""); !out.empty()) {
    FILE* f = std::fopen(out.c_str(), "w");
    if (f == nullptr) Die("cannot write " + out);
    for (const auto& [seq, us] : first_seen) std::fprintf(f, "%" PRIu64 " %" PRId64 "\n", seq, us);
    std::fclose(f);
  }
  std::printf("records=%" PRIu64 " distinct=%zu first_us=%" PRId64 " last_us=%" PRId64 "\n", records,
              first_seen.size(), first_us, last_us);
  return first_seen.size() >= count ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: e2e_probe write|read --flag value ... (see bench/e2e/e2e_probe.cc)\n");
    return 2;
  }
  const std::string cmd = argv[1];
  const auto flags = Flags(argc, argv);
  if (cmd == "write") return Write(flags);
  if (cmd == "read") return Read(flags);
  Die("unknown command " + cmd + " (write or read)");
}
