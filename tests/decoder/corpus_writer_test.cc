// Writes the fuzz seed corpus (tests/decoder/corpus/) from testing::ValidSamples() when
// WALRELAY_WRITE_CORPUS names a directory; skipped otherwise. Run once after changing
// the samples:
//   WALRELAY_WRITE_CORPUS=tests/decoder/corpus
//     build-decoder/tests/decoder/decoder_test --gtest_filter='CorpusWriter.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "tests/decoder/wire_builder.h"

namespace walrelay::pgoutput {
namespace {

TEST(CorpusWriter, WriteSeedCorpus) {
  const char* dir = std::getenv("WALRELAY_WRITE_CORPUS");
  if (dir == nullptr) GTEST_SKIP() << "set WALRELAY_WRITE_CORPUS=<dir> to write the corpus";
  std::set<std::string> seen;  // the same bytes appear under several versions
  for (const testing::Sample& s : testing::ValidSamples()) {
    if (!seen.insert(s.bytes).second) continue;
    std::ofstream out(std::string(dir) + "/" + s.name + ".bin", std::ios::binary);
    ASSERT_TRUE(out) << dir;
    out.write(s.bytes.data(), static_cast<std::streamsize>(s.bytes.size()));
  }
}

}  // namespace
}  // namespace walrelay::pgoutput
