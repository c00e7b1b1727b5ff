// The process's own resources as Prometheus series, read at scrape time: the standard
// process_* names that Prometheus client libraries export (so existing dashboards and
// alerts on process_resident_memory_bytes, process_open_fds, ... work unchanged), plus the
// C heap as glibc's allocator sees it: walrelay_heap_in_use_bytes (grows with a leak) and
// walrelay_heap_retained_bytes (freed, still held: the part of RSS that is a high-water
// mark of earlier bursts). base/process_snapshot.h says how each is read and why.
//
// The series of one scrape share one reading (taken again when it is 500 ms old).
// Thread safety: any thread may scrape.
#pragma once

#include "src/metrics/registry.h"

namespace walrelay::metrics {

// Adds process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds,
// process_start_time_seconds, process_threads, walrelay_heap_in_use_bytes and
// walrelay_heap_retained_bytes to `registry`. Idempotent (the same series are replaced).
void AddProcessMetrics(Registry& registry);

}  // namespace walrelay::metrics
