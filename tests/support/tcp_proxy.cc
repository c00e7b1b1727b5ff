#include "tests/support/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace walrelay::testing {
namespace {

Status Errno(const std::string& what) {
  return InternalError("tcp proxy: " + what + ": " + std::strerror(errno));
}

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// Moves what `from` has to `to` (blocking write of what was read). False on EOF/error.
bool Forward(int from, int to) {
  char buf[16384];
  const ssize_t n = ::read(from, buf, sizeof buf);
  if (n <= 0) return false;
  for (ssize_t off = 0; off < n;) {
    const ssize_t w = ::write(to, buf + off, static_cast<size_t>(n - off));
    if (w <= 0) return false;
    off += w;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<TcpProxy>> TcpProxy::Start(int target_port) {
  std::unique_ptr<TcpProxy> p(new TcpProxy());
  p->target_port_ = target_port;
  if (::pipe(p->wake_) != 0) return Errno("pipe");
  p->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->listen_fd_ < 0) return Errno("socket");
  sockaddr_in a = Loopback(0);
  if (::bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return Errno("bind");
  if (::listen(p->listen_fd_, 64) != 0) return Errno("listen");
  socklen_t len = sizeof a;
  if (::getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return Errno("getsockname");
  }
  p->port_ = ntohs(a.sin_port);
  p->thread_ = std::thread([raw = p.get()] { raw->Loop(); });
  return p;
}

TcpProxy::~TcpProxy() {
  stop_.store(true);
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (const Pair& pr : pairs_) {
    ::close(pr.client);
    ::close(pr.server);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : wake_) {
    if (fd >= 0) ::close(fd);
  }
}

void TcpProxy::Freeze() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Pair& pr : pairs_) pr.frozen = true;
  }
  (void)!::write(wake_[1], "x", 1);
}

void TcpProxy::Thaw() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Pair& pr : pairs_) pr.frozen = false;
  }
  (void)!::write(wake_[1], "x", 1);
}

void TcpProxy::Loop() {
  while (!stop_.load()) {
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    std::vector<size_t> owner;  // pair index per fd from fds[2] on
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < pairs_.size(); ++i) {
        if (pairs_[i].frozen || pairs_[i].client < 0) continue;
        fds.push_back({pairs_[i].client, POLLIN, 0});
        fds.push_back({pairs_[i].server, POLLIN, 0});
        owner.push_back(i);
        owner.push_back(i);
      }
    }
    if (::poll(fds.data(), fds.size(), 1000) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents & POLLIN) {
      char drain[64];
      (void)!::read(wake_[0], drain, sizeof drain);
    }
    if (fds[0].revents & POLLIN) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) {
        const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a = Loopback(target_port_);
        if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
          ::close(client);
          if (server >= 0) ::close(server);
        } else {
          std::lock_guard<std::mutex> lock(mu_);
          pairs_.push_back({client, server, false});
          accepted_.fetch_add(1);
        }
      }
    }
    for (size_t k = 2; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      std::lock_guard<std::mutex> lock(mu_);
      Pair& pr = pairs_[owner[k - 2]];
      if (pr.frozen || pr.client < 0) continue;  // frozen meanwhile: leave the bytes
      const bool from_client = fds[k].fd == pr.client;
      if (!Forward(fds[k].fd, from_client ? pr.server : pr.client)) {
        ::close(pr.client);
        ::close(pr.server);
        pr.client = pr.server = -1;
      }
    }
  }
}

}  // namespace walrelay::testing
