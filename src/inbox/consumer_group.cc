// The consumer group: Init (options, the Kafka consumer, the dead-letter producer), Run
// (the poll loop), the rebalance callback, and one worker thread per assigned partition.
#include <librdkafka/rdkafka.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "src/inbox/event_id.h"
#include "src/inbox/impl.h"
#include "src/kafka/properties.h"

namespace walrelay::inbox {

using namespace std::chrono_literals;

Status InboxConsumer::Impl::Init() {
  if (opt_.bootstrap_servers.empty())
    return InvalidArgumentError("inbox: bootstrap servers required");
  if (opt_.group_id.empty()) return InvalidArgumentError("inbox: group id required");
  if (opt_.topics.empty()) return InvalidArgumentError("inbox: at least one topic required");
  if (opt_.conninfo.empty()) return InvalidArgumentError("inbox: conninfo required");
  if (opt_.consumer_name.empty()) return InvalidArgumentError("inbox: consumer name required");
  if (opt_.event_id_header.empty()) {
    return InvalidArgumentError("inbox: event_id_header must name the event id header");
  }
  if (Status st = ValidateEventId(opt_.consumer_name, "the consumer name"); !st.ok()) {
    return InvalidArgumentError("inbox: " + st.message());
  }
  if (opt_.max_db_connections < 1) return InvalidArgumentError("inbox: max_db_connections < 1");
  if (opt_.retention_batch < 1) return InvalidArgumentError("inbox: retention_batch < 1");
  if (opt_.batch_max_messages < 1) return InvalidArgumentError("inbox: batch_max_messages < 1");
  if (opt_.batch_max_wait.count() < 0) return InvalidArgumentError("inbox: batch_max_wait < 0");
  if (opt_.statement_timeout.count() < 0) {
    return InvalidArgumentError("inbox: statement_timeout < 0 (0 = the server's own setting)");
  }
  if (!handler_) return InvalidArgumentError("inbox: handler required");
  if (opt_.dead_letter_topic.empty()) opt_.dead_letter_topic = opt_.consumer_name + ".dlq";

  // Test-only failpoint, read once (documented in inbox.h and docs/inbox.md); compiled in
  // only with WALRELAY_FAILPOINTS (builds that build the tests).
  const char* fp = std::getenv("WALRELAY_INBOX_FAILPOINT");
#ifndef WALRELAY_FAILPOINTS
  if (fp != nullptr && *fp != '\0') {
    spdlog::warn("inbox: WALRELAY_INBOX_FAILPOINT is set but ignored: failpoints are compiled "
                 "only into test builds");
  }
  fp = nullptr;
#endif
  if (fp != nullptr && *fp != '\0') {
    std::string_view v(fp);
    constexpr std::string_view kPrefix = "crash_after_db_commit:";
    int64_t n = 0;
    if (!v.starts_with(kPrefix) ||
        std::from_chars(v.data() + kPrefix.size(), v.data() + v.size(), n).ec != std::errc() ||
        n < 1) {
      return InvalidArgumentError("WALRELAY_INBOX_FAILPOINT: expected crash_after_db_commit:N");
    }
    failpoint_after_ = n;
    spdlog::warn("inbox: TEST FAILPOINT armed: SIGKILL after database commit #{}", n);
  }

  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto set = [&](const std::string& k, const std::string& v) -> Status {
    return kafka::SetProperty(conf, k, v).WithContext("inbox");
  };
  std::vector<std::pair<std::string, std::string>> props = {
      {"bootstrap.servers", opt_.bootstrap_servers},
      {"group.id", opt_.group_id},
      {"auto.offset.reset", "earliest"},
      {"enable.partition.eof", "false"},
      // Explicit (it is librdkafka's default too): records of Kafka transactions that were
      // aborted or are still open are never handed to the handler. A relay in exactly-once
      // mode leaves aborted transactions behind every crash; read_uncommitted would apply
      // their records (the inbox would absorb the repeats, not a torn source transaction).
      {"isolation.level", "read_committed"},
  };
  for (const auto& p : opt_.properties) {
    if ((p.first == "enable.auto.offset.store" && p.second != "false") ||
        (p.first == "enable.auto.commit" && p.second != "true")) {
      rd_kafka_conf_destroy(conf);
      return InvalidArgumentError(
          "inbox: " + p.first + "=" + p.second +
          " is not allowed: the inbox stores an offset only after its database commit "
          "(enable.auto.offset.store=false) and lets librdkafka commit stored offsets "
          "(enable.auto.commit=true)");
    }
    props.push_back(p);
  }
  props.emplace_back("enable.auto.commit", "true");
  props.emplace_back("enable.auto.offset.store", "false");
  for (const auto& [k, v] : props) {
    if (Status st = set(k, v); !st.ok()) {
      rd_kafka_conf_destroy(conf);
      return st;
    }
  }
  rd_kafka_conf_set_opaque(conf, this);
  rd_kafka_conf_set_rebalance_cb(conf, &Impl::RebalanceCb);
  // librdkafka's lines into the service's log, secrets masked (not its own stderr output).
  rd_kafka_conf_set_log_cb(conf, &kafka::LogLibrdkafka);
  rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
  if (rk_ == nullptr) {
    rd_kafka_conf_destroy(conf);
    return InvalidArgumentError(std::string("inbox: create consumer: ") + errstr);
  }
  rd_kafka_poll_set_consumer(rk_);

  // The retention rule: decided in CheckInboxRetention only.
  if (opt_.inbox_retention.count() != 0) {
    window_ = DescribeReplayWindow(rk_, opt_.topics, opt_.describe_configs_timeout);
    if (!window_ && opt_.replay_window.count() > 0) {
      ReplayWindow configured;
      configured.window = opt_.replay_window;
      configured.source = "configured replay_window";
      window_ = configured;
      spdlog::info(
          "inbox: the broker did not describe the topics; using the configured replay window "
          "{} ms as given: it must cover retention.ms + segment.ms + "
          "log.retention.check.interval.ms of every topic",
          opt_.replay_window.count());
    }
    WALRELAY_RETURN_IF_ERROR(
        CheckInboxRetention(opt_.inbox_retention, window_, opt_.max_relay_lag));
    spdlog::info(
        "inbox: retention {} ms > replay window {} ms ({}); first-time events are applied "
        "while younger than the retention: relay lag plus consumer lag may reach {} ms (a "
        "consumer as far behind as Kafka keeps leaves the relay {} ms, max_relay_lag {} ms)",
        opt_.inbox_retention.count(), window_->window.count(), window_->source,
        opt_.inbox_retention.count(), (opt_.inbox_retention - window_->window).count(),
        opt_.max_relay_lag.count());
  }

  kafka::ProducerOptions popt;
  popt.properties.emplace_back("bootstrap.servers", opt_.bootstrap_servers);
  for (const auto& [k, v] : opt_.properties) {
    if (k.starts_with("security.") || k.starts_with("sasl.") || k.starts_with("ssl.")) {
      popt.properties.emplace_back(k, v);
    }
  }
  popt.properties.emplace_back("linger.ms", "0");
  // One record at a time, waited for: a timeout cannot let a later record overtake it.
  popt.message_timeout = opt_.dead_letter_timeout;
  popt.stop_on_failure = false;
  auto producer = kafka::Producer::Create(
      std::move(popt), [this](uint64_t, const Status& st, const kafka::DeliveredRecord&) {
        dlq_result_ = st;  // runs under dlq_mu_ inside Flush()
      });
  if (!producer.ok()) return producer.status().WithContext("inbox: dead-letter producer");
  dlq_ = std::move(producer).value();

  // Fail early on an unreachable database (kUnavailable).
  std::atomic<bool> no_stop{false};
  WALRELAY_ASSIGN_OR_RETURN(PGconn * c, pool_.Acquire(no_stop));
  pool_.Release(c);
  return Status::Ok();
}

void InboxConsumer::Impl::RebalanceCb(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                      rd_kafka_topic_partition_list_t* parts, void* opaque) {
  auto* self = static_cast<Impl*>(opaque);
  const bool cooperative = std::strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    // Split the partition queues before assigning, so no message reaches the consumer queue.
    self->StartWorkers(parts);
    if (cooperative) {
      if (rd_kafka_error_t* e = rd_kafka_incremental_assign(rk, parts)) {
        spdlog::error("inbox: incremental assign: {}", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
      }
    } else if (rd_kafka_resp_err_t e = rd_kafka_assign(rk, parts);
               e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      spdlog::error("inbox: assign: {}", rd_kafka_err2str(e));
    }
    spdlog::info("inbox: assigned {} partition(s)", parts->cnt);
    return;
  }
  // Revoke (or a rebalance error): finish the in-flight messages, commit what is stored.
  self->StopWorkers(cooperative ? parts : nullptr);
  if (!rd_kafka_assignment_lost(rk)) {
    rd_kafka_resp_err_t e = rd_kafka_commit(rk, nullptr, 0);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR__NO_OFFSET) {
      spdlog::warn("inbox: offset commit on revoke: {} (redelivery will be deduplicated)",
                   rd_kafka_err2str(e));
    }
  }
  if (cooperative) {
    if (rd_kafka_error_t* e = rd_kafka_incremental_unassign(rk, parts)) rd_kafka_error_destroy(e);
  } else {
    rd_kafka_assign(rk, nullptr);
  }
  spdlog::info("inbox: revoked {} partition(s)", parts->cnt);
}

void InboxConsumer::Impl::StartWorkers(const rd_kafka_topic_partition_list_t* parts) {
  for (int i = 0; i < parts->cnt; ++i) {
    const auto& tp = parts->elems[i];
    auto key = std::make_pair(std::string(tp.topic), tp.partition);
    if (workers_.count(key) != 0) continue;
    auto w = std::make_unique<PartitionWorker>();
    w->topic = tp.topic;
    w->partition = tp.partition;
    w->queue = rd_kafka_queue_get_partition(rk_, tp.topic, tp.partition);
    rd_kafka_queue_forward(w->queue, nullptr);
    PartitionWorker* raw = w.get();
    w->thread = std::thread([this, raw] { WorkerLoop(raw); });
    workers_.emplace(std::move(key), std::move(w));
  }
}

void InboxConsumer::Impl::StopWorkers(const rd_kafka_topic_partition_list_t* parts) {
  std::vector<std::unique_ptr<PartitionWorker>> stopping;
  if (parts == nullptr) {
    for (auto& [k, w] : workers_) stopping.push_back(std::move(w));
    workers_.clear();
  } else {
    for (int i = 0; i < parts->cnt; ++i) {
      auto it = workers_.find({std::string(parts->elems[i].topic), parts->elems[i].partition});
      if (it == workers_.end()) continue;
      stopping.push_back(std::move(it->second));
      workers_.erase(it);
    }
  }
  for (auto& w : stopping) w->stop = true;
  for (auto& w : stopping) {
    if (w->thread.joinable()) w->thread.join();
    if (w->queue != nullptr) rd_kafka_queue_destroy(w->queue);
  }
}

void InboxConsumer::Impl::WorkerLoop(PartitionWorker* w) {
  const size_t max = static_cast<size_t>(opt_.batch_max_messages);
  std::vector<rd_kafka_message_t*> batch(max);
  std::vector<rd_kafka_message_t*> good;
  good.reserve(max);
  while (!w->stop.load()) {
    // The first message is waited for; the rest of the batch is what is already queued
    // (or arrives within batch_max_wait): no latency is added when the partition is quiet,
    // and batches grow by themselves when it is busy.
    rd_kafka_message_t* first = rd_kafka_consume_queue(w->queue, 100);
    if (first == nullptr) continue;
    batch[0] = first;
    size_t n = 1;
    if (max > 1) {
      const ssize_t more = rd_kafka_consume_batch_queue(
          w->queue, static_cast<int>(opt_.batch_max_wait.count()), batch.data() + 1, max - 1);
      if (more > 0) n += static_cast<size_t>(more);
    }
    good.clear();
    for (size_t i = 0; i < n; ++i) {
      rd_kafka_message_t* m = batch[i];
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        good.push_back(m);
        continue;
      }
      if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        spdlog::warn("inbox: {} [{}]: {}", w->topic, w->partition, rd_kafka_message_errstr(m));
      }
      rd_kafka_message_destroy(m);
    }
    // Items are filled in place and never moved: their views point into themselves.
    std::vector<Item> items(good.size());
    for (size_t i = 0; i < good.size(); ++i) Decode(good[i], opt_.event_id_header, opt_.inbox_retention, &items[i]);
    const Status st = ProcessBatch(items, *w);
    for (rd_kafka_message_t* m : good) rd_kafka_message_destroy(m);
    if (!st.ok()) {
      // kCancelled only when a stop was requested: the messages are redelivered later. Any
      // other error stops the whole consumer (Process decided no message can succeed).
      if (st.code() != StatusCode::kCancelled) Fail(st);
      break;
    }
  }
}

Status InboxConsumer::Impl::Run() {
  if (rk_ == nullptr || closed_) return FailedPreconditionError("inbox: Run() called twice");
  rd_kafka_topic_partition_list_t* topics =
      rd_kafka_topic_partition_list_new(static_cast<int>(opt_.topics.size()));
  for (const auto& t : opt_.topics) {
    rd_kafka_topic_partition_list_add(topics, t.c_str(), RD_KAFKA_PARTITION_UA);
  }
  rd_kafka_resp_err_t e = rd_kafka_subscribe(rk_, topics);
  rd_kafka_topic_partition_list_destroy(topics);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return InvalidArgumentError(std::string("inbox: subscribe: ") + rd_kafka_err2str(e));
  }
  std::thread retention;
  if (opt_.inbox_retention.count() != 0) retention = std::thread([this] { RetentionLoop(); });

  Status result;
  while (!stop_.load()) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
      char reason[512];
      rd_kafka_fatal_error(rk_, reason, sizeof(reason));
      result = InternalError(std::string("inbox: fatal consumer error: ") + reason);
      rd_kafka_message_destroy(m);
      break;
    }
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      spdlog::warn("inbox: consumer: {}", rd_kafka_message_errstr(m));
    } else {
      // Every assigned partition's queue is split off before assign; a message here means
      // that broke. Not storing its offset keeps it for a redelivery.
      result = InternalError("inbox: a message reached the consumer queue, partition " +
                             std::to_string(m->partition) + " was not split");
      rd_kafka_message_destroy(m);
      break;
    }
    rd_kafka_message_destroy(m);
  }
  Stop();
  if (result.ok()) {
    std::lock_guard lock(fatal_mu_);
    result = fatal_;
  }
  // Close: the revoke callback stops the workers and commits stored offsets; then we
  // leave the group.
  rd_kafka_consumer_close(rk_);
  closed_ = true;
  StopWorkers(nullptr);
  if (retention.joinable()) retention.join();
  return result;
}

}  // namespace walrelay::inbox
