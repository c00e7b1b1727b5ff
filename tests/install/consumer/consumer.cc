// A service outside the walrelay tree: it includes the installed headers and links the
// installed libraries (tests/install/check.sh builds it with find_package and with
// pkg-config). Prints a UUIDv7 event id (walrelay::outbox) and the inbox's retention
// verdict for a one-day replay window (walrelay::inbox); with an argument it would consume.
#include <chrono>
#include <cstdio>

#include "src/inbox/inbox.h"
#include "src/outbox/outbox.h"

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  walrelay::inbox::ReplayWindow window;
  window.window = std::chrono::duration_cast<std::chrono::milliseconds>(24h);
  const walrelay::Status keep_two_days = walrelay::inbox::CheckInboxRetention(48h, window);
  const walrelay::Status keep_one_hour = walrelay::inbox::CheckInboxRetention(1h, window);
  std::printf("event id %s; two days: %s; one hour: %s\n", walrelay::outbox::NewUuidV7().c_str(),
              keep_two_days.ok() ? "ok" : "refused", keep_one_hour.ok() ? "ok" : "refused");
  if (argc > 1) {  // links the whole consumer: what a service really calls
    walrelay::inbox::InboxOptions options;
    options.bootstrap_servers = argv[1];
    auto consumer = walrelay::inbox::InboxConsumer::Create(
        options, [](const walrelay::inbox::InboxMessage&, walrelay::inbox::Transaction&) {
          return walrelay::Status::Ok();
        });
    return consumer.ok() ? 0 : 1;
  }
  return keep_two_days.ok() && !keep_one_hour.ok() ? 0 : 1;
}
