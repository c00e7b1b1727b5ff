#include "base/json.h"

#include <gtest/gtest.h>
#include <simdjson.h>

namespace walrelay {
namespace {

TEST(JsonQuoteTest, EscapesAndKeepsUtf8) {
  EXPECT_EQ(JsonQuote("a\"b\\c\n\t\x01"), "\"a\\\"b\\\\c\\n\\t\\u0001\"");
  EXPECT_EQ(JsonQuote("Ärger €𝄞"), "\"Ärger €𝄞\"");
}

// Bytes that are not UTF-8 never reach the output raw: a JSON log line stays valid JSON
// (issue 13), whatever a message carried.
TEST(JsonQuoteTest, InvalidUtf8BecomesTheReplacementCharacter) {
  EXPECT_EQ(JsonQuote("a\xff" "b"), "\"a\\ufffdb\"");
  EXPECT_EQ(JsonQuote("\xc3"), "\"\\ufffd\"");                // truncated sequence
  EXPECT_EQ(JsonQuote("\xc0\xaf"), "\"\\ufffd\\ufffd\"");     // overlong '/'
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // surrogate
  EXPECT_EQ(JsonQuote("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // > U+10FFFF
  for (std::string_view bytes : {std::string_view("\x80\xfe\xc3(\xe2\x28\xa1", 7),
                                 std::string_view("ok\xe2\x82", 4)}) {
    const std::string quoted = JsonQuote(bytes);
    EXPECT_TRUE(simdjson::validate_utf8(quoted.data(), quoted.size())) << quoted;
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    EXPECT_EQ(parser.parse(quoted).get(doc), simdjson::SUCCESS) << quoted;
  }
}

}  // namespace
}  // namespace walrelay
