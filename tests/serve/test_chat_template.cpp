// Model::chat_template / apply_chat_template: ChatML as its spec writes it,
// the fallback for a model without a template, named templates, refusals.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weft/weft.hpp"

namespace {

const std::string kTiny = std::string(WEFT_TEST_MODELS) + "/tiny.gguf";

weft::Model tiny() { return weft::Model::load({.path = kTiny, .vocab_only = true}); }

const std::vector<weft::ChatMessage> kChat = {{"system", "Be brief."}, {"user", "Hello"}};

TEST(ChatTemplate, GeneratedModelsHaveNone) { EXPECT_EQ(tiny().chat_template(), ""); }

TEST(ChatTemplate, ChatMLAsSpecified) {
  // ChatML: <|im_start|>{role}\n{content}<|im_end|>\n per message, then the
  // assistant's opener.
  const std::string want =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(tiny().apply_chat_template(kChat, true, "chatml"), want);
  EXPECT_EQ(tiny().apply_chat_template(kChat, false, "chatml"),
            want.substr(0, want.size() - std::string("<|im_start|>assistant\n").size()));
}

TEST(ChatTemplate, FallbackWithoutATemplateIsChatML) {
  const auto m = tiny();
  EXPECT_EQ(m.apply_chat_template(kChat), m.apply_chat_template(kChat, true, "chatml"));
}

TEST(ChatTemplate, NamedTemplatesDiffer) {
  const auto m = tiny();
  const auto llama3 = m.apply_chat_template(kChat, true, "llama3");
  EXPECT_NE(llama3.find("<|start_header_id|>user<|end_header_id|>"), std::string::npos) << llama3;
  EXPECT_NE(llama3.find("Hello"), std::string::npos);
  EXPECT_NE(llama3, m.apply_chat_template(kChat, true, "chatml"));
}

TEST(ChatTemplate, RefusesUnknownTemplatesAndEmptyChats) {
  const auto m = tiny();
  try {
    m.apply_chat_template(kChat, true, "no-such-template-xyz");
    FAIL() << "an unknown template was accepted";
  } catch (const weft::Error &e) {
    EXPECT_EQ(e.code(), weft::Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("no-such-template-xyz"), std::string::npos) << e.what();
  }
  try {
    m.apply_chat_template({}, true, "chatml");
    FAIL() << "an empty chat was accepted";
  } catch (const weft::Error &e) {
    EXPECT_EQ(e.code(), weft::Errc::invalid_argument);
  }
}

}  // namespace
