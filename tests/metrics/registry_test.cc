// Unit tests of the Prometheus registry: rendering in the text format 0.0.4, labels and
// escaping, histograms, callbacks, misuse, and the strict parser.
#include "src/metrics/registry.h"

#include <gtest/gtest.h>

#include <thread>

namespace walrelay::metrics {
namespace {

ParsedExposition MustParse(const std::string& text) {
  auto p = ParseExposition(text);
  EXPECT_TRUE(p.ok()) << p.status().ToString() << "\n" << text;
  return p.ok() ? *p : ParsedExposition{};
}

TEST(RegistryTest, CountersAndGaugesRenderWithHelpAndType) {
  Registry r;
  Counter& c = r.AddCounter("walrelay_events_total", "Events seen.");
  c.Inc();
  c.Inc(4);
  Gauge& g = r.AddGauge("walrelay_in_flight", "In flight.\nSecond line \\ slash.");
  g.Set(7);
  g.Sub(2.5);
  const std::string text = r.Render();
  EXPECT_EQ(text,
            "# HELP walrelay_events_total Events seen.\n"
            "# TYPE walrelay_events_total counter\n"
            "walrelay_events_total 5\n"
            "# HELP walrelay_in_flight In flight.\\nSecond line \\\\ slash.\n"
            "# TYPE walrelay_in_flight gauge\n"
            "walrelay_in_flight 4.5\n");
  ParsedExposition p = MustParse(text);
  EXPECT_EQ(p.help["walrelay_in_flight"], "In flight.\nSecond line \\ slash.");
  EXPECT_EQ(p.type["walrelay_events_total"], "counter");
  ASSERT_NE(p.Find("walrelay_in_flight"), nullptr);
  EXPECT_DOUBLE_EQ(p.Find("walrelay_in_flight")->value, 4.5);
  EXPECT_TRUE(r.errors().empty());
}

TEST(RegistryTest, LabelsShareOneFamilyAndAreEscaped) {
  Registry r;
  Counter& upd = r.AddCounter("skipped_total", "Skipped.", {{"kind", "update"}});
  Counter& del = r.AddCounter("skipped_total", "Skipped.", {{"kind", "delete"}});
  Counter& again = r.AddCounter("skipped_total", "Skipped.", {{"kind", "update"}});
  EXPECT_EQ(&upd, &again);
  upd.Inc(2);
  del.Inc();
  r.AddGauge("odd", "Odd values.", {{"slot", "a\"b\\c\nd"}}).Set(1);
  const std::string text = r.Render();
  EXPECT_NE(text.find("skipped_total{kind=\"update\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("skipped_total{kind=\"delete\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("odd{slot=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << text;
  // HELP/TYPE once per family.
  EXPECT_EQ(text.find("# TYPE skipped_total"), text.rfind("# TYPE skipped_total"));
  ParsedExposition p = MustParse(text);
  ASSERT_NE(p.Find("odd"), nullptr);
  EXPECT_EQ(p.Find("odd")->label("slot"), "a\"b\\c\nd");
  ASSERT_NE(p.Find("skipped_total", {{"kind", "delete"}}), nullptr);
  EXPECT_EQ(p.Find("skipped_total", {{"kind", "delete"}})->value, 1);
}

TEST(RegistryTest, HistogramBucketsAreCumulative) {
  Registry r;
  Histogram& h = r.AddHistogram("lat_seconds", "Latency.", {0.1, 0.5, 1}, {{"op", "produce"}});
  for (double v : {0.05, 0.1, 0.2, 0.7, 3.0}) h.Observe(v);
  ParsedExposition p = MustParse(r.Render());
  EXPECT_EQ(p.type["lat_seconds"], "histogram");
  auto bucket = [&](const char* le) {
    const Sample* s = p.Find("lat_seconds_bucket", {{"op", "produce"}, {"le", le}});
    return s ? s->value : -1;
  };
  EXPECT_EQ(bucket("0.1"), 2);  // le is inclusive
  EXPECT_EQ(bucket("0.5"), 3);
  EXPECT_EQ(bucket("1"), 4);
  EXPECT_EQ(bucket("+Inf"), 5);
  ASSERT_NE(p.Find("lat_seconds_count"), nullptr);
  EXPECT_EQ(p.Find("lat_seconds_count")->value, 5);
  EXPECT_NEAR(p.Find("lat_seconds_sum")->value, 4.05, 1e-9);
  EXPECT_EQ(DefaultLatencyBuckets().size(), 16u);
  EXPECT_EQ(ExponentialBuckets(1, 2, 3), (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(LinearBuckets(1, 2, 3), (std::vector<double>{1, 3, 5}));
}

TEST(RegistryTest, CallbacksAreReadAtScrapeTime) {
  Registry r;
  std::atomic<uint64_t> produced{3};
  r.AddCounterCallback("produced_total", "Produced.", {},
                       [&] { return static_cast<double>(produced.load()); });
  r.AddGaugeCallback("lsn", "Position.", {{"slot", "s"}}, [] { return 1234567.0; });
  EXPECT_EQ(MustParse(r.Render()).Find("produced_total")->value, 3);
  produced = 10;
  ParsedExposition p = MustParse(r.Render());
  EXPECT_EQ(p.Find("produced_total")->value, 10);
  EXPECT_EQ(p.Find("lsn", {{"slot", "s"}})->value, 1234567);
}

TEST(RegistryTest, RemoveHidesASeriesAndItsFamilyWhenEmpty) {
  Registry r;
  r.AddGauge("g", "G.", {{"slot", "a"}}).Set(1);
  Gauge& b = r.AddGauge("g", "G.", {{"slot", "b"}});
  b.Set(2);
  r.Remove("g", {{"slot", "a"}});
  ParsedExposition p = MustParse(r.Render());
  EXPECT_EQ(p.Find("g", {{"slot", "a"}}), nullptr);
  EXPECT_NE(p.Find("g", {{"slot", "b"}}), nullptr);
  r.Remove("g", {{"slot", "b"}});
  b.Set(3);  // still valid memory
  EXPECT_EQ(r.Render(), "");
}

TEST(RegistryTest, MisuseIsRecordedNotExportedNotFatal) {
  Registry r;
  r.AddCounter("x_total", "X.").Inc();
  Gauge& g = r.AddGauge("x_total", "Wrong type.");  // detached
  g.Set(99);
  r.AddCounter("bad-name", "Bad.").Inc();
  r.AddGauge("y", "Y.", {{"__reserved", "v"}}).Set(1);
  r.AddHistogram("h", "H.", {1, 1});
  EXPECT_EQ(r.errors().size(), 4u);
  const std::string text = r.Render();
  EXPECT_EQ(text.find("99"), std::string::npos) << text;
  EXPECT_EQ(text.find("bad-name"), std::string::npos) << text;
  MustParse(text);
}

TEST(RegistryTest, ConcurrentIncrementsAreNotLost) {
  Registry r;
  Counter& c = r.AddCounter("c_total", "C.");
  Histogram& h = r.AddHistogram("h", "H.", {1, 2});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        c.Inc();
        h.Observe(1.5);
      }
    });
  }
  for (int i = 0; i < 50; ++i) MustParse(r.Render());  // scrape while writing
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 400000);
  EXPECT_EQ(h.count(), 400000u);
  EXPECT_EQ(h.bucket_count(1), 400000u);
}

TEST(RegistryTest, FormatValue) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e300), "1e+300");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatValue(0.0 / 0.0), "NaN");
  EXPECT_EQ(FormatValue(68719476736.0), "68719476736");
}

TEST(ParseExpositionTest, RejectsMalformedInput) {
  EXPECT_FALSE(ParseExposition("x 1\n").ok());  // no TYPE
  EXPECT_FALSE(ParseExposition("# TYPE x gauge\nx{a=\"1} 1\n").ok());
  EXPECT_FALSE(ParseExposition("# TYPE x gauge\nx{a=1} 1\n").ok());
  EXPECT_FALSE(ParseExposition("# TYPE x gauge\nx abc\n").ok());
  EXPECT_FALSE(ParseExposition("# TYPE x gauge\nx 1").ok());  // no final newline
  EXPECT_FALSE(ParseExposition("# TYPE x gauge\n# TYPE x gauge\n").ok());
  EXPECT_FALSE(ParseExposition("# TYPE x wrong\n").ok());
  auto ok = ParseExposition("# a comment\n# TYPE x gauge\nx{a=\"1\",b=\"2\"} 1 1700000000\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->samples.size(), 1u);
  EXPECT_EQ(ok->samples[0].label("b"), "2");
}

}  // namespace
}  // namespace walrelay::metrics
