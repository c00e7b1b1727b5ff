#include "tests/support/toxiproxy.h"

#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <regex>

namespace walrelay::testing {
namespace {

std::string ScriptPath() { return std::string(WALRELAY_SOURCE_DIR) + "/scripts/toxiproxy.sh"; }

char g_dir[256];  // for the exit handler
void StopAtExit() {
  (void)std::system(("bash '" + ScriptPath() + "' stop --dir '" + g_dir + "' >/dev/null 2>&1").c_str());
}

}  // namespace

Result<Toxiproxy*> Toxiproxy::Shared() {
  static Toxiproxy* shared = nullptr;
  if (shared != nullptr) return shared;
  auto proxy = std::unique_ptr<Toxiproxy>(new Toxiproxy());
  char tmpl[] = "/tmp/walrelay-toxiproxy-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return InternalError("mkdtemp");
  proxy->dir_ = tmpl;
  const std::string cmd = "bash '" + ScriptPath() + "' start --dir '" + proxy->dir_ + "' --owner " +
                          std::to_string(::getpid()) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return InternalError("popen of toxiproxy.sh");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  std::smatch m;
  if (status != 0 || !std::regex_search(out, m, std::regex(R"(api=([0-9.]+):(\d+))"))) {
    return UnavailableError("scripts/toxiproxy.sh start failed (status " + std::to_string(status) +
                            "): " + out);
  }
  proxy->host_ = m[1];
  proxy->port_ = std::stoi(m[2]);
  std::snprintf(g_dir, sizeof g_dir, "%s", proxy->dir_.c_str());
  std::atexit(StopAtExit);
  shared = proxy.release();
  return shared;
}

Result<std::string> Toxiproxy::Request(const std::string& method, const std::string& path,
                                       const std::string& body) {
  httplib::Client client(host_, port_);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  httplib::Result r = method == "GET"      ? client.Get(path)
                      : method == "DELETE" ? client.Delete(path)
                                           : client.Post(path, body, "application/json");
  if (!r) return UnavailableError("toxiproxy " + method + " " + path + ": no answer");
  if (r->status / 100 != 2) {
    return UnavailableError("toxiproxy " + method + " " + path + ": " + std::to_string(r->status) +
                            " " + r->body);
  }
  return r->body;
}

Result<int> Toxiproxy::CreateProxy(const std::string& name, const std::string& upstream,
                                   int listen_port) {
  (void)Request("DELETE", "/proxies/" + name, "");  // 404 when there is none
  WALRELAY_ASSIGN_OR_RETURN(
      std::string body,
      Request("POST", "/proxies",
              "{\"name\":\"" + name + "\",\"listen\":\"127.0.0.1:" + std::to_string(listen_port) +
                  "\",\"upstream\":\"" + upstream + "\",\"enabled\":true}"));
  std::smatch m;
  if (!std::regex_search(body, m, std::regex(R"re("listen":"[0-9.]+:(\d+)")re"))) {
    return InternalError("toxiproxy: no listen port in " + body);
  }
  return std::stoi(m[1]);
}

Status Toxiproxy::AddToxic(const std::string& proxy, const std::string& toxic, const std::string& type,
                           const std::string& stream, const std::string& attributes) {
  return Request("POST", "/proxies/" + proxy + "/toxics",
                 "{\"name\":\"" + toxic + "\",\"type\":\"" + type + "\",\"stream\":\"" + stream +
                     "\",\"toxicity\":1.0,\"attributes\":{" + attributes + "}}")
      .status();
}

Status Toxiproxy::RemoveToxic(const std::string& proxy, const std::string& toxic) {
  return Request("DELETE", "/proxies/" + proxy + "/toxics/" + toxic, "").status();
}

Status Toxiproxy::BlackHole(const std::string& proxy) {
  WALRELAY_RETURN_IF_ERROR(AddToxic(proxy, "black_hole_up", "timeout", "upstream", "\"timeout\":0"));
  return AddToxic(proxy, "black_hole_down", "timeout", "downstream", "\"timeout\":0");
}

Status Toxiproxy::Heal(const std::string& proxy) {
  WALRELAY_RETURN_IF_ERROR(RemoveToxic(proxy, "black_hole_up"));
  return RemoveToxic(proxy, "black_hole_down");
}

Status Toxiproxy::RemoveAll() { return Request("POST", "/reset", "").status(); }

Result<std::string> Toxiproxy::Describe(const std::string& proxy) {
  return Request("GET", "/proxies/" + proxy + "/toxics", "");
}

}  // namespace walrelay::testing
