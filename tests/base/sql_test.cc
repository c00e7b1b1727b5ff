// SQL names and literals (base/sql.h): the one rule for names everywhere in walrelay.
#include "base/sql.h"

#include <gtest/gtest.h>

namespace walrelay {
namespace {

QualifiedName Parse(std::string_view text) {
  auto r = ParseQualifiedName(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? *r : QualifiedName{};
}

TEST(SqlNameTest, UnquotedFoldsQuotedKeepsCase) {
  EXPECT_EQ(Parse("public.Outbox"), (QualifiedName{"public", "outbox"}));
  EXPECT_EQ(Parse("PUBLIC.outbox"), (QualifiedName{"public", "outbox"}));
  EXPECT_EQ(Parse("public.\"Outbox\""), (QualifiedName{"public", "Outbox"}));
  EXPECT_EQ(Parse("\"App\".\"Out\"\"box\""), (QualifiedName{"App", "Out\"box"}));
  EXPECT_EQ(Parse("outbox"), (QualifiedName{"", "outbox"}));
  // A dot inside quotes belongs to the name.
  EXPECT_EQ(Parse("\"my.schema\".t"), (QualifiedName{"my.schema", "t"}));
  EXPECT_EQ(Parse("\"a.b\""), (QualifiedName{"", "a.b"}));
  // Only ASCII letters fold, as in PostgreSQL's scanner with UTF-8.
  EXPECT_EQ(Parse("public.Ärger"), (QualifiedName{"public", "Ärger"}));
}

TEST(SqlNameTest, RejectsWhatSqlRejects) {
  for (std::string_view bad : {"", ".", "a.", ".a", "a.b.c", "\"open", "\"\".t", "\"a\"b.t",
                               "a b.t", "1abc.t", "x;drop.t"}) {
    auto r = ParseQualifiedName(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' parsed";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(SqlNameTest, QuotingRoundTrips) {
  for (std::string_view text :
       {"public.outbox", "public.\"Outbox\"", "\"my.schema\".\"t\"\"q\"", "\"App\".events"}) {
    const QualifiedName n = Parse(text);
    EXPECT_EQ(Parse(n.Quoted()), n) << text;
    EXPECT_EQ(Parse(n.Display()), n) << text;
  }
  EXPECT_EQ(QualifiedName({"public", "outbox"}).Display(), "public.outbox");
  EXPECT_EQ(QualifiedName({"public", "Outbox"}).Display(), "public.\"Outbox\"");
  EXPECT_EQ(QuoteQualifiedName("public.Outbox"), "\"public\".\"outbox\"");
  EXPECT_EQ(QuoteLiteral("it's"), "'it''s'");
  EXPECT_EQ(QuoteIdentifier("we\"ird"), "\"we\"\"ird\"");
}

// bytea's two text forms, as the server writes them (bytea_output = hex | escape).
TEST(SqlByteaTest, DecodesBothTextForms) {
  std::string out;
  ASSERT_TRUE(DecodeByteaText("\\x00ff10Ab", &out).ok());
  EXPECT_EQ(out, std::string("\x00\xff\x10\xab", 4));
  ASSERT_TRUE(DecodeByteaText("\\x", &out).ok());
  EXPECT_EQ(out, "");
  // Escape form: SELECT '\x00ff5c41'::bytea under bytea_output = escape is \000\377\\A.
  ASSERT_TRUE(DecodeByteaText("\\000\\377\\\\A", &out).ok());
  EXPECT_EQ(out, std::string("\x00\xff\\A", 4));
  for (std::string_view bad : {"\\x0", "\\xzz", "\\9", "a\\", "\\400"}) {
    Status st = DecodeByteaText(bad, &out);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace walrelay
