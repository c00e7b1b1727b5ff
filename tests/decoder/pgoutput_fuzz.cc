// libFuzzer target for the pgoutput decoder, relation cache and transaction assembler.
//
// Each input is used two ways:
//  1. as ONE pgoutput message, decoded under every protocol version with in_stream
//     false/true (and parallel streaming for v4); decoded messages are checked (every
//     view lies inside the input, tuples iterate to their size) and fed to a fresh
//     assembler and relation cache;
//  2. as a SEQUENCE: byte 0 selects the protocol version (b % 4 + 1) and parallel
//     streaming (b & 4); then [Int16 length][message] records, decoded with the
//     assembler's in_stream and fed in order (an assembler error resets it).
// Build: cmake -DWALRELAY_FUZZ=ON with clang (see tests/decoder/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <type_traits>
#include <vector>

#include "decoder/pgoutput.h"
#include "decoder/relation_cache.h"
#include "decoder/transaction_assembler.h"

namespace {

using namespace walrelay::pgoutput;  // NOLINT: test-only file

std::string_view g_input;

void CheckView(std::string_view v) {
  if (v.empty()) return;
  if (v.data() < g_input.data() || v.data() + v.size() > g_input.data() + g_input.size()) {
    // "pg_catalog" is the only view allowed to point elsewhere.
    if (v != "pg_catalog") std::abort();
  }
}

void CheckTuple(const TupleView& t) {
  CheckView(t.raw());
  size_t n = 0;
  for (const ColumnValue& c : t) {
    CheckView(c.data);
    if (!c.has_value() && !c.data.empty()) std::abort();
    ++n;
  }
  if (n != t.size()) std::abort();
  static std::vector<ColumnValue> cols;
  t.FillColumns(&cols);
  if (cols.size() != t.size()) std::abort();
}

void Check(const Message& m, RelationCache* cache) {
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, Insert>) {
          CheckTuple(msg.new_tuple);
          (void)cache->FindForTuple(msg.relation_id, msg.new_tuple).ok();
        } else if constexpr (std::is_same_v<T, Update>) {
          CheckTuple(msg.old_tuple);
          CheckTuple(msg.new_tuple);
        } else if constexpr (std::is_same_v<T, Delete>) {
          CheckTuple(msg.old_tuple);
        } else if constexpr (std::is_same_v<T, Relation>) {
          CheckView(msg.namespace_name);
          CheckView(msg.relation_name);
          for (const RelationColumn& c : msg.columns) CheckView(c.name);
          const CachedRelation* r = cache->Put(msg);
          if (r != cache->Find(msg.relation_id)) std::abort();
        } else if constexpr (std::is_same_v<T, LogicalMessage>) {
          CheckView(msg.prefix);
          CheckView(msg.content);
        } else if constexpr (std::is_same_v<T, Origin>) {
          CheckView(msg.name);
        }
      },
      m);
  (void)MessageTypeName(TypeOf(m));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  g_input = input;

  // 1. One message, every option combination.
  for (int version = kProtoVersionMin; version <= kProtoVersionMax; ++version) {
    for (bool in_stream : {false, true}) {
      for (bool parallel : {false, true}) {
        if (in_stream && version < kProtoVersionStream) continue;
        if (parallel && version < kProtoVersionParallelStream) continue;
        walrelay::Result<Message> r = Decode(input, DecodeOptions{version, in_stream, parallel});
        if (!r.ok()) {
          if (r.status().code() != walrelay::StatusCode::kDataLoss) std::abort();
          continue;
        }
        RelationCache cache;
        Check(*r, &cache);
        TransactionAssembler assembler;
        (void)assembler.Feed(*r).ok();
      }
    }
  }

  // 2. A sequence of length-prefixed messages through one assembler.
  if (size < 1) return 0;
  const int version = data[0] % 4 + 1;
  const bool parallel = version == 4 && (data[0] & 4) != 0;
  RelationCache cache;
  TransactionAssembler assembler;
  size_t pos = 1;
  while (pos + 2 <= size) {
    const size_t len = (size_t{data[pos]} << 8) | data[pos + 1];
    pos += 2;
    if (len > size - pos) break;
    const std::string_view msg = input.substr(pos, len);
    pos += len;
    walrelay::Result<Message> r =
        Decode(msg, DecodeOptions{version, assembler.in_stream(), parallel});
    if (!r.ok()) continue;
    Check(*r, &cache);
    walrelay::Result<TransactionAssembler::Event> e = assembler.Feed(*r);
    if (!e.ok()) assembler.Reset();
  }
  return 0;
}
