#include "src/metrics/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <charconv>
#include <chrono>

namespace walrelay::metrics {

Result<std::pair<std::string, int>> ParseHostPort(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) {
    return InvalidArgumentError("metrics address '" + std::string(address) +
                                "' is not host:port (e.g. 0.0.0.0:9187 or :9187)");
  }
  std::string host(address.substr(0, colon));
  const std::string_view port_text = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return InvalidArgumentError("metrics address '" + std::string(address) +
                                "': write an IPv6 host in brackets, e.g. [::1]:9187");
  }
  if (host.empty()) host = "127.0.0.1";  // all interfaces only when asked: 0.0.0.0:port
  int port = -1;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    return InvalidArgumentError("metrics address '" + std::string(address) +
                                "': port must be 0..65535");
  }
  return std::make_pair(host, port);
}

MetricsServer::MetricsServer(const Registry* registry, ServerOptions options)
    : registry_(registry),
      options_(std::move(options)),
      server_(std::make_unique<httplib::Server>()) {}

MetricsServer::~MetricsServer() { Stop(); }

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const Registry* registry,
                                                            ServerOptions options) {
  WALRELAY_ASSIGN_OR_RETURN(auto host_port, ParseHostPort(options.address));
  std::unique_ptr<MetricsServer> s(new MetricsServer(registry, std::move(options)));
  httplib::Server& svr = *s->server_;
  const int threads = s->options_.threads > 0 ? s->options_.threads : 1;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // A client that sends slowly holds a worker thread until this timeout: short, so that
  // probes get through (with `threads` workers, threads - 1 slow clients cannot block them).
  svr.set_read_timeout(std::chrono::seconds(2));
  // Nothing here takes a body: refuse one instead of buffering it (cpp-httplib's default
  // limit is unbounded), and answer methods other than GET and HEAD with 405 before any
  // body is read.
  svr.set_payload_max_length(0);
  svr.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.method != "GET" && req.method != "HEAD") {
      res.status = 405;
      res.set_header("Allow", "GET, HEAD");
      res.set_content("only GET and HEAD\n", "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.has_header("Transfer-Encoding") ||
        (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0")) {
      // Not read: the connection is closed after this answer.
      res.status = 413;
      res.set_header("Connection", "close");
      res.set_content("no request body expected\n", "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_write_timeout(std::chrono::seconds(5));
  svr.set_keep_alive_timeout(5);
  // cpp-httplib's default also sets SO_REUSEPORT, which lets a second process bind the same
  // port silently (and steal half the scrapes). SO_REUSEADDR only: a taken port is an error.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });

  MetricsServer* self = s.get();
  svr.Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
    res.set_content(self->registry_->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  svr.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  svr.Get("/readyz", [self](const httplib::Request& req, httplib::Response& res) {
    Status st = self->options_.ready ? self->options_.ready() : Status::Ok();
    const bool standby_ready = !st.ok() && req.get_param_value("standby") == "ready" &&
                               self->options_.standing_by && self->options_.standing_by();
    std::string body = st.ok()          ? "ready\n"
                       : standby_ready ? "ready (standing by): " + st.message() + "\n"
                                       : "not ready: " + st.message() + "\n";
    if (self->options_.note) {
      if (std::string note = self->options_.note(); !note.empty()) body += "note: " + note + "\n";
    }
    if (!st.ok() && !standby_ready) res.status = 503;
    res.set_content(body, "text/plain; charset=utf-8");
  });

  s->host_ = host_port.first;
  if (host_port.second == 0) {
    s->port_ = svr.bind_to_any_port(s->host_);
    if (s->port_ <= 0) {
      return UnavailableError("metrics server: cannot bind " + s->options_.address);
    }
  } else {
    if (!svr.bind_to_port(s->host_, host_port.second)) {
      return UnavailableError("metrics server: cannot bind " + s->options_.address +
                              " (port in use, or the host is not a local address)");
    }
    s->port_ = host_port.second;
  }
  s->thread_ = std::thread([self] { self->server_->listen_after_bind(); });
  // stop() is a no-op until the listen loop runs: wait for it so Stop() cannot be lost.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!svr.is_running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!svr.is_running()) {
    s->Stop();
    return UnavailableError("metrics server: listen loop did not start on " + s->options_.address);
  }
  return s;
}

void MetricsServer::Stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace walrelay::metrics
