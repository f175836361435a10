// TextStream: streamed text never splits a UTF-8 character, never releases text
// that a stop string may take back, and stops exactly at the stop string.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "core/text_stream.hpp"

using weft::detail::TextStream;
using weft_test::throws_weft;

namespace {

// Feeds `pieces`, checking after each push that released text is never taken back.
std::string feed(TextStream &ts, const std::vector<std::string> &pieces) {
  std::string out;
  for (const auto &p : pieces) {
    out += ts.push(p);
    EXPECT_EQ(ts.text().compare(0, out.size(), out), 0) << "released '" << out << "' vs text '" << ts.text() << "'";
  }
  return out;
}

std::vector<std::string> random_split(const std::string &s, std::mt19937 &rng) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < s.size();) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 4)(rng);
    out.push_back(s.substr(at, n));
    at += n;
  }
  return out;
}

}  // namespace

TEST(TextStream, StopStringSplitAcrossPiecesStopsAndCuts) {
  TextStream ts({"<|end|>"});
  EXPECT_EQ(ts.push("Hello wor"), "Hello wor");
  EXPECT_EQ(ts.push("ld<|e"), "ld");
  EXPECT_EQ(ts.push("nd"), "");
  EXPECT_EQ(ts.push("|> tail"), "");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.text(), "Hello world");

  const std::string before = "The smith said: hello, traveller #", stop = "<|end|>", after = " then more";
  for (unsigned seed = 1; seed <= 30; ++seed) {
    std::mt19937 rng(seed);
    TextStream s({"##", stop});
    EXPECT_EQ(feed(s, random_split(before + stop + after, rng)), before) << "seed " << seed;
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(s.matched_stop(), stop);
    EXPECT_EQ(s.text(), before);
    // Nothing is released or recorded after the stop.
    EXPECT_EQ(s.push("more"), "");
    EXPECT_EQ(s.flush(), "");
    EXPECT_EQ(s.text(), before);
  }
}

TEST(TextStream, MultiByteCharactersAreNeverReleasedHalf) {
  const std::string text = "caf\u00e9 \u65e5\u672c \U0001F600!";  // 2-, 3- and 4-byte characters
  for (unsigned seed = 1; seed <= 30; ++seed) {
    std::mt19937 rng(seed);
    TextStream ts({"\u672c\u6587"});  // shares a first character with the text, never completes
    std::string out;
    for (const auto &p : random_split(text, rng)) {
      out += ts.push(p);
      ASSERT_EQ(text.compare(0, out.size(), out), 0);
      ASSERT_TRUE(out.size() == text.size() || (static_cast<unsigned char>(text[out.size()]) & 0xC0) != 0x80)
          << "seed " << seed << ": released up to byte " << out.size() << ", inside a character";
    }
    EXPECT_EQ(out + ts.flush(), text);
  }
  TextStream ts;
  EXPECT_EQ(ts.push("\xF0\x9F"), "");
  EXPECT_EQ(ts.push("\x98"), "");
  EXPECT_EQ(ts.push("\x80 x"), "\U0001F600 x");
}

TEST(TextStream, TextThatOnlyBeginsLikeAStopIsReleased) {
  TextStream ts({"STOP"});
  EXPECT_EQ(ts.push("go ST"), "go ");
  EXPECT_EQ(ts.push("O"), "");
  EXPECT_EQ(ts.push("X"), "STOX");
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.push("STSTO"), "ST");  // "STO" may still become "STOP"
  EXPECT_EQ(ts.push("P!"), "");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.text(), "go STOXST");
}

TEST(TextStream, FlushReleasesHeldText) {
  TextStream ts({"</s>"});
  EXPECT_EQ(ts.push("abc </"), "abc ");
  EXPECT_EQ(ts.flush(), "</");
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.text(), "abc </");
  EXPECT_EQ(ts.flush(), "");
  TextStream u;
  EXPECT_EQ(u.push("x\xE6\x97"), "x");
  EXPECT_EQ(u.flush(), "\xE6\x97");  // an incomplete tail goes out as-is at the end
  EXPECT_EQ(u.push("a\x80"), "a\x80");  // a stray continuation byte cannot complete: not held
}

TEST(TextStream, EarliestStopWinsAndEmptyStopsAreRefused) {
  for (const auto &stops : {std::vector<std::string>{"world", "lo w"}, std::vector<std::string>{"lo w", "world"}}) {
    TextStream ts(stops);
    EXPECT_EQ(ts.push("hello world"), "hel");
    EXPECT_EQ(ts.matched_stop(), "lo w");
  }
  EXPECT_TRUE(throws_weft([] { TextStream({"a", ""}); }, weft::Errc::invalid_argument, "stop string #1"));
}
