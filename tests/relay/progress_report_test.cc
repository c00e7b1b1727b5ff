// The log's periodic progress line (src/relay/core/progress_report.h): due once an interval,
// only when events moved, with the numbers an operator reads.
#include "src/relay/core/progress_report.h"

#include <gtest/gtest.h>

namespace walrelay::relay {
namespace {

using namespace std::chrono_literals;

TEST(ProgressReportTest, SaysOncePerIntervalWhatMovedAndNothingWhenIdle) {
  RelayStats stats;
  ProgressReport report;
  const auto t0 = ProgressReport::Clock::now();
  stats.events_acked = 500;  // before the first call: not counted as this interval's
  EXPECT_FALSE(report.Due(stats, t0));
  stats.events_acked = 1700;
  stats.flush_lsn = 0x5A1B2C8;
  stats.heartbeat_lag_us = 120'400;
  stats.in_flight_events = 15;
  EXPECT_FALSE(report.Due(stats, t0 + 59s)) << "not an interval yet";
  auto line = report.Due(stats, t0 + 60s);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line,
            "progress: 1700 events published (+1200 in 60 s, 20/s), confirmed up to "
            "0/5A1B2C8, end-to-end lag 120 ms, in flight 15");
  EXPECT_FALSE(report.Due(stats, t0 + 61s));
  EXPECT_FALSE(report.Due(stats, t0 + 120s)) << "nothing moved: an idle relay says nothing";

  stats.events_dead_lettered = 2;
  stats.restarts = 1;
  line = report.Due(stats, t0 + 180s);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line,
            "progress: 1700 events published (+0 in 60 s, 0/s), 2 dead-lettered (+2), "
            "confirmed up to 0/5A1B2C8, end-to-end lag 120 ms, in flight 15; 1 session "
            "restart (the log above says why)");

  stats.polling = 1;
  stats.poll_backlog_rows = 42;
  stats.events_acked = 1760;
  line = report.Due(stats, t0 + 240s);
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("(+60 in 60 s, 1/s)"), std::string::npos) << *line;
  EXPECT_NE(line->find(", 42 rows unpublished"), std::string::npos) << *line;
}

}  // namespace
}  // namespace walrelay::relay
