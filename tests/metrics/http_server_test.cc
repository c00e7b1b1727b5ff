// MetricsServer over a real loopback socket: /metrics is scraped with an HTTP client and
// parsed, /healthz answers, /readyz follows the caller's predicate, Stop() joins.
#include "src/metrics/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

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
  // ?standby=ready: 503 still for a process that is not standing by.
  res = client.Get("/readyz?standby=ready");
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

// Only GET and HEAD; a body is never buffered; slow clients do not block the probes
// (issue 13).
// /readyz?standby=ready: a process that stands by is ready for an orchestrator that asks
// so (a Kubernetes readiness probe), and still not ready for plain /readyz (alerts).
TEST(MetricsServerTest, StandbyIsReadyOnlyWhenAskedFor) {
  Registry registry;
  std::atomic<bool> standing_by{true};
  ServerOptions options;
  options.address = "127.0.0.1:0";
  options.ready = [&]() -> Status {
    return standing_by ? UnavailableError("standby: replication slot walrelay is held by process 7")
                       : UnavailableError("no session streams");
  };
  options.standing_by = [&] { return standing_by.load(); };
  auto server = MetricsServer::Start(&registry, options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  httplib::Client client("127.0.0.1", (*server)->port());

  auto res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->body, "not ready: standby: replication slot walrelay is held by process 7\n");
  res = client.Get("/readyz?standby=ready");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ready (standing by): standby: replication slot walrelay is held by process 7\n");
  res = client.Get("/readyz?standby=no");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);

  standing_by = false;  // not standing by and not ready: 503 however asked
  res = client.Get("/readyz?standby=ready");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->body, "not ready: no session streams\n");
}

TEST(MetricsServerTest, RefusesOtherMethodsBodiesAndSurvivesSlowClients) {
  Registry registry;
  ServerOptions options;
  options.address = "127.0.0.1:0";
  auto server = MetricsServer::Start(&registry, options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(1));

  auto post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post) << httplib::to_string(post.error());
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
  // A large body is not read at all: the server answers and closes while the client is
  // still writing (the client sees a write error, or the 405 when it got that far).
  auto big = client.Post("/metrics", std::string(16 << 20, 'x'), "text/plain");
  EXPECT_TRUE(!big || big->status == 405);
  EXPECT_EQ(client.Put("/healthz", "x", "text/plain")->status, 405);
  EXPECT_EQ(client.Delete("/healthz")->status, 405);
  // A GET with a body is refused, not buffered.
  httplib::Request get_with_body;
  get_with_body.method = "GET";
  get_with_body.path = "/healthz";
  get_with_body.body = std::string(4096, 'x');
  get_with_body.set_header("Content-Type", "text/plain");
  auto r = client.send(get_with_body);
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(client.Head("/healthz")->status, 200);

  // Clients that open a request and never finish it hold at most their worker each.
  std::vector<int> slow;
  for (int i = 0; i < options.threads - 1; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string partial = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    ASSERT_EQ(::write(fd, partial.data(), partial.size()), static_cast<ssize_t>(partial.size()));
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  httplib::Client probe("127.0.0.1", port);
  probe.set_connection_timeout(std::chrono::seconds(1));
  probe.set_read_timeout(std::chrono::seconds(1));  // below the server's 2 s read timeout
  auto health = probe.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  for (int fd : slow) ::close(fd);
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
  auto a = ParseHostPort(":9187");  // loopback unless a host is given (issue 13)
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "127.0.0.1");
  EXPECT_EQ(ParseHostPort("0.0.0.0:9187")->first, "0.0.0.0");
  EXPECT_EQ(a->second, 9187);
  auto b = ParseHostPort("[::1]:80");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first, "::1");
  EXPECT_FALSE(ParseHostPort("::1:80").ok());
  EXPECT_FALSE(ParseHostPort("host:").ok());
}

}  // namespace
}  // namespace walrelay::metrics
