// Recordings: the reader's bounds checks (unit), and `walrelay record` + `walrelay replay`
// end to end on a tiny stream from a throwaway PostgreSQL (the CI smoke test of
// record/replay).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/lsn.h"
#include "src/relay/commands/recording.h"
#include "src/relay/core/schema.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/subprocess.h"

namespace walrelay::relay {
namespace {

using namespace std::chrono_literals;
using testing::Subprocess;

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/walrelay-" + std::to_string(::getpid()) + "-" + name;
}


void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

RecordingHeader TestHeader() {
  RecordingHeader h;
  h.created_unix_us = 1764680000000000;
  h.start_lsn = Lsn(0x16B3748);
  h.server_version = "15.18";
  h.plugin = "pgoutput";
  h.slot = "s";
  h.options = {{"proto_version", "1"}, {"publication_names", "p"}};
  return h;
}

// Writes 3 XLogData records and a keepalive; returns the file's bytes.
std::string WriteSample(const std::string& path) {
  auto w = RecordingWriter::Create(path, TestHeader());
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < 3; ++i) {
    slot::XLogData x;
    x.wal_start = Lsn(100 + i);
    x.wal_end = Lsn(200 + i);
    x.send_time = 1000 * i;
    const std::string data(10 + i, static_cast<char>('a' + i));
    x.data = data;
    EXPECT_TRUE((*w)->AppendXLogData(x).ok());
  }
  EXPECT_TRUE((*w)->AppendKeepalive({Lsn(300), 5000, true}).ok());
  EXPECT_TRUE((*w)->Finish().ok());
  return testing::ReadFile(path);
}

TEST(RecordingTest, RoundTrip) {
  const std::string path = TempPath("roundtrip.wrr");
  WriteSample(path);
  auto r = RecordingReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const RecordingHeader& h = (*r)->header();
  EXPECT_EQ(h.plugin, "pgoutput");
  EXPECT_EQ(h.server_version, "15.18");
  EXPECT_EQ(h.start_lsn, Lsn(0x16B3748));
  EXPECT_EQ(h.Option("publication_names"), "p");
  for (int i = 0; i < 3; ++i) {
    auto f = (*r)->Read(0ms);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_EQ(f->kind, slot::Frame::Kind::kXLogData);
    EXPECT_EQ(f->xlog.wal_start, Lsn(100 + i));
    EXPECT_EQ(f->xlog.wal_end, Lsn(200 + i));
    EXPECT_EQ(f->xlog.send_time, 1000 * i);
    EXPECT_EQ(f->xlog.data, std::string(10 + i, static_cast<char>('a' + i)));
  }
  auto k = (*r)->Read(0ms);
  ASSERT_TRUE(k.ok());
  ASSERT_EQ(k->kind, slot::Frame::Kind::kKeepalive);
  EXPECT_EQ(k->keepalive.wal_end, Lsn(300));
  EXPECT_TRUE(k->keepalive.reply_requested);
  for (int i = 0; i < 2; ++i) {
    auto e = (*r)->Read(0ms);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->kind, slot::Frame::Kind::kEndOfStream);
  }
  EXPECT_TRUE((*r)->SendStatus(Lsn(5), Lsn(4), Lsn(4), false).ok());
  EXPECT_EQ((*r)->last_flush(), Lsn(4));
  ::unlink(path.c_str());
}

// Every truncation point fails with kDataLoss and an offset, never crashes or hangs;
// only truncation at a record boundary is accepted, and only with allow_truncated.
TEST(RecordingTest, TruncatedAndCorruptFilesAreDataLoss) {
  const std::string path = TempPath("cut.wrr");
  const std::string full = WriteSample(path);
  for (size_t cut = 0; cut < full.size(); ++cut) {
    WriteAll(path, full.substr(0, cut));
    Status failure;
    auto r = RecordingReader::Open(path);
    if (!r.ok()) {
      failure = r.status();
    } else {
      for (int i = 0; i < 10 && failure.ok(); ++i) {
        auto f = (*r)->Read(0ms);
        if (!f.ok())
          failure = f.status();
        else if (f->kind == slot::Frame::Kind::kEndOfStream)
          break;
      }
    }
    ASSERT_FALSE(failure.ok()) << "cut at " << cut << " was accepted";
    EXPECT_EQ(failure.code(), StatusCode::kDataLoss) << failure.ToString();
    EXPECT_NE(failure.message().find("offset"), std::string::npos) << failure.ToString();
  }
  // Without the end marker (17 bytes): accepted when allowed.
  WriteAll(path, full.substr(0, full.size() - 17));
  RecordingReader::Options lenient;
  lenient.allow_truncated = true;
  auto r = RecordingReader::Open(path, lenient);
  ASSERT_TRUE(r.ok());
  int frames = 0;
  for (;;) {
    auto f = (*r)->Read(0ms);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    if (f->kind == slot::Frame::Kind::kEndOfStream) break;
    ++frames;
  }
  EXPECT_EQ(frames, 4);
  // A corrupt type byte and a corrupt length.
  std::string bad = full;
  const size_t first_record = 16 + (full.size() - 16 - (29 + 10) - (29 + 11) - (29 + 12) - 18 - 17);
  bad[first_record] = 'x';
  WriteAll(path, bad);
  auto rb = RecordingReader::Open(path);
  ASSERT_TRUE(rb.ok());
  auto fb = (*rb)->Read(0ms);
  ASSERT_FALSE(fb.ok());
  EXPECT_EQ(fb.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(fb.status().message().find("offset " + std::to_string(first_record)), std::string::npos)
      << fb.status().ToString();
  bad = full;
  bad[first_record + 25 + 3] = '\x7f';  // payload length ~2 GiB
  WriteAll(path, bad);
  auto rl = RecordingReader::Open(path);
  ASSERT_TRUE(rl.ok());
  auto fl = (*rl)->Read(0ms);
  ASSERT_FALSE(fl.ok());
  EXPECT_EQ(fl.status().code(), StatusCode::kDataLoss);
  ::unlink(path.c_str());
}

TEST(RecordingTest, RecordedPaceReproducesGaps) {
  const std::string path = TempPath("pace.wrr");
  WriteSample(path);  // send times 0, 1000, 2000 µs, keepalive 5000 µs
  RecordingReader::Options o;
  o.recorded_pace = true;
  auto r = RecordingReader::Open(path, o);
  ASSERT_TRUE(r.ok());
  const auto t0 = std::chrono::steady_clock::now();
  int frames = 0;
  for (;;) {
    auto f = (*r)->Read(100ms);
    ASSERT_TRUE(f.ok());
    if (f->kind == slot::Frame::Kind::kEndOfStream) break;
    if (f->kind != slot::Frame::Kind::kTimeout) ++frames;
  }
  EXPECT_EQ(frames, 4);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 5ms);
  ::unlink(path.c_str());
}

// `walrelay record` of a small backlog, then `walrelay replay --sink null --json`.
TEST(RecordReplayTest, RecordsAndReplaysATinyStream) {
  auto pg = testing::TestCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  auto& c = **pg;
  ASSERT_TRUE(c.Exec(OutboxTableDdl("public.outbox")).ok());
  ASSERT_TRUE(c.Exec("CREATE PUBLICATION walrelay_outbox FOR TABLE outbox").ok());
  ASSERT_TRUE(c.Exec("SELECT pg_create_logical_replication_slot('rec', 'pgoutput')").ok());
  ASSERT_TRUE(c.Exec("SELECT pg_create_logical_replication_slot('recj', 'wal2json')").ok());
  // 10 transactions of 50 rows, one update (not an event) and a foreign logical message.
  for (int t = 0; t < 10; ++t) {
    ASSERT_TRUE(c.Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
                       "SELECT 'payment', 'a' || (g % 7), 'Paid', jsonb_build_object('t', " +
                       std::to_string(t) + ", 'g', g) FROM generate_series(1, 50) g")
                    .ok());
  }
  ASSERT_TRUE(c.Exec("UPDATE outbox SET headers = '{}' WHERE id = 1").ok());
  ASSERT_TRUE(c.Exec("SELECT pg_logical_emit_message(true, 'other', 'x')").ok());
  auto end = c.QueryScalar("SELECT pg_current_wal_insert_lsn()");
  ASSERT_TRUE(end.ok());
  auto before =
      c.QueryScalar("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'rec'");
  ASSERT_TRUE(before.ok());

  const std::string file = TempPath("tiny.wrr");
  const std::string rec_log = TempPath("record.log");
  auto rec = Subprocess::Start({WALRELAY_BINARY, "record", "--dsn", c.conninfo(), "-o", file,
                                "--slot", "rec", "--until-lsn", *end},
                               rec_log);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  auto code = rec->Wait(60s);
  ASSERT_EQ(code, 0) << rec->LogTail();
  // Owner-only (issue 13): a recording holds every payload of the stream.
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Not advanced by default.
  auto after =
      c.QueryScalar("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'rec'");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);

  const std::string replay_log = TempPath("replay.log");
  auto rep =
      Subprocess::Start({WALRELAY_BINARY, "replay", file, "--sink", "null", "--json"}, replay_log);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->Wait(60s), 0) << rep->LogTail();
  const std::string out = testing::ReadFile(replay_log);
  EXPECT_NE(out.find("\"events\":500,"), std::string::npos) << out;
  EXPECT_NE(out.find("\"acked\":500,"), std::string::npos) << out;
  EXPECT_NE(out.find("\"dead_letters\":0,"), std::string::npos) << out;
  EXPECT_NE(out.find("\"transactions\":12,"), std::string::npos) << out;
  EXPECT_NE(out.find("\"cpu_us_per_event\":"), std::string::npos) << out;
  EXPECT_NE(out.find("\"peak_rss_bytes\":"), std::string::npos) << out;

  // A replay maps like `walrelay run` with the same mapping options: here an allow-list no
  // topic of the stream is on dead-letters every event, and the header names are taken.
  auto rep_mapped = Subprocess::Start(
      {WALRELAY_BINARY, "replay", file, "--sink", "null", "--json", "--outbox-allowed-topic",
       "outbox.elsewhere", "--outbox-header", "event_type=", "--outbox-profile", "walrelay",
       "--outbox-key-format", "raw", "--outbox-value-format", "raw"},
      replay_log);
  ASSERT_TRUE(rep_mapped.ok()) << rep_mapped.status().ToString();
  ASSERT_EQ(rep_mapped->Wait(60s), 0) << rep_mapped->LogTail();
  const std::string mapped = testing::ReadFile(replay_log);
  EXPECT_NE(mapped.find("\"events\":500,"), std::string::npos) << mapped;
  EXPECT_NE(mapped.find("\"dead_letters\":500,"), std::string::npos) << mapped;

  // The same stream from a wal2json slot replays to the same events.
  auto recj = Subprocess::Start({WALRELAY_BINARY, "record", "--dsn", c.conninfo(), "-o", file,
                                 "--slot", "recj", "--plugin", "wal2json", "--until-lsn", *end},
                                rec_log);
  ASSERT_TRUE(recj.ok()) << recj.status().ToString();
  ASSERT_EQ(recj->Wait(60s), 0) << recj->LogTail();
  const std::string replay_json_log = TempPath("replayj.log");
  auto repj = Subprocess::Start({WALRELAY_BINARY, "replay", file, "--sink", "null", "--json"},
                                replay_json_log);
  ASSERT_TRUE(repj.ok()) << repj.status().ToString();
  ASSERT_EQ(repj->Wait(60s), 0) << repj->LogTail();
  const std::string outj = testing::ReadFile(replay_json_log);
  EXPECT_NE(outj.find("\"plugin\":\"wal2json\""), std::string::npos) << outj;
  EXPECT_NE(outj.find("\"events\":500,"), std::string::npos) << outj;
  EXPECT_NE(outj.find("\"dead_letters\":0,"), std::string::npos) << outj;
  ::unlink(replay_json_log.c_str());

  // --advance confirms what was written.
  ASSERT_TRUE(c.Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
                     "VALUES ('payment', 'z', 'Paid', '{}')")
                  .ok());
  auto end2 = c.QueryScalar("SELECT pg_current_wal_insert_lsn()");
  ASSERT_TRUE(end2.ok());
  auto rec2 = Subprocess::Start({WALRELAY_BINARY, "record", "--dsn", c.conninfo(), "-o", file,
                                 "--slot", "rec", "--until-lsn", *end2, "--advance"},
                                rec_log);
  ASSERT_TRUE(rec2.ok());
  ASSERT_EQ(rec2->Wait(60s), 0) << rec2->LogTail();
  auto advanced = c.QueryScalar("SELECT confirmed_flush_lsn >= '" + *end +
                                "'::pg_lsn FROM pg_replication_slots "
                                "WHERE slot_name = 'rec'");
  ASSERT_TRUE(advanced.ok());
  EXPECT_EQ(*advanced, "t");

  // A recording is never written through a symbolic link (issue 13).
  const std::string target = TempPath("target");
  const std::string link = TempPath("link.wrr");
  { std::ofstream(target) << "keep"; }
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  auto via_link = Subprocess::Start({WALRELAY_BINARY, "record", "--dsn", c.conninfo(), "-o", link,
                                     "--slot", "rec", "--until-lsn", *end2},
                                    rec_log);
  ASSERT_TRUE(via_link.ok());
  EXPECT_NE(via_link->Wait(60s), 0);
  EXPECT_NE(testing::ReadFile(rec_log).find("symbolic link"), std::string::npos) << testing::ReadFile(rec_log);
  EXPECT_EQ(testing::ReadFile(target), "keep");
  ::unlink(link.c_str());
  ::unlink(target.c_str());

  // A missing slot is created TEMPORARY unless --create-slot: nothing is left pinning WAL.
  auto now = c.QueryScalar("SELECT pg_current_wal_insert_lsn()");
  ASSERT_TRUE(now.ok());
  auto temp = Subprocess::Start({WALRELAY_BINARY, "record", "--dsn", c.conninfo(), "-o", file,
                                 "--slot", "rec_temp", "--until-lsn", *now},
                                rec_log);
  ASSERT_TRUE(temp.ok());
  ASSERT_EQ(temp->Wait(60s), 0) << temp->LogTail();
  EXPECT_NE(testing::ReadFile(rec_log).find("created temporary slot rec_temp"), std::string::npos)
      << testing::ReadFile(rec_log);
  EXPECT_EQ(*c.QueryScalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'rec_temp'"),
            "0");
  ::unlink(file.c_str());
  ::unlink(rec_log.c_str());
  ::unlink(replay_log.c_str());
}

}  // namespace
}  // namespace walrelay::relay
