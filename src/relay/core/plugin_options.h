// START_REPLICATION options for each output plugin walrelay reads, shared by the relay's
// session (run/session.cc) and `walrelay record`.
//   pgoutput: proto_version '1', publication_names '<publication>', messages 'true'
//   wal2json: the decoder's kRequiredOptions (format-version 2 with xids, timestamps, LSNs,
//             type OIDs and key flags) and, when tables are given, add-tables with them
//             (wal2json ignores publications; logical messages are always sent).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/sql.h"
#include "decoder/wal2json.h"

namespace walrelay::relay {

using PluginOptions = std::vector<std::pair<std::string, std::string>>;

// wal2json's add-tables wants schema.table with ' ', '\'', ',', '.', '*' escaped by '\'.
inline std::string Wal2JsonTableFilter(const std::vector<std::string>& tables) {
  std::string out;
  for (const std::string& t : tables) {
    // Names follow SQL's rules (base/sql.h): wal2json wants the catalog names.
    auto name = ParseQualifiedName(t);
    if (!name.ok()) continue;  // validated with the configuration
    const std::string schema = name->schema.empty() ? "public" : name->schema;
    const std::string& table = name->name;
    auto escape = [&out](const std::string& s) {
      for (char ch : s) {
        if (ch == ' ' || ch == '\'' || ch == ',' || ch == '.' || ch == '*') out += '\\';
        out += ch;
      }
    };
    if (!out.empty()) out += ',';
    escape(schema);
    out += '.';
    escape(table);
  }
  return out;
}

inline PluginOptions StartReplicationOptions(std::string_view plugin, std::string_view publication,
                                             const std::vector<std::string>& tables = {}) {
  PluginOptions options;
  if (plugin == "wal2json") {
    for (const auto& [k, v] : wal2json::kRequiredOptions) options.emplace_back(k, v);
    if (!tables.empty()) options.emplace_back("add-tables", Wal2JsonTableFilter(tables));
    return options;
  }
  options.emplace_back("proto_version", "1");
  options.emplace_back("publication_names", std::string(publication));
  options.emplace_back("messages", "true");
  return options;
}

}  // namespace walrelay::relay
