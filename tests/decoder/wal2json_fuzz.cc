// libFuzzer target for the wal2json (format-version 2) decoder: each input is split into
// lines, and every line is decoded as one document by one decoder (so table descriptions
// carry over between lines, as in a real stream). Decoded messages are fed to a
// transaction assembler whose errors reset it. Every byte of every decoded value (names,
// column values, message prefix and content) is read, so a view past the decoder's
// storage or into freed memory is an ASan report; tuples must iterate to their size. Any
// crash, sanitizer report or broken check is a bug; errors are fine.
// Build: cmake -DWALRELAY_FUZZ=ON with clang; seeds: tests/decoder/wal2json_corpus/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "decoder/transaction_assembler.h"
#include "decoder/wal2json.h"

namespace {

using namespace walrelay::pgoutput;  // NOLINT: test-only file

volatile unsigned char g_sink;

void Read(std::string_view v) {
  unsigned char x = 0;
  for (char c : v) x ^= static_cast<unsigned char>(c);
  g_sink = x;
}

void ReadTuple(const TupleView& t) {
  Read(t.raw());
  size_t n = 0;
  for (const ColumnValue& c : t) {
    Read(c.data);
    ++n;
  }
  if (n != t.size()) std::abort();
}

void ReadAll(const Message& m) {
  std::visit(
      [](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, Insert>) {
          ReadTuple(msg.new_tuple);
        } else if constexpr (std::is_same_v<T, Update>) {
          ReadTuple(msg.old_tuple);
          ReadTuple(msg.new_tuple);
        } else if constexpr (std::is_same_v<T, Delete>) {
          ReadTuple(msg.old_tuple);
        } else if constexpr (std::is_same_v<T, Relation>) {
          Read(msg.namespace_name);
          Read(msg.relation_name);
          for (const RelationColumn& c : msg.columns) Read(c.name);
        } else if constexpr (std::is_same_v<T, LogicalMessage>) {
          Read(msg.prefix);
          Read(msg.content);
        }
      },
      m);
}

}  // namespace

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
      ReadAll(m);
      if (!assembler.Feed(m).ok()) assembler.Reset();
    }
  }
  return 0;
}
