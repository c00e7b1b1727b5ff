// The retention rule, the broker's replay window, and the retention task.
#include <librdkafka/rdkafka.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "src/inbox/impl.h"
#include "src/inbox/pg.h"

namespace walrelay::inbox {

// The retention rule. The one place it is decided; the reason is in inbox.h, repeated here
// because this is where someone will look when Create() refuses to start:
// an inbox row is the only memory that a message was handled; Kafka can deliver a message
// again for as long as the topic keeps it (group reset, new group, old offset commit lost),
// so the row must outlive the topic's retention, or a replay is applied twice.
namespace {

std::string Ms(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

// "retention.ms 604800000 + segment.ms 604800000 + check interval 300000 = 1209900000 ms"
std::string Arithmetic(const ReplayWindow& w) {
  if (w.retention.count() == 0 && w.segment.count() == 0) return Ms(w.window);
  return "retention.ms " + std::to_string(w.retention.count()) + " + segment.ms " +
         std::to_string(w.segment.count()) + " + check interval " +
         std::to_string(w.check_interval.count()) + " = " + Ms(w.window);
}

bool ParseMs(const std::string& text, long long* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && p == text.data() + text.size();
}

}  // namespace

Status CheckInboxRetention(std::chrono::milliseconds inbox_retention,
                           const std::optional<ReplayWindow>& window,
                           std::chrono::milliseconds max_relay_lag) {
  if (inbox_retention.count() == 0) return Status::Ok();  // rows kept forever: always safe
  const std::string ours = Ms(inbox_retention);
  if (!window) {
    return FailedPreconditionError(
        "inbox retention " + ours +
        " cannot be checked against the topic's replay window: the broker did not answer "
        "DescribeConfigs and no replay_window is configured; configure the replay window "
        "(retention.ms + segment.ms + log.retention.check.interval.ms of the topic) or keep "
        "inbox rows forever (retention 0)");
  }
  if (window->compacted) {
    return FailedPreconditionError(
        "inbox retention " + ours + ": " + window->source +
        " is compacted (cleanup.policy=compact): the latest record of every key stays in the "
        "topic for ever and can be delivered again at any time, and a redelivery after its "
        "inbox row was deleted would be applied twice; keep inbox rows forever (retention 0) "
        "or give the topic cleanup.policy=compact,delete or delete");
  }
  if (window->infinite) {
    return FailedPreconditionError(
        "inbox retention " + ours + " is shorter than the replay window (" + window->source +
        " is infinite, retention.ms=-1): a replay would apply messages whose inbox rows were "
        "deleted; keep inbox rows forever (retention 0) or give the topic a finite retention");
  }
  if (inbox_retention <= window->window) {
    return FailedPreconditionError(
        "inbox retention " + ours + " is not longer than the topic's replay window " +
        Arithmetic(*window) + " (" + window->source +
        "): Kafka could redeliver a message after its inbox row was deleted and it would be "
        "applied twice; raise the inbox retention above the replay window or lower the "
        "topic's retention.ms or segment.ms");
  }
  if (inbox_retention - window->window < max_relay_lag) {
    return FailedPreconditionError(
        "inbox retention " + ours + " leaves " + Ms(inbox_retention - window->window) +
        " beyond the topic's replay window " + Arithmetic(*window) + " (" + window->source +
        "), less than max_relay_lag " + Ms(max_relay_lag) +
        ": an event is applied the first time only while its commit is younger than the "
        "retention (after that its inbox row might be gone), so a consumer that lags by as "
        "much as Kafka keeps would dead-letter first-time events whenever the relay lagged "
        "more than that difference. Raise the inbox retention to at least " +
        Ms(window->window + max_relay_lag) +
        ", or lower max_relay_lag to the relay lag you will alert on long before");
  }
  return Status::Ok();
}

std::optional<ReplayWindow> ReplayWindowFromConfigs(const std::vector<TopicConfigs>& topics) {
  if (topics.empty()) return std::nullopt;
  ReplayWindow out;
  for (const TopicConfigs& t : topics) {
    std::optional<long long> retention;
    long long segment = kDefaultSegmentMs.count();
    std::string policy = "delete";
    for (const auto& [name, value] : t.entries) {
      long long ms = 0;
      if (name == "retention.ms") {
        if (!ParseMs(value, &ms)) return std::nullopt;
        retention = ms;
      } else if (name == "segment.ms") {
        if (!ParseMs(value, &ms) || ms < 0) return std::nullopt;
        segment = ms;
      } else if (name == "cleanup.policy") {
        policy = value;
      }
    }
    if (!retention) return std::nullopt;
    const std::string source = "broker configs of topic " + t.topic;
    const bool compact = policy.find("compact") != std::string::npos;
    const bool del = policy.find("delete") != std::string::npos;
    if (compact && !del) {
      if (!out.compacted) out.source = source;
      out.compacted = true;
      continue;
    }
    if (*retention < 0) {
      if (!out.compacted && !out.infinite) out.source = source;
      out.infinite = true;
      continue;
    }
    const auto window = std::chrono::milliseconds(*retention + segment) +
                        kDefaultRetentionCheckIntervalMs;
    if (!out.compacted && !out.infinite && window >= out.window) {
      out.window = window;
      out.retention = std::chrono::milliseconds(*retention);
      out.segment = std::chrono::milliseconds(segment);
      out.check_interval = kDefaultRetentionCheckIntervalMs;
      out.source = source + " (check interval: Kafka's default log.retention.check.interval.ms)";
    }
  }
  return out;
}

std::optional<ReplayWindow> DescribeReplayWindow(rd_kafka_t* rk,
                                                 const std::vector<std::string>& topics,
                                                 std::chrono::milliseconds timeout) {
  if (topics.empty()) return std::nullopt;
  std::vector<rd_kafka_ConfigResource_t*> resources;
  for (const std::string& t : topics) {
    resources.push_back(rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, t.c_str()));
  }
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  rd_kafka_AdminOptions_t* options =
      rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
  char errstr[256];
  rd_kafka_AdminOptions_set_request_timeout(options, static_cast<int>(timeout.count()), errstr,
                                            sizeof(errstr));
  rd_kafka_DescribeConfigs(rk, resources.data(), resources.size(), options, queue);
  rd_kafka_event_t* ev = rd_kafka_queue_poll(queue, static_cast<int>(timeout.count()) + 1000);

  std::optional<ReplayWindow> out;
  if (ev == nullptr) {
    spdlog::warn("inbox: DescribeConfigs got no answer within {} ms", timeout.count());
  } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    spdlog::info("inbox: broker did not describe topic configs: {}",
                 rd_kafka_event_error_string(ev));
  } else if (const rd_kafka_DescribeConfigs_result_t* res =
                 rd_kafka_event_DescribeConfigs_result(ev)) {
    size_t n = 0;
    const rd_kafka_ConfigResource_t** rs = rd_kafka_DescribeConfigs_result_resources(res, &n);
    std::vector<TopicConfigs> configs;
    bool all = n == topics.size();
    for (size_t i = 0; i < n && all; ++i) {
      if (rd_kafka_ConfigResource_error(rs[i]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        spdlog::info("inbox: DescribeConfigs {}: {}", rd_kafka_ConfigResource_name(rs[i]),
                     rd_kafka_ConfigResource_error_string(rs[i]));
        all = false;
        break;
      }
      TopicConfigs t;
      t.topic = rd_kafka_ConfigResource_name(rs[i]);
      size_t nc = 0;
      const rd_kafka_ConfigEntry_t** entries = rd_kafka_ConfigResource_configs(rs[i], &nc);
      for (size_t j = 0; j < nc; ++j) {
        const char* v = rd_kafka_ConfigEntry_value(entries[j]);
        if (v != nullptr) t.entries.emplace_back(rd_kafka_ConfigEntry_name(entries[j]), v);
      }
      configs.push_back(std::move(t));
    }
    if (all) out = ReplayWindowFromConfigs(configs);
  }
  if (ev != nullptr) rd_kafka_event_destroy(ev);
  rd_kafka_AdminOptions_destroy(options);
  rd_kafka_queue_destroy(queue);
  for (auto* r : resources) rd_kafka_ConfigResource_destroy(r);
  return out;
}

void InboxConsumer::Impl::RetentionLoop() {
  for (;;) {
    {
      std::unique_lock lock(retention_mu_);
      retention_cv_.wait_for(lock, opt_.retention_interval, [this] { return stop_.load(); });
    }
    if (stop_.load()) return;
    Result<int64_t> n = RunRetentionOnce();
    if (!n.ok()) spdlog::warn("inbox: retention: {}", n.status().ToString());
  }
}

Result<int64_t> InboxConsumer::Impl::RunRetentionOnce() {
  if (opt_.inbox_retention.count() == 0) return int64_t{0};
  WALRELAY_ASSIGN_OR_RETURN(PGconn * c, pg::Connect({opt_.conninfo, opt_.password}, opt_.statement_timeout));
  std::unique_ptr<PGconn, decltype(&PQfinish)> conn(c, &PQfinish);
  const std::string secs =
      std::to_string(static_cast<double>(opt_.inbox_retention.count()) / 1000.0);
  const std::string batch = std::to_string(opt_.retention_batch);
  const pg::RawParam params[] = {{opt_.consumer_name}, {secs}, {batch}};
  int64_t total = 0;
  for (;;) {
    // Each batch is its own short transaction: no long lock, no huge WAL burst. Rows are
    // named by their key (invariant 10: on a partitioned inbox ctid repeats in every
    // partition); the key's index serves both the batch and the delete.
    slot::PgFault fault;
    WALRELAY_ASSIGN_OR_RETURN(
        pg::ResultPtr res,
        pg::Exec(c,
                 "DELETE FROM inbox WHERE consumer = $1 AND message_id = ANY(ARRAY("
                 "SELECT message_id FROM inbox WHERE consumer = $1 AND received_at < now() - "
                 "make_interval(secs => $2::double precision) LIMIT $3::int))",
                 params, "inbox: retention delete", &fault));
    const int64_t n = std::strtoll(PQcmdTuples(res.get()), nullptr, 10);
    total += n;
    retention_deleted_ += static_cast<uint64_t>(n);
    if (n < opt_.retention_batch || stop_.load()) break;
  }
  if (total > 0) spdlog::info("inbox: retention deleted {} inbox row(s)", total);
  return total;
}

}  // namespace walrelay::inbox
