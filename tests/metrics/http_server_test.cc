// MetricsServer over a real loopback socket: /metrics is scraped with an HTTP client and
// parsed, /healthz answers, /readyz follows the caller's predicate, Stop() joins.
#include "src/metrics/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>

namespace walrelay::metrics {
namespace {

TEST(MetricsServerTest, ServesMetricsHealthAndReadiness) {
  Registry registry;
  Counter& events = registry.AddCounter("walrelay_test_events_total", "Events.");
  Histogram& lat = registry.AddHistogram("walrelay_test_latency_seconds", "Latency.", {0.1, 1});
  std::atomic<bool> ready{false};
  ServerOptions options;
  options.address = "127.0.0.1:0";
  options.ready = [&]() -> Status {
    return ready ? Status::Ok() : UnavailableError("not streaming yet");
  };
  auto server = MetricsServer::Start(&registry, options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_GT((*server)->port(), 0);

  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(std::chrono::seconds(5));

  for (int i = 0; i < 42; ++i) events.Inc();
  lat.Observe(0.05);
  lat.Observe(5);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  auto parsed = ParseExposition(res->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << res->body;
  ASSERT_NE(parsed->Find("walrelay_test_events_total"), nullptr);
  EXPECT_EQ(parsed->Find("walrelay_test_events_total")->value, 42);
  EXPECT_EQ(parsed->Find("walrelay_test_latency_seconds_bucket", {{"le", "0.1"}})->value, 1);
  EXPECT_EQ(parsed->Find("walrelay_test_latency_seconds_count")->value, 2);
  EXPECT_EQ(parsed->help["walrelay_test_events_total"], "Events.");

  // A second scrape sees the new value.
  events.Inc(8);
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(ParseExposition(res->body)->Find("walrelay_test_events_total")->value, 50);

  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);

  res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_NE(res->body.find("not streaming yet"), std::string::npos) << res->body;
  ready = true;
  res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  ready = false;
  res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);

  res = client.Get("/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);

  const int port = (*server)->port();
  (*server)->Stop();
  (*server)->Stop();  // idempotent
  httplib::Client after("127.0.0.1", port);
  after.set_connection_timeout(std::chrono::seconds(1));
  EXPECT_FALSE(after.Get("/healthz"));
}

TEST(MetricsServerTest, BindErrorsAreReported) {
  Registry registry;
  ServerOptions options;
  options.address = "127.0.0.1:0";
  auto first = MetricsServer::Start(&registry, options);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  options.address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = MetricsServer::Start(&registry, options);
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  options.address = "no-port";
  EXPECT_EQ(MetricsServer::Start(&registry, options).status().code(), StatusCode::kInvalidArgument);
  options.address = "127.0.0.1:99999";
  EXPECT_EQ(MetricsServer::Start(&registry, options).status().code(), StatusCode::kInvalidArgument);
  // Destructor stops a running server.
}

TEST(MetricsServerTest, ParseHostPort) {
  auto a = ParseHostPort(":9187");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "0.0.0.0");
  EXPECT_EQ(a->second, 9187);
  auto b = ParseHostPort("[::1]:80");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first, "::1");
  EXPECT_FALSE(ParseHostPort("::1:80").ok());
  EXPECT_FALSE(ParseHostPort("host:").ok());
}

}  // namespace
}  // namespace walrelay::metrics
