// The process's own resources, read from /proc/self, getrusage() and glibc's allocator:
// what the relay exports as process_* and walrelay_heap_* metrics (src/metrics/
// process_metrics.h) and what programs without a metrics endpoint (walrelay-ledger's stats
// line) print.
//
// Why the heap: resident memory (RSS) mixes what the program holds with what the
// allocator keeps after it was freed. glibc gives each busy thread its own arena (up to 8
// per core) and returns an arena's free memory to the kernel only from its top, so a burst
// (Kafka requests buffered through a broker outage, a large transaction) leaves RSS at its
// high-water mark although the program freed everything. A leak grows the heap in use; a
// high-water mark grows only what is retained. heap_in_use_bytes: bytes the program holds
// (malloc'd, not freed; arenas and large mmap'd blocks together); heap_retained_bytes:
// freed bytes the allocator still holds from the kernel. Both from mallinfo2(), which
// walks every arena under its lock: microseconds for the few arenas a relay has.
//
// Thread safety: any thread may call ReadProcessSnapshot().
#pragma once

namespace walrelay {

// Each field is -1 when it could not be read (e.g. /proc not mounted).
struct ProcessSnapshot {
  double cpu_seconds = -1;
  double resident_bytes = -1;
  double virtual_bytes = -1;
  double open_fds = -1;
  double max_fds = -1;
  double start_time_seconds = -1;  // since the Unix epoch
  double threads = -1;
  double heap_in_use_bytes = -1;
  double heap_retained_bytes = -1;
};
ProcessSnapshot ReadProcessSnapshot();

}  // namespace walrelay
