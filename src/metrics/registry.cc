#include "src/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace walrelay::metrics {
namespace {

std::string_view TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string EscapeHelp(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void AppendLabels(std::string& out, const Labels& labels, std::string_view extra_key = {},
                  std::string_view extra_value = {}) {
  if (labels.empty() && extra_key.empty()) return;
  out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    out += EscapeLabelValue(v);
    out += '"';
  }
  if (!extra_key.empty()) {
    if (!first) out += ',';
    out += extra_key;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
}

void AppendSample(std::string& out, std::string_view name, const Labels& labels, double value,
                  std::string_view extra_key = {}, std::string_view extra_value = {}) {
  out += name;
  AppendLabels(out, labels, extra_key, extra_value);
  out += ' ';
  out += FormatValue(value);
  out += '\n';
}

}  // namespace

// ---------------------------------------------------------------------------- Histogram

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // First bound >= v: Prometheus buckets are "less than or equal".
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i) b.push_back(start + width * i);
  return b;
}

std::vector<double> DefaultLatencyBuckets() { return ExponentialBuckets(0.0005, 2, 16); }

// ---------------------------------------------------------------------------- helpers

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!(alpha || (i > 0 && c >= '0' && c <= '9'))) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!(alpha || (i > 0 && c >= '0' && c <= '9'))) return false;
  }
  return true;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Integers (the common case: counts, bytes) print without exponent up to 2^63.
  if (v == std::floor(v) && std::fabs(v) < 9.2e18) {
    return std::to_string(static_cast<long long>(v));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Prefer the shortest text that round-trips.
  for (int p = 6; p < 17; ++p) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", p, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------- Registry

Registry::Series* Registry::FindOrAdd(std::string_view name, std::string_view help, MetricType type,
                                      const Labels& labels, const std::vector<double>* bounds) {
  auto misuse = [&](std::string why) -> Series* {
    errors_.push_back(std::string(name) + ": " + why);
    return nullptr;
  };
  if (!IsValidMetricName(name)) return misuse("invalid metric name");
  for (const auto& [k, v] : labels) {
    if (!IsValidLabelName(k) || (type == MetricType::kHistogram && k == "le")) {
      return misuse("invalid label name '" + k + "'");
    }
  }
  if (bounds != nullptr) {
    if (bounds->empty() || !std::is_sorted(bounds->begin(), bounds->end()) ||
        std::adjacent_find(bounds->begin(), bounds->end()) != bounds->end()) {
      return misuse("histogram bounds must be non-empty and strictly increasing");
    }
  }
  auto it = families_.find(name);
  if (it == families_.end()) {
    Family f;
    f.type = type;
    f.help = std::string(help);
    if (bounds != nullptr) f.bounds = *bounds;
    it = families_.emplace(std::string(name), std::move(f)).first;
  } else {
    if (it->second.type != type) {
      return misuse("already registered as a " + std::string(TypeName(it->second.type)));
    }
    if (bounds != nullptr && it->second.bounds != *bounds) {
      return misuse("already registered with other histogram buckets");
    }
  }
  for (auto& s : it->second.series) {
    if (s->labels == labels) {
      s->removed = false;
      return s.get();
    }
  }
  auto s = std::make_unique<Series>();
  s->labels = labels;
  it->second.series.push_back(std::move(s));
  return it->second.series.back().get();
}

Counter& Registry::AddCounter(std::string_view name, std::string_view help, const Labels& labels) {
  std::lock_guard lock(mu_);
  Series* s = FindOrAdd(name, help, MetricType::kCounter, labels, nullptr);
  if (s == nullptr) {
    detached_.push_back(std::make_unique<Series>());
    s = detached_.back().get();
  }
  if (!s->counter) s->counter = std::make_unique<Counter>();
  s->read = nullptr;
  return *s->counter;
}

Gauge& Registry::AddGauge(std::string_view name, std::string_view help, const Labels& labels) {
  std::lock_guard lock(mu_);
  Series* s = FindOrAdd(name, help, MetricType::kGauge, labels, nullptr);
  if (s == nullptr) {
    detached_.push_back(std::make_unique<Series>());
    s = detached_.back().get();
  }
  if (!s->gauge) s->gauge = std::make_unique<Gauge>();
  s->read = nullptr;
  return *s->gauge;
}

Histogram& Registry::AddHistogram(std::string_view name, std::string_view help,
                                  std::vector<double> bounds, const Labels& labels) {
  std::lock_guard lock(mu_);
  Series* s = FindOrAdd(name, help, MetricType::kHistogram, labels, &bounds);
  if (s == nullptr) {
    detached_.push_back(std::make_unique<Series>());
    s = detached_.back().get();
  }
  if (!s->histogram) s->histogram = std::make_unique<Histogram>(std::move(bounds));
  return *s->histogram;
}

void Registry::AddGaugeCallback(std::string_view name, std::string_view help, const Labels& labels,
                                std::function<double()> read) {
  std::lock_guard lock(mu_);
  Series* s = FindOrAdd(name, help, MetricType::kGauge, labels, nullptr);
  if (s != nullptr) s->read = std::move(read);
}

void Registry::AddCounterCallback(std::string_view name, std::string_view help,
                                  const Labels& labels, std::function<double()> read) {
  std::lock_guard lock(mu_);
  Series* s = FindOrAdd(name, help, MetricType::kCounter, labels, nullptr);
  if (s != nullptr) s->read = std::move(read);
}

void Registry::Remove(std::string_view name, const Labels& labels) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return;
  for (auto& s : it->second.series) {
    if (s->labels == labels) s->removed = true;
  }
}

std::vector<std::string> Registry::errors() const {
  std::lock_guard lock(mu_);
  return errors_;
}

std::string Registry::Render() const {
  std::lock_guard lock(mu_);
  std::string out;
  out.reserve(4096);
  for (const auto& [name, family] : families_) {
    const bool any = std::any_of(family.series.begin(), family.series.end(),
                                 [](const auto& s) { return !s->removed; });
    if (!any) continue;
    out += "# HELP ";
    out += name;
    out += ' ';
    out += EscapeHelp(family.help);
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += TypeName(family.type);
    out += '\n';
    for (const auto& s : family.series) {
      if (s->removed) continue;
      switch (family.type) {
        case MetricType::kCounter:
          AppendSample(out, name, s->labels,
                       s->read ? s->read() : (s->counter ? s->counter->value() : 0));
          break;
        case MetricType::kGauge:
          AppendSample(out, name, s->labels,
                       s->read ? s->read() : (s->gauge ? s->gauge->value() : 0));
          break;
        case MetricType::kHistogram: {
          const Histogram& h = *s->histogram;
          const std::string bucket = name + "_bucket";
          uint64_t cumulative = 0;
          for (size_t i = 0; i < h.bounds().size(); ++i) {
            cumulative += h.bucket_count(i);
            AppendSample(out, bucket, s->labels, static_cast<double>(cumulative), "le",
                         FormatValue(h.bounds()[i]));
          }
          cumulative += h.bucket_count(h.bounds().size());
          // Observe() bumps the bucket before count_, so a concurrent scrape may see
          // count < cumulative; report the larger to keep +Inf == _count consistent.
          const uint64_t count = std::max(cumulative, h.count());
          AppendSample(out, bucket, s->labels, static_cast<double>(count), "le", "+Inf");
          AppendSample(out, name + "_sum", s->labels, h.sum());
          AppendSample(out, name + "_count", s->labels, static_cast<double>(count));
          break;
        }
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------- parsing

std::string Sample::label(std::string_view key) const {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return {};
}

const Sample* ParsedExposition::Find(std::string_view name, const Labels& labels) const {
  for (const auto& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      bool found = false;
      for (const auto& [sk, sv] : s.labels) found = found || (sk == k && sv == v);
      match = match && found;
    }
    if (match) return &s;
  }
  return nullptr;
}

namespace {

// The family a sample belongs to: strips _bucket/_sum/_count when that family is a histogram.
std::string FamilyOf(const std::string& name, const std::map<std::string, std::string>& types) {
  if (types.count(name)) return name;
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      std::string base = name.substr(0, name.size() - suffix.size());
      auto it = types.find(base);
      if (it != types.end() && (it->second == "histogram" || it->second == "summary")) return base;
    }
  }
  return {};
}

bool ParseDouble(std::string_view text, double* out) {
  if (text == "+Inf" || text == "Inf") {
    *out = HUGE_VAL;
    return true;
  }
  if (text == "-Inf") {
    *out = -HUGE_VAL;
    return true;
  }
  if (text == "NaN") {
    *out = std::nan("");
    return true;
  }
  if (text.empty()) return false;
  std::string s(text);
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end != nullptr && *end == '\0';
}

}  // namespace

Result<ParsedExposition> ParseExposition(std::string_view text) {
  ParsedExposition out;
  int line_no = 0;
  auto bad = [&](std::string why) {
    return DataLossError("exposition line " + std::to_string(line_no) + ": " + why);
  };
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return bad("missing final newline");
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    if (line.empty()) continue;
    if (line.front() == '#') {
      const bool is_help = line.starts_with("# HELP ");
      const bool is_type = line.starts_with("# TYPE ");
      if (!is_help && !is_type) continue;  // a comment
      std::string_view rest = line.substr(7);
      const size_t sp = rest.find(' ');
      if (sp == std::string_view::npos) return bad("HELP/TYPE without text");
      const std::string name(rest.substr(0, sp));
      if (!IsValidMetricName(name)) return bad("invalid metric name '" + name + "'");
      std::string_view value = rest.substr(sp + 1);
      if (is_help) {
        std::string unescaped;
        for (size_t i = 0; i < value.size(); ++i) {
          if (value[i] == '\\' && i + 1 < value.size()) {
            ++i;
            unescaped += value[i] == 'n' ? '\n' : value[i];
          } else {
            unescaped += value[i];
          }
        }
        if (!out.help.emplace(name, unescaped).second) return bad("duplicate HELP for " + name);
      } else {
        if (value != "counter" && value != "gauge" && value != "histogram" && value != "summary" &&
            value != "untyped") {
          return bad("unknown type '" + std::string(value) + "'");
        }
        if (!out.type.emplace(name, std::string(value)).second) {
          return bad("duplicate TYPE for " + name);
        }
      }
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = std::string(line.substr(0, i));
    if (!IsValidMetricName(s.name)) return bad("invalid metric name '" + s.name + "'");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string_view::npos) return bad("label without '='");
        std::string key(line.substr(i, eq - i));
        if (!IsValidLabelName(key)) return bad("invalid label name '" + key + "'");
        i = eq + 1;
        if (i >= line.size() || line[i] != '"') return bad("label value not quoted");
        ++i;
        std::string value;
        bool closed = false;
        while (i < line.size()) {
          const char c = line[i++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\') {
            if (i >= line.size()) return bad("dangling escape");
            const char e = line[i++];
            if (e == 'n') {
              value += '\n';
            } else if (e == '\\' || e == '"') {
              value += e;
            } else {
              return bad("bad escape in label value");
            }
          } else {
            value += c;
          }
        }
        if (!closed) return bad("unterminated label value");
        s.labels.emplace_back(std::move(key), std::move(value));
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return bad("unterminated label set");
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ') return bad("missing value");
    std::string_view value = line.substr(i + 1);
    const size_t sp = value.find(' ');  // optional timestamp
    if (sp != std::string_view::npos) value = value.substr(0, sp);
    if (!ParseDouble(value, &s.value)) return bad("bad value '" + std::string(value) + "'");
    if (FamilyOf(s.name, out.type).empty()) return bad("sample " + s.name + " without TYPE");
    out.samples.push_back(std::move(s));
  }
  return out;
}

}  // namespace walrelay::metrics
