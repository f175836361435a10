// weft serve: images and audio in requests (docs/SERVE.md, "Images and
// audio"). Chat messages' content parts become the chat text with
// weft::media_marker() where each image or clip was, plus the media in
// order; a prompt is then queued piece by piece into a conversation, as
// Conversation::prompt(text, images) splits text at its markers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "serve/api_error.hpp"
#include "weft/conversation.hpp"
#include "weft/model.hpp"
#include "weft/projector.hpp"

namespace weft_cli::serve {

// What a request may carry (--max-media, --max-media-bytes,
// --allow-remote-media).
struct MediaLimits {
  std::uint32_t max_parts = 8;            // images and clips in one request
  std::size_t max_bytes = 4u << 20;       // one decoded image file or WAV file
  bool allow_remote = false;              // fetch http:// image URLs (never https://)
  int fetch_timeout_s = 10;               // connect and read, each, for a remote image
};

// One image (Projector::prepare) or one clip of audio (mono samples at the
// projector's audio_sample_rate()).
struct PromptMedia {
  weft::PreparedImage image;
  std::vector<float> audio;  // used when `image` is empty
};

// A prompt ready to queue: text tokens, images and clips, in order.
struct PromptInput {
  struct Part {
    std::vector<weft::Token> tokens;  // a piece of text, tokenized; else
    PromptMedia media;                // an image or a clip
  };
  std::vector<Part> parts;

  static PromptInput of_tokens(std::vector<weft::Token> tokens);
  bool empty() const { return parts.empty(); }
  bool has_media() const;
  // Positions known before queueing: text tokens and images' n_tokens(). A
  // clip's positions, and the text a projector wraps media in, are counted
  // when queued (the conversation's n_tokens() grows by all of them).
  std::uint32_t known_positions() const;
};

// `text` with a media marker where each of `media` goes, split at the
// markers and each piece tokenized alone (BOS, when asked, before the
// first), as Conversation::prompt(text, images) does. Throws 400 when the
// markers and media differ in number (`param` named).
PromptInput make_prompt(const weft::Model &model, std::string_view text, std::vector<PromptMedia> media,
                        const weft::PromptOptions &options, const std::string &param);

// Queues the parts in order: tokens with Conversation::prompt, images with
// prompt_image, clips with prompt_audio. Throws what those throw; a failure
// part way leaves the earlier parts queued (callers use fresh conversations
// for prompts with media, or one part).
void queue_prompt(weft::Conversation &conv, const PromptInput &prompt);

// One content part that is not text: {"type": "image_url", "image_url":
// {"url": data:image/...;base64,... or http://...}} or {"type":
// "input_audio", "input_audio": {"data": base64 WAV, "format": "wav"}}.
// `param` names it (messages[i].content[j]) in every 400.
PromptMedia read_media_part(const Json &part, const weft::Projector &projector, const MediaLimits &limits,
                            const std::string &param);

// Content parts (text, image_url, input_audio) appended to `text`, each
// image or clip as media_marker() with its media appended to `media`.
// `where` names the array in every 400 ("messages[2].content").
void append_parts(const Json &parts, const std::string &where, const weft::Projector &projector,
                  const MediaLimits &limits, std::string &text, std::vector<PromptMedia> &media);
// How many of `parts` are images or clips (counted before any is decoded).
std::size_t count_media_parts(const Json &parts);
// 400 too_many_media when `n` is over limits.max_parts, naming `param`.
void check_media_count(std::size_t n, const MediaLimits &limits, const std::string &param);

// A chat request's messages: content a string or an array of parts (text,
// image_url, input_audio); each media part becomes media_marker() in its
// message's content. More than limits.max_parts media is 400 too_many_media.
struct ChatInput {
  std::vector<weft::ChatMessage> messages;
  std::vector<PromptMedia> media;
};
ChatInput parse_chat(const Json &body, const weft::Projector &projector, const MediaLimits &limits);

// A chat as a prompt: templated (Model::apply_chat_template keeps the
// markers verbatim; checked), parse_special, BOS first when the vocabulary
// has one.
PromptInput chat_prompt(const weft::Model &model, ChatInput chat, const std::string &chat_template,
                        bool add_assistant);

// A conversation's tokens as text, media_marker() for each media span (its
// image_token(id) positions), the rest detokenized without BOS/EOS.
std::string text_with_markers(const weft::Model &model, const std::vector<weft::Token> &tokens);

}  // namespace weft_cli::serve
