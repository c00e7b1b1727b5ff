// Waiting for a condition with a deadline: the tests' one way to wait for something to
// happen (instead of sleeping a fixed time and asserting after it, which fails on a loaded
// machine and passes without the thing having happened).
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace walrelay::testing {

// Polls `done` every `every` until it returns true or `timeout` passed; returns its last
// value (so a caller asserts on the result: ASSERT_TRUE(WaitFor(...)) << what was seen).
inline bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                    std::chrono::milliseconds every = std::chrono::milliseconds(50)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(every);
  }
  return done();
}

}  // namespace walrelay::testing
