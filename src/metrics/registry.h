// A small Prometheus registry: counters, gauges and fixed-bucket histograms with labels,
// rendered in the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Hot path. Counter::Inc, Gauge::Set/Add and Histogram::Observe are lock-free (relaxed
// atomics); Histogram::Observe is a binary search over the bucket bounds plus two atomic
// adds. Creating a series (AddCounter ... with a new label set) takes the registry's mutex:
// do it once and keep the returned reference, never per event.
//
// Series and families. A family is one metric name with one type and one HELP text; a
// series is a family plus a label set. Adding the same name and labels again returns the
// existing series. Adding a name that exists with another type (or a histogram with other
// buckets), or an invalid name, is a programming error: the caller gets a detached series
// that works but is never exported, and the mistake is listed by errors() (tests check it
// is empty; the relay logs it at startup). Nothing throws or aborts.
//
// Callback series (AddGaugeCallback/AddCounterCallback) read a value at scrape time, e.g.
// an std::atomic the relay already keeps. Callbacks run under the registry's mutex on the
// scraping thread: they must be cheap, thread-safe and must not call the registry.
//
// Lifetime: returned references are valid as long as the Registry. Thread safety: every
// method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace walrelay::metrics {

// Label name → value. Names must match [a-zA-Z_][a-zA-Z0-9_]* and not start with "__";
// values are any UTF-8 text (escaped on output).
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  // REQUIRES: n >= 0 (counters only go up).
  void Inc(double n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double d) { value_.fetch_add(d, std::memory_order_relaxed); }
  void Sub(double d) { value_.fetch_add(-d, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Fixed upper bounds (le), strictly increasing; the +Inf bucket is implicit.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);

  void Observe(double v);

  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count of bucket i (i == bounds().size() is the +Inf bucket).
  uint64_t bucket_count(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Bucket helpers: {start, start*factor, ...} (count bounds) and {start, start+width, ...}.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
std::vector<double> LinearBuckets(double start, double width, int count);
// 0.5 ms .. ~16 s, doubling: suits produce and commit-to-ack latencies in seconds.
std::vector<double> DefaultLatencyBuckets();

enum class MetricType { kCounter, kGauge, kHistogram };

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Names must match [a-zA-Z_:][a-zA-Z0-9_:]*. Counter names should end in "_total".
  Counter& AddCounter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& AddGauge(std::string_view name, std::string_view help, const Labels& labels = {});
  Histogram& AddHistogram(std::string_view name, std::string_view help, std::vector<double> bounds,
                          const Labels& labels = {});
  // Scrape-time values. Adding the same name and labels again replaces the callback.
  void AddGaugeCallback(std::string_view name, std::string_view help, const Labels& labels,
                        std::function<double()> read);
  void AddCounterCallback(std::string_view name, std::string_view help, const Labels& labels,
                          std::function<double()> read);

  // Removes one series (e.g. a slot that no longer exists). No-op if absent. References to
  // a removed series stay valid (the memory is kept) but are no longer exported.
  void Remove(std::string_view name, const Labels& labels);

  // The text exposition format 0.0.4: families sorted by name, each with # HELP and
  // # TYPE, then its series in insertion order.
  std::string Render() const;

  // Misuse found so far (type conflicts, invalid names), for tests and startup logs.
  std::vector<std::string> errors() const;

 private:
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::function<double()> read;
    bool removed = false;
  };
  struct Family {
    MetricType type;
    std::string help;
    std::vector<double> bounds;  // histograms
    std::vector<std::unique_ptr<Series>> series;
  };

  // REQUIRES: mu_ held. Returns nullptr (and records an error) on misuse.
  Series* FindOrAdd(std::string_view name, std::string_view help, MetricType type,
                    const Labels& labels, const std::vector<double>* bounds);

  mutable std::mutex mu_;
  std::map<std::string, Family, std::less<>> families_;
  std::vector<std::unique_ptr<Series>> detached_;  // returned on misuse, never exported
  std::vector<std::string> errors_;
};

// --- Parsing (for tests and `walrelay lag` checks): the subset of the text format that
// Render() writes, validated strictly.
struct Sample {
  std::string name;  // including _bucket/_sum/_count suffixes
  Labels labels;     // in exposition order
  double value = 0;

  // The value of a label, or "" if absent.
  std::string label(std::string_view key) const;
};

struct ParsedExposition {
  std::map<std::string, std::string> help;  // family name → HELP text (unescaped)
  std::map<std::string, std::string> type;  // family name → "counter" | "gauge" | ...
  std::vector<Sample> samples;

  // The first sample with `name` whose labels include every pair in `labels`.
  const Sample* Find(std::string_view name, const Labels& labels = {}) const;
};

// kDataLoss with the line number on a malformed line, a sample without a preceding TYPE,
// or a duplicate HELP/TYPE.
Result<ParsedExposition> ParseExposition(std::string_view text);

// Helpers shared by the renderer and other writers of the format.
bool IsValidMetricName(std::string_view name);
bool IsValidLabelName(std::string_view name);
std::string FormatValue(double v);  // "1", "0.25", "+Inf", "-Inf", "NaN"
std::string EscapeLabelValue(std::string_view v);

}  // namespace walrelay::metrics
