// Runs the walrelay-devbroker program: bootstrap line, produce/consume over loopback,
// stdin fault commands, SIGTERM -> exit 0.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "src/kafka/producer.h"
#include "test_consumer.h"
#include "tests/support/piped_child.h"

namespace walrelay::kafka {
namespace {

using namespace std::chrono_literals;

using walrelay::testing::PipedChild;

TEST(DevbrokerTest, ServesProduceConsumeAndFaultCommandsUntilSigterm) {
  const std::string bootstrap_file = ::testing::TempDir() + "/devbroker_bootstrap.txt";
  std::remove(bootstrap_file.c_str());
  PipedChild broker;
  ASSERT_TRUE(broker.Start({WALRELAY_DEVBROKER_PATH, "--brokers", "3", "--topic", "orders:3",
                            "--bootstrap-file", bootstrap_file}));
  const std::string line = broker.ReadLine();
  ASSERT_EQ(line.rfind("bootstrap=", 0), 0u) << line;
  const std::string bootstraps = line.substr(10);
  std::string from_file;
  std::getline(std::ifstream(bootstrap_file), from_file);
  EXPECT_EQ(from_file, line);

  std::map<uint64_t, int> ok_reports;
  ProducerOptions options;
  options.properties = {{"bootstrap.servers", bootstraps},
                        {"reconnect.backoff.ms", "20"},
                        {"reconnect.backoff.max.ms", "200"}};
  auto producer =
      Producer::Create(options, [&](uint64_t cookie, const Status& st, const DeliveredRecord&) {
        EXPECT_TRUE(st.ok()) << st.ToString();
        ++ok_reports[cookie];
      });
  ASSERT_TRUE(producer.ok()) << producer.status().ToString();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*producer)->Produce("orders", "k" + std::to_string(i % 4), "v", {}, i).ok());
  }
  ASSERT_TRUE((*producer)->Flush(10s).ok());

  EXPECT_EQ(broker.Command("down all"), "ok");
  for (int i = 20; i < 30; ++i) {
    ASSERT_TRUE((*producer)->Produce("orders", "k" + std::to_string(i % 4), "v", {}, i).ok());
  }
  (*producer)->Poll(500ms);
  EXPECT_EQ(ok_reports.size(), 20u) << "delivered while all brokers were down";
  EXPECT_EQ(broker.Command("up all"), "ok");
  ASSERT_TRUE((*producer)->Flush(20s).ok());
  EXPECT_EQ(ok_reports.size(), 30u);
  for (const auto& [cookie, n] : ok_reports) EXPECT_EQ(n, 1) << cookie;

  auto records = testing::ConsumeAll(bootstraps, "orders", 3, 30, 10s);
  EXPECT_EQ(records.size(), 30u);

  EXPECT_EQ(broker.Command("down 2"), "ok");
  EXPECT_EQ(broker.Command("up 2"), "ok");
  EXPECT_EQ(broker.Command("topic payments 2"), "ok");
  EXPECT_EQ(broker.Command("topic payments 2").rfind("error: ", 0), 0u);
  EXPECT_EQ(broker.Command("down 9").rfind("error: ", 0), 0u);
  EXPECT_EQ(broker.Command("explode").rfind("error: ", 0), 0u);
  EXPECT_EQ(broker.Command("topic-error gone UNKNOWN_TOPIC_OR_PART"), "ok");
  EXPECT_EQ(broker.Command("topic-error gone NO_SUCH_ERROR").rfind("error: ", 0), 0u);

  producer->reset();
  EXPECT_EQ(broker.Stop(SIGTERM), 0);
}

TEST(DevbrokerTest, HelpAndBadOptions) {
  {
    PipedChild c;
    ASSERT_TRUE(c.Start({WALRELAY_DEVBROKER_PATH, "--help"}));
    std::string first = c.ReadLine();
    EXPECT_NE(first.find("walrelay-devbroker"), std::string::npos) << first;
    EXPECT_EQ(c.Stop(0), 0);  // signal 0: just wait for it
  }
  {
    PipedChild c;
    ASSERT_TRUE(c.Start({WALRELAY_DEVBROKER_PATH, "--topic", "nopartitions"}));
    EXPECT_NE(c.Stop(0), 0);
  }
}

}  // namespace
}  // namespace walrelay::kafka
