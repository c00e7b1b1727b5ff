// libFuzzer target for the wal2json (format-version 2) decoder: each input is split into
// lines, and every line is decoded as one document by one decoder (so table descriptions
// carry over between lines, as in a real stream). Decoded messages are fed to a
// transaction assembler whose errors reset it. Any crash, sanitizer report or out-of-input
// view is a bug; errors are fine.
// Build: cmake -DWALRELAY_FUZZ=ON with clang; seeds: tests/decoder/wal2json_corpus/.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "decoder/transaction_assembler.h"
#include "decoder/wal2json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  walrelay::wal2json::Wal2JsonDecoder decoder;
  walrelay::pgoutput::TransactionAssembler assembler;
  std::vector<walrelay::pgoutput::Message> out;
  while (!input.empty()) {
    const size_t nl = input.find('\n');
    const std::string_view line = input.substr(0, nl);
    input = nl == std::string_view::npos ? std::string_view() : input.substr(nl + 1);
    if (!decoder.Decode(line, &out).ok()) continue;
    for (const auto& m : out) {
      if (!assembler.Feed(m).ok()) assembler.Reset();
    }
  }
  return 0;
}
