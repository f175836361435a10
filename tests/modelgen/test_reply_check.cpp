// The reply checker (weft/reply_check.hpp): corpus text fits, and each kind
// of wrong reply is rejected with the reason that names it.
#include <gtest/gtest.h>

#include "common.hpp"
#include "weft/reply_check.hpp"

using weft_test::throws_weft;

namespace {

// One dialogue with the blacksmith Brenna: the player's lines and Brenna's
// replies, alternating; returns the verdict on the last reply.
weft::ReplyVerdict last_verdict(const std::vector<std::pair<std::string, std::string>> &exchanges,
                                const std::string &speaker = "Brenna") {
  std::string t = "Brenna is the blacksmith of Eldermoor.\n";
  for (std::size_t i = 0; i < exchanges.size(); ++i) {
    t += "Player: " + exchanges[i].first + "\n";
    t += (i + 1 == exchanges.size() ? speaker : std::string("Brenna")) + ": " + exchanges[i].second + "\n";
  }
  const auto r = weft::check_npc_replies(t);
  EXPECT_EQ(r.dialogues, 1u);
  EXPECT_EQ(r.verdicts.size(), exchanges.size());
  return r.verdicts.back();
}

// True when some reason contains `what`.
testing::AssertionResult rejected_for(const weft::ReplyVerdict &v, const std::string &what) {
  if (v.fits) return testing::AssertionFailure() << "\"" << v.reply << "\" fits";
  for (const auto &r : v.reasons) {
    if (r.find(what) != std::string::npos) return testing::AssertionSuccess();
  }
  auto f = testing::AssertionFailure() << "\"" << v.reply << "\" rejected, but not for \"" << what << "\":";
  for (const auto &r : v.reasons) f << " [" << r << "]";
  return f;
}

}  // namespace

TEST(ReplyCheck, CorpusTextOfAnotherSeedFitsEntirely) {
  for (std::uint64_t seed : {77u, 4242u}) {
    const auto r = weft::check_npc_replies(weft::make_npc_corpus({.seed = seed, .target_bytes = 150'000}));
    EXPECT_GT(r.dialogues, 200u);
    EXPECT_GT(r.replies, 5 * r.dialogues);
    EXPECT_EQ(r.unjudged, 0u);
    for (const auto &v : r.verdicts) {
      EXPECT_TRUE(v.fits) << "line " << v.line << ": " << v.player << " -> " << v.reply << ": "
                          << (v.reasons.empty() ? "" : v.reasons.front());
      if (!v.fits) break;
    }
    EXPECT_DOUBLE_EQ(r.share(), 1.0);
  }
}

TEST(ReplyCheck, RightRepliesFit) {
  EXPECT_TRUE(last_verdict({{"Good morning, Brenna.", "Hello, friend. I am Brenna, the blacksmith of this town."}}).fits);
  EXPECT_TRUE(last_verdict({{"What do you have for sale?", "I can sell you an iron sword for 25 gold coins."},
                            {"I will take it.", "That will be 25 gold coins. Thank you, friend."}})
                  .fits);
  EXPECT_TRUE(last_verdict({{"It is a wet day.", "Aye, wet indeed. The forge is busy on wet days."}}).fits);
}

TEST(ReplyCheck, WrongGoodsAreRejected) {
  EXPECT_TRUE(rejected_for(last_verdict({{"What do you have for sale?", "I can sell you a bow for 20 gold coins."}}),
                           "does not sell a bow"));
  EXPECT_TRUE(rejected_for(last_verdict({{"How much is a dagger?", "A helmet costs 12 gold coins."}}),
                           "asked about the dagger"));
}

TEST(ReplyCheck, WrongPricesAreRejected) {
  EXPECT_TRUE(rejected_for(last_verdict({{"What do you have for sale?", "I can sell you a dagger for 90 gold coins."}}),
                           "outside the dagger's 6 .. 20"));
  EXPECT_TRUE(rejected_for(last_verdict({{"What do you have for sale?", "I can sell you a dagger for 12 gold coins."},
                                         {"I will take it.", "That will be 15 gold coins. Thank you, friend."}}),
                           "charges 15 for what was quoted at 12"));
  EXPECT_TRUE(rejected_for(last_verdict({{"What do you have for sale?", "I can sell you a dagger for 12 gold coins."},
                                         {"How much is a dagger?", "A dagger costs 14 gold coins."}}),
                           "quoted at 12 before, now 14"));
  // The corpus accepts an offer of at least three quarters of the price.
  EXPECT_TRUE(rejected_for(last_verdict({{"What do you have for sale?", "I can sell you a dagger for 20 gold coins."},
                                         {"Would you take 5 gold coins?", "Fine, 5 gold coins it is. You drive a hard "
                                                                          "bargain."}}),
                           "accepts an offer of 5 for a price of 20"));
  EXPECT_TRUE(last_verdict({{"What do you have for sale?", "I can sell you a dagger for 20 gold coins."},
                            {"Would you take 5 gold coins?", "No, 5 gold coins is too little. The price is 20."}})
                  .fits);
}

TEST(ReplyCheck, WrongNameRoleOrPlaceIsRejected) {
  EXPECT_TRUE(rejected_for(last_verdict({{"Hello, Brenna.", "Hello, friend. I am Mara, the blacksmith of this town."}}),
                           "names itself Mara"));
  EXPECT_TRUE(rejected_for(last_verdict({{"Hello, Brenna.", "Hello, friend. I am Brenna, the baker of this town."}}),
                           "claims to be the baker"));
  EXPECT_TRUE(rejected_for(last_verdict({{"Hello, Brenna.", "Welcome to my inn, friend."}}), "speaks of the inn"));
  EXPECT_TRUE(rejected_for(last_verdict({{"How is business?", "I light the ovens before the sun is up. Business is "
                                                              "good this season."}}),
                           "not the blacksmith's work"));
  EXPECT_TRUE(rejected_for(last_verdict({{"Hello, Brenna.", "Welcome to my forge, friend."}}, "Mara"), "spoken by Mara"));
}

TEST(ReplyCheck, WrongReplyTypeIsRejected) {
  EXPECT_TRUE(rejected_for(last_verdict({{"What do you have for sale?", "Farewell, friend. Safe travels."}}),
                           "a farewell does not answer"));
  EXPECT_TRUE(rejected_for(last_verdict({{"Is there any work for me?", "They say a wolf was seen near the old mill "
                                                                       "last night."}}),
                           "a rumour does not answer"));
  EXPECT_TRUE(rejected_for(last_verdict({{"What do you have for sale?", "I am the stone quarry."}}),
                           "not a sentence of the corpus grammar"));
  EXPECT_TRUE(rejected_for(last_verdict({{"What do you have for sale?", ""}}), "empty reply"));
  // Cut off by the token limit: not a whole sentence.
  EXPECT_TRUE(rejected_for(last_verdict({{"What do you have for sale?", "I can sell you a dagger for"}}),
                           "not a sentence"));
}

TEST(ReplyCheck, PlayerLinesOutsideTheGrammarAreNotJudged) {
  const auto r = weft::check_npc_replies("Brenna is the blacksmith of Eldermoor.\nPlayer: Nice hat.\nBrenna: Thanks.\n");
  EXPECT_EQ(r.replies, 0u);
  EXPECT_EQ(r.unjudged, 1u);
  ASSERT_EQ(r.verdicts.size(), 1u);
  EXPECT_FALSE(r.verdicts[0].judged);
  EXPECT_DOUBLE_EQ(r.share(), 0.0);
}

TEST(ReplyCheck, MalformedTranscriptsAndMissingFilesAreTypedErrors) {
  EXPECT_TRUE(throws_weft([] { weft::check_npc_replies("Hello there.\n"); }, weft::Errc::corrupt, "line 1"));
  EXPECT_TRUE(throws_weft([] { weft::check_npc_replies("Brenna is the jester of Eldermoor.\n"); }, weft::Errc::corrupt,
                          "unknown role \"jester\""));
  EXPECT_TRUE(throws_weft([] { weft::check_npc_replies("Brenna is the baker of Eldermoor.\nno colon here\n"); },
                          weft::Errc::corrupt, "line 2"));
  EXPECT_TRUE(throws_weft([] { weft::check_npc_replies("Brenna is the baker of Eldermoor.\nBrenna: Hello.\n"); },
                          weft::Errc::corrupt, "no player line"));
  const auto dir = weft_test::temp_dir("reply-check");
  EXPECT_TRUE(throws_weft([&] { weft::check_npc_replies_file((dir / "none.txt").string()); }, weft::Errc::not_found,
                          "none.txt"));
  weft_test::write_file(dir / "t.txt", std::string_view("Brenna is the baker of Eldermoor.\n\n"
                                                        "Player: Hello, Brenna.\n"));
  EXPECT_TRUE(throws_weft([&] { weft::check_npc_replies_file((dir / "t.txt").string()); }, weft::Errc::corrupt,
                          "line 3"));
}

TEST(ReplyCheck, ReplyGrammarIsPerRoleAndRefusesUnknownRoles) {
  const std::string g = weft::npc_reply_grammar("Brenna", "blacksmith");
  EXPECT_NE(g.find("root ::="), std::string::npos);
  EXPECT_NE(g.find("\"iron sword\""), std::string::npos);
  EXPECT_EQ(g.find("\"bow\""), std::string::npos);  // the hunter's, not the blacksmith's
  EXPECT_NE(g.find("\"Brenna\""), std::string::npos);
  EXPECT_TRUE(throws_weft([] { weft::npc_reply_grammar("Brenna", "jester"); }, weft::Errc::invalid_argument, "jester"));
}

// Narrowed to the player's line: only the lines of the kind the checker asks
// of a reply to it; an unknown player line narrows nothing.
TEST(ReplyCheck, ReplyGrammarForAPlayerLineKeepsTheLinesThatAnswerIt) {
  const std::string all = weft::npc_reply_grammar("Tobias", "merchant");
  const std::string business = weft::npc_reply_grammar("Tobias", "merchant", "How is business?");
  const std::string greeting = weft::npc_reply_grammar("Tobias", "merchant", "Hello, Tobias.");
  for (const auto *g : {&all, &business}) EXPECT_NE(g->find("Business is"), std::string::npos);
  EXPECT_NE(all.find("come back when your purse is heavier"), std::string::npos);
  EXPECT_EQ(business.find("come back when your purse is heavier"), std::string::npos);  // answers a haggle, not this
  EXPECT_EQ(greeting.find("Business is"), std::string::npos);
  EXPECT_LT(business.size(), all.size());
  EXPECT_LT(greeting.size(), all.size());
  EXPECT_EQ(weft::npc_reply_grammar("Tobias", "merchant", "Sing me a song about dragons."), all);
  EXPECT_EQ(weft::npc_reply_grammar("Tobias", "merchant", ""), all);
  EXPECT_TRUE(throws_weft([] { weft::npc_reply_grammar("Tobias", "jester", "How is business?"); },
                          weft::Errc::invalid_argument, "jester"));
  // Each is a transcript the checker passes when its reply is one of those lines.
  const auto r = weft::check_npc_replies(
      "Tobias is the merchant of Eldermoor.\nPlayer: How is business?\n"
      "Tobias: I buy cheap in the city and sell fair here. Business is good this season.\n");
  EXPECT_DOUBLE_EQ(r.share(), 1.0);
}
