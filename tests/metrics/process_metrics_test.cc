// The process series read what the process really does: memory held shows in the heap in
// use and goes when freed, a descriptor opened counts, CPU spent counts, and the names are
// the ones Prometheus client libraries export.
#include "src/metrics/process_metrics.h"

#include "base/process_snapshot.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <ctime>
#include <thread>
#include <vector>

namespace walrelay::metrics {
namespace {

// AddressSanitizer replaces glibc's allocator: mallinfo2 then sees none of the program's
// memory, and the heap series mean nothing (the main build runs these tests).
#ifdef __SANITIZE_ADDRESS__
constexpr bool kGlibcHeap = false;
#define SKIP_WITHOUT_GLIBC_HEAP() GTEST_SKIP() << "ASan's allocator replaces glibc's: mallinfo2 sees nothing"
#else
constexpr bool kGlibcHeap = true;
#define SKIP_WITHOUT_GLIBC_HEAP() (void)0
#endif

TEST(ProcessMetricsTest, HeapInUseFollowsWhatTheProgramHoldsAndFrees) {
  SKIP_WITHOUT_GLIBC_HEAP();
  const ProcessSnapshot before = ReadProcessSnapshot();
  ASSERT_GE(before.heap_in_use_bytes, 0);
  constexpr size_t kBlock = 64 << 20;
  char* block = static_cast<char*>(std::malloc(kBlock));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);  // resident, not only reserved
  const ProcessSnapshot held = ReadProcessSnapshot();
  EXPECT_GE(held.heap_in_use_bytes - before.heap_in_use_bytes, kBlock);
  EXPECT_GE(held.resident_bytes - before.resident_bytes, kBlock * 0.9);
  std::free(block);
  const ProcessSnapshot freed = ReadProcessSnapshot();
  EXPECT_LT(freed.heap_in_use_bytes - before.heap_in_use_bytes, kBlock / 2);
}

// Many small blocks freed stay with the allocator (they are below its mmap threshold):
// retained grows, in use does not: the high-water mark RSS shows and a leak does not.
TEST(ProcessMetricsTest, FreedSmallBlocksAreRetainedNotInUse) {
  SKIP_WITHOUT_GLIBC_HEAP();
  std::vector<char*> blocks;
  for (int i = 0; i < 20000; ++i) {
    blocks.push_back(static_cast<char*>(std::malloc(1024)));
    std::memset(blocks.back(), 1, 1024);
  }
  // Keep every other block so the freed ones cannot be merged back into the arena's top.
  const ProcessSnapshot held = ReadProcessSnapshot();
  for (size_t i = 0; i < blocks.size(); i += 2) std::free(blocks[i]);
  const ProcessSnapshot after = ReadProcessSnapshot();
  EXPECT_LE(after.heap_in_use_bytes, held.heap_in_use_bytes - 10000 * 1024);
  EXPECT_GE(after.heap_retained_bytes, held.heap_retained_bytes + 10000 * 1024);
  for (size_t i = 1; i < blocks.size(); i += 2) std::free(blocks[i]);
}

TEST(ProcessMetricsTest, DescriptorsThreadsAndCpuAreCounted) {
  const ProcessSnapshot before = ReadProcessSnapshot();
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const ProcessSnapshot open_one = ReadProcessSnapshot();
  close(fd);
  EXPECT_EQ(open_one.open_fds, before.open_fds + 1);
  EXPECT_GT(open_one.max_fds, open_one.open_fds);

  std::thread t([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  const ProcessSnapshot with_thread = ReadProcessSnapshot();
  t.join();
  EXPECT_EQ(with_thread.threads, before.threads + 1);

  // Spin until this thread has used 200 ms of CPU (by its own clock: a loaded machine
  // gives a wall-clock spin less), then the process's counter must show it.
  auto thread_cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
  };
  const double spun_from = thread_cpu();
  volatile uint64_t spin = 0;
  while (thread_cpu() - spun_from < 0.2) spin = spin + 1;
  EXPECT_GE(ReadProcessSnapshot().cpu_seconds - before.cpu_seconds, 0.19);

  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(before.start_time_seconds, now + 2);  // boot time and time() are whole seconds
  EXPECT_GT(before.start_time_seconds, now - 3600);  // this test program started just now
}

TEST(ProcessMetricsTest, ExportedUnderPrometheusProcessNames) {
  Registry r;
  AddProcessMetrics(r);
  auto parsed = ParseExposition(r.Render());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(r.errors().empty());
  for (const char* name :
       {"process_resident_memory_bytes", "process_virtual_memory_bytes", "process_open_fds",
        "process_max_fds", "process_start_time_seconds", "process_threads",
        "walrelay_heap_in_use_bytes", "walrelay_heap_retained_bytes"}) {
    const Sample* s = parsed->Find(name);
    ASSERT_NE(s, nullptr) << name;
    if (kGlibcHeap || !std::string_view(name).starts_with("walrelay_heap")) {
      EXPECT_GT(s->value, 0) << name;
    }
    EXPECT_EQ(parsed->type.at(name), "gauge") << name;
  }
  ASSERT_NE(parsed->Find("process_cpu_seconds_total"), nullptr);
  EXPECT_EQ(parsed->type.at("process_cpu_seconds_total"), "counter");
}

}  // namespace
}  // namespace walrelay::metrics
