// `walrelay replay`: see record.h.
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>

#include "src/cli/record.h"
#include "src/kafka/mock_cluster.h"
#include "src/relay/core/dead_letter.h"
#include "src/relay/core/pipeline.h"
#include "src/relay/commands/recording.h"

namespace walrelay::cli {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Log-linear histogram of nanoseconds: 32 sub-buckets per power of two (<= 3.1% error),
// fixed 16 KB whatever the number of samples.
class LatencyHistogram {
 public:
  void Record(int64_t ns) {
    if (ns < 0) ns = 0;
    ++counts_[Index(static_cast<uint64_t>(ns))];
    ++total_;
    max_ = std::max(max_, ns);
  }
  uint64_t total() const { return total_; }
  int64_t max() const { return max_; }
  // The smallest bucket value v such that at least q of the samples are <= v.
  double Quantile(double q) const {
    if (total_ == 0) return 0;
    const uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total_)));
    uint64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= std::max<uint64_t>(rank, 1)) return static_cast<double>(UpperBound(i));
    }
    return static_cast<double>(max_);
  }

 private:
  static constexpr int kSub = 64;
  static size_t Index(uint64_t v) {
    if (v < kSub) return v;
    const int msb = 63 - __builtin_clzll(v);  // >= 6
    const int shift = msb - 5;                // mantissa in [32, 64)
    return static_cast<size_t>(kSub + (shift - 1) * 32 + ((v >> shift) - 32));
  }
  static uint64_t UpperBound(size_t i) {
    if (i < kSub) return i;
    const size_t k = i - kSub;
    const int shift = static_cast<int>(k / 32) + 1;
    const uint64_t mant = 32 + k % 32;
    return ((mant + 1) << shift) - 1;
  }
  std::array<uint64_t, kSub + 32 * 60> counts_{};
  uint64_t total_ = 0;
  int64_t max_ = 0;
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Remembers when the last XLogData frame was handed to the pipeline.
class TimedSource : public slot::FrameSource {
 public:
  explicit TimedSource(slot::FrameSource& inner) : inner_(inner) {}
  Result<slot::Frame> Read(milliseconds timeout) override {
    auto f = inner_.Read(timeout);
    if (f.ok() && f->kind == slot::Frame::Kind::kXLogData) last_read_ns_ = NowNs();
    return f;
  }
  Status SendStatus(Lsn write, Lsn flush, Lsn apply, bool reply) override {
    return inner_.SendStatus(write, flush, apply, reply);
  }
  int64_t last_read_ns() const { return last_read_ns_; }

 private:
  slot::FrameSource& inner_;
  int64_t last_read_ns_ = 0;
};

// Measures per-event latency around another sink: for the null sink, frame read -> record
// produced (decode + map); for Kafka, produce -> ack.
class TimedSink : public relay::RecordSink {
 public:
  TimedSink(relay::RecordSink& inner, const TimedSource& source, bool ack_latency)
      : inner_(inner), source_(source), ack_latency_(ack_latency) {
    inner_.SetDeliveryHandler(
        [this](uint64_t cookie, const Status& st, size_t bytes, const kafka::DeliveredRecord* rec) {
          // librdkafka's own produce() -> delivery report time
          // (rd_kafka_message_latency): no per-event bookkeeping here.
          if (ack_latency_ && st.ok() && rec != nullptr) {
            const int64_t us = rec->latency_us();
            if (us >= 0) hist_.Record(us * 1000);
          }
          if (handler_) handler_(cookie, st, bytes, rec);
        });
  }
  void SetDeliveryHandler(DeliveryHandler handler) override { handler_ = std::move(handler); }
  Status Produce(std::string_view topic, std::string_view key, std::string_view value,
                 std::span<const kafka::Header> headers, uint64_t cookie,
                 int64_t timestamp_ms) override {
    if (!ack_latency_) hist_.Record(NowNs() - source_.last_read_ns());
    return inner_.Produce(topic, key, value, headers, cookie, timestamp_ms);
  }
  int Poll(milliseconds timeout) override { return inner_.Poll(timeout); }
  Status Flush(milliseconds timeout) override { return inner_.Flush(timeout); }
  Status Fatal() const override { return inner_.Fatal(); }
  const LatencyHistogram& histogram() const { return hist_; }

 private:
  relay::RecordSink& inner_;
  const TimedSource& source_;
  bool ack_latency_;
  DeliveryHandler handler_;
  LatencyHistogram hist_;
};

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// VmHWM from /proc/self/status, else ru_maxrss; bytes.
uint64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// Run-registry options that make sense for a replay (mapping, flow, Kafka, logging).
const std::set<std::string>& ReplayKeys() {
  static const std::set<std::string> keys = {"source.tables",
                                             "source.message_prefix",
                                             "outbox.profile",
                                             "outbox.columns",
                                             "outbox.headers",
                                             "outbox.key_format",
                                             "outbox.value_format",
                                             "outbox.allowed_topics",
                                             "outbox.topic_template",
                                             "kafka.bootstrap_servers",
                                             "kafka.embedded",
                                             "kafka.properties",
                                             "flow.max_in_flight_events",
                                             "flow.max_in_flight_bytes",
                                             "flow.shutdown_timeout_ms",
                                             "ops.log_level"};
  return keys;
}

}  // namespace

ReplayCommand::ReplayCommand(CLI::App* parent) {
  app_ = parent->add_subcommand(
      "replay",
      "Feed a recording (walrelay record) through the relay pipeline into the null sink or "
      "Kafka and print throughput, CPU per event, peak RSS and latency percentiles.");
  app_->add_option("file", file_, "Recording file")->required();
  app_->add_option("--sink", sink_, "null (decode + map only) or kafka")
      ->check(CLI::IsMember({"null", "kafka"}))
      ->capture_default_str();
  app_->add_option("--pace", pace_, "full (as fast as possible) or recorded (send-time gaps)")
      ->check(CLI::IsMember({"full", "recorded"}))
      ->capture_default_str();
  app_->add_flag("--json", json_, "Print the result as one JSON object");
  app_->add_flag("--allow-truncated", allow_truncated_,
                 "Accept a recording without its end marker (recorder killed)");
  for (const auto& spec : RunOptions()) {
    if (!ReplayKeys().count(spec.key)) continue;
    values_.emplace_back();
    CLI::Option* opt = app_->add_option(spec.Flag(), values_.back(), spec.help);
    if (spec.kind == OptionKind::kList) opt->delimiter(',');
    if (spec.kind == OptionKind::kBool) opt->expected(0, 1);  // `--kafka-embedded` alone = true
    opt->multi_option_policy(spec.kind == OptionKind::kList || spec.kind == OptionKind::kMap
                                 ? CLI::MultiOptionPolicy::TakeAll
                                 : CLI::MultiOptionPolicy::TakeLast);
    specs_.push_back(&spec);
    options_.push_back(opt);
  }
}

bool ReplayCommand::parsed() const { return app_->parsed(); }

int ReplayCommand::Run() const {
  auto fail = [](const std::string& msg, int code) {
    std::cerr << "walrelay replay: " << msg << "\n";
    return code;
  };
  relay::RelayConfig config;
  config.shutdown_timeout = milliseconds(120000);
  bool log_level_given = false;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (options_[i]->count() == 0) continue;
    std::vector<std::string> values = values_[i];
    if (specs_[i]->kind == OptionKind::kBool && (values.empty() || values.back().empty())) {
      values = {"true"};
    }
    if (values.empty()) continue;
    if (specs_[i]->key == "ops.log_level") log_level_given = true;
    if (Status st = specs_[i]->apply(config, values); !st.ok()) return fail(st.message(), 2);
  }
  const bool kafka_sink = sink_ == "kafka";
  if (kafka_sink && config.bootstrap_servers.empty() && !config.embedded_kafka) {
    return fail("--sink kafka needs --kafka-bootstrap-servers or --kafka-embedded true", 2);
  }
  if (!kafka_sink) config.bootstrap_servers = "(null sink)";
  spdlog::set_level(log_level_given ? spdlog::level::from_str(config.log_level)
                                    : spdlog::level::warn);

  relay::RecordingReader::Options ropts;
  ropts.recorded_pace = pace_ == "recorded";
  ropts.allow_truncated = allow_truncated_;
  auto reader = relay::RecordingReader::Open(file_, ropts);
  if (!reader.ok()) return fail(reader.status().ToString(), 1);
  const relay::RecordingHeader& header = (*reader)->header();
  config.source_dsn = "recording " + file_;
  config.plugin = header.plugin;
  config.slot = header.slot.empty() ? "recording" : header.slot;
  if (Status st = config.Validate(); !st.ok()) return fail(st.message(), 2);

  std::unique_ptr<kafka::MockCluster> cluster;
  std::unique_ptr<relay::RecordSink> inner;
  if (kafka_sink) {
    if (config.embedded_kafka) {
      auto mc = kafka::MockCluster::Create(3);
      if (!mc.ok()) return fail(mc.status().ToString(), 1);
      cluster = std::move(*mc);
      config.bootstrap_servers = cluster->bootstraps();
    }
    kafka::ProducerOptions popts;
    popts.properties.emplace_back("bootstrap.servers", config.bootstrap_servers);
    for (const auto& [k, v] : config.kafka_properties) popts.properties.emplace_back(k, v);
    auto ks = relay::KafkaSink::Create(std::move(popts));
    if (!ks.ok()) return fail(ks.status().ToString(), 1);
    inner = std::move(*ks);
  } else {
    inner = std::make_unique<relay::NullSink>();
  }

  TimedSource source(**reader);
  TimedSink sink(*inner, source, /*ack_latency=*/kafka_sink);
  relay::RelayStats stats;
  relay::LoggingDeadLetterSink dead_letters;
  relay::Pipeline::Options popts;
  popts.end_of_stream_is_error = false;
  popts.protocol_version = std::atoi(header.Option("proto_version", "1").c_str());
  if (popts.protocol_version < 1) popts.protocol_version = 1;
  relay::Pipeline pipeline(config, stats, source, sink, dead_letters, popts);

  std::atomic<bool> stop{false};
  const double cpu0 = CpuSeconds();
  const auto t0 = Clock::now();
  Status st = pipeline.Run(stop);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = CpuSeconds() - cpu0;
  if (!st.ok()) return fail(st.ToString(), 1);

  const uint64_t events = stats.events_produced.load() + stats.events_dead_lettered.load();
  const uint64_t acked = stats.events_acked.load();
  const uint64_t frames = (*reader)->xlog_records();
  const uint64_t bytes = (*reader)->payload_bytes();
  const uint64_t rss = PeakRssBytes();
  const LatencyHistogram& h = sink.histogram();
  const double eps = seconds > 0 ? events / seconds : 0;
  const double mbps = seconds > 0 ? bytes / 1e6 / seconds : 0;
  const double cpu_us = events ? cpu * 1e6 / events : 0;
  const char* lat_kind = kafka_sink ? "produce_to_ack" : "decode_and_map";
  auto us = [](double ns) { return ns / 1000.0; };
  if (json_) {
    std::printf(
        "{\"file\":%s,\"plugin\":%s,\"server_version\":%s,\"sink\":\"%s\",\"pace\":\"%s\","
        "\"frames\":%llu,\"payload_bytes\":%llu,\"events\":%llu,\"acked\":%llu,"
        "\"dead_letters\":%llu,\"transactions\":%llu,\"seconds\":%.6f,"
        "\"events_per_second\":%.1f,\"mb_per_second\":%.2f,\"cpu_seconds\":%.6f,"
        "\"cpu_us_per_event\":%.4f,\"peak_rss_bytes\":%llu,\"flush_lsn\":\"%s\","
        "\"latency_kind\":\"%s\",\"latency_us\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,"
        "\"p999\":%.3f,\"max\":%.3f}}\n",
        JsonString(file_).c_str(), JsonString(header.plugin).c_str(),
        JsonString(header.server_version).c_str(), sink_.c_str(), pace_.c_str(),
        static_cast<unsigned long long>(frames), static_cast<unsigned long long>(bytes),
        static_cast<unsigned long long>(events), static_cast<unsigned long long>(acked),
        static_cast<unsigned long long>(dead_letters.count()),
        static_cast<unsigned long long>(stats.transactions.load()), seconds, eps, mbps, cpu, cpu_us,
        static_cast<unsigned long long>(rss), pipeline.flush_lsn().ToString().c_str(), lat_kind,
        us(h.Quantile(0.5)), us(h.Quantile(0.9)), us(h.Quantile(0.99)), us(h.Quantile(0.999)),
        us(static_cast<double>(h.max())));
  } else {
    std::printf("replayed %s (%s, PostgreSQL %s) into the %s sink, pace %s\n", file_.c_str(),
                header.plugin.c_str(), header.server_version.c_str(), sink_.c_str(), pace_.c_str());
    std::printf(
        "  %llu frames, %.1f MB payload, %llu events (%llu acked, %llu dead letters), "
        "%llu transactions in %.3f s\n",
        static_cast<unsigned long long>(frames), bytes / 1e6,
        static_cast<unsigned long long>(events), static_cast<unsigned long long>(acked),
        static_cast<unsigned long long>(dead_letters.count()),
        static_cast<unsigned long long>(stats.transactions.load()), seconds);
    std::printf("  %.0f events/s, %.1f MB/s, CPU %.3f s = %.3f us/event, peak RSS %.1f MB\n", eps,
                mbps, cpu, cpu_us, rss / 1048576.0);
    std::printf("  latency (%s) us: p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n", lat_kind,
                us(h.Quantile(0.5)), us(h.Quantile(0.9)), us(h.Quantile(0.99)),
                us(h.Quantile(0.999)), us(static_cast<double>(h.max())));
    std::printf("  flush position reached: %s\n", pipeline.flush_lsn().ToString().c_str());
  }
  if (acked + dead_letters.count() < events) {
    std::cerr << "walrelay replay: " << (events - acked - dead_letters.count())
              << " events were not acknowledged before the end\n";
    return 1;
  }
  return 0;
}

}  // namespace walrelay::cli
