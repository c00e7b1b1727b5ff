#include "src/metrics/process_metrics.h"

#include <chrono>
#include <memory>
#include <mutex>

#include "base/process_snapshot.h"

namespace walrelay::metrics {

void AddProcessMetrics(Registry& registry) {
  struct Series {
    const char* name;
    const char* help;
    bool counter;
    double ProcessSnapshot::*field;
  };
  static constexpr Series kSeries[] = {
      {"process_cpu_seconds_total", "User and system CPU time spent, in seconds.", true,
       &ProcessSnapshot::cpu_seconds},
      {"process_resident_memory_bytes", "Resident memory size (RSS), in bytes.", false,
       &ProcessSnapshot::resident_bytes},
      {"process_virtual_memory_bytes", "Virtual memory size, in bytes.", false,
       &ProcessSnapshot::virtual_bytes},
      {"process_open_fds", "Open file descriptors.", false, &ProcessSnapshot::open_fds},
      {"process_max_fds", "The open file descriptor limit (soft).", false,
       &ProcessSnapshot::max_fds},
      {"process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds.",
       false, &ProcessSnapshot::start_time_seconds},
      {"process_threads", "Threads of the process (walrelay's and librdkafka's).", false,
       &ProcessSnapshot::threads},
      {"walrelay_heap_in_use_bytes",
       "C heap bytes the program holds (malloc'd and not freed; glibc mallinfo2 uordblks + "
       "hblkhd). Grows with a leak; RSS also holds what the allocator retained.",
       false, &ProcessSnapshot::heap_in_use_bytes},
      {"walrelay_heap_retained_bytes",
       "Freed C heap bytes glibc's allocator still holds (mallinfo2 fordblks): part of RSS "
       "that is a high-water mark of earlier bursts, not a leak.",
       false, &ProcessSnapshot::heap_retained_bytes},
  };
  // One scrape reads the series one after another: they share one snapshot, taken again
  // when the last is older than a scrape could take.
  struct Cache {
    std::mutex mu;
    std::chrono::steady_clock::time_point taken;
    ProcessSnapshot snapshot;
  };
  auto cache = std::make_shared<Cache>();
  for (const Series& s : kSeries) {
    auto read = [cache, field = s.field] {
      std::lock_guard lock(cache->mu);
      const auto now = std::chrono::steady_clock::now();
      if (now - cache->taken > std::chrono::milliseconds(500)) {
        cache->snapshot = ReadProcessSnapshot();
        cache->taken = now;
      }
      return cache->snapshot.*field;
    };
    if (s.counter) {
      registry.AddCounterCallback(s.name, s.help, {}, read);
    } else {
      registry.AddGaugeCallback(s.name, s.help, {}, read);
    }
  }
}

}  // namespace walrelay::metrics
