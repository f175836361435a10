// weft/model.hpp — a loaded GGUF model: vocabulary, tokenizer, metadata.
//
// Ownership: Model is a cheap, copyable handle to an immutable, reference-
// counted model; the weights are freed when the last handle (including those
// held by executors) goes away.
// Thread-safety: every const method may be called from any number of threads
// at once; a Model never changes after load().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/adapter.hpp"
#include "weft/tools.hpp"
#include "weft/types.hpp"

#include "weft/export.hpp"

namespace weft {

struct ModelParams {
  // Path of a GGUF file. Required.
  std::string path;
  // Layers to offload to a GPU backend when weft was built with one; -1 = all.
  // Default 0 (CPU only).
  int n_gpu_layers = 0;
  // Map the file instead of reading it into memory. Default true.
  bool use_mmap = true;
  // Load only the vocabulary (tokenize/detokenize, no weights). Default false.
  bool vocab_only = false;
  // Called with progress in [0, 1] on the loading thread; return false to
  // cancel the load (load() then throws Errc::cancelled). Default none.
  std::function<bool(float progress)> on_progress;
  // llama.cpp RPC peers, "host:port" each (ggml-rpc-server, built with weft:
  // docs/DEPLOYING.md), whose devices hold the model's layers, split by
  // their free memory as llama.cpp's --rpc does; this process keeps the
  // input embeddings and samples. Default empty: none. With peers, an
  // n_gpu_layers of 0 means all layers. Each peer is checked (connect and
  // ggml-rpc's HELLO within rpc_timeout_ms) before llama.cpp sees it, since
  // llama.cpp aborts the process on one it cannot reach. Errors: invalid_argument
  // (not host:port, a duplicate, weft built without WEFT_RPC or for
  // Windows, where RPC is not supported), out_of_range
  // (more than 16), io (unreachable, no answer), incompatible (another
  // ggml-rpc protocol version), backend (a model over a peer that failed is
  // still loaded). weft relays each peer's traffic through a loopback relay
  // of its own: a peer that dies, hangs up or stays silent past
  // rpc_reply_timeout_ms later fails the decode it was part of and every
  // later one with Errc::backend on the conversations involved (the process
  // and other models carry on); free the model and load it again once the
  // peer is back (docs/DEPLOYING.md, "RPC").
  std::vector<std::string> rpc;
  // Bound on connecting to and greeting each RPC peer. Default 5000; >= 1.
  int rpc_timeout_ms = 5000;
  // Bound on waiting for any one answer from an RPC peer (an answer that
  // follows a graph computation includes its compute time), and on a peer
  // not reading what is sent to it. Default 60000; >= 1.
  int rpc_reply_timeout_ms = 60000;
  // Relay each peer's traffic (above). false: ggml-rpc talks to the peers
  // directly — one loopback hop less per command (docs/DEPLOYING.md, "What
  // RPC costs"), and a peer that fails aborts the process inside llama.cpp.
  // Default true.
  bool rpc_relay = true;
};

struct TokenizeOptions {
  // Prepend the vocabulary's BOS token. Default false: BOS is never added
  // unless asked for, so text appended mid-conversation stays BOS-free.
  bool add_bos = false;
  // Parse special-token text such as "<s>" into control tokens. Default false:
  // user text containing "<s>" stays plain text.
  bool parse_special = false;
};

// One message of a chat, for Model::apply_chat_template.
struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...
  std::string content;  // plain text
};

struct DetokenizeOptions {
  // Drop BOS/EOS from the output. Default false.
  bool remove_special = false;
  // Render control tokens as their text ("<s>"). Default false.
  bool render_special = false;
};

class WEFT_API Model {
 public:
  // Loads a GGUF model. Throws Error: not_found (no such file),
  // invalid_argument (an empty path, or one naming a directory), corrupt (not
  // a GGUF or unreadable by llama.cpp), cancelled (on_progress returned false).
  static Model load(const ModelParams &params);

  // Loads a LoRA adapter (GGUF, general.type "adapter") or a control vector
  // (llama.cpp's cvec GGUF: direction.<layer> tensors) for this model, once;
  // conversations then choose theirs (Conversation::set_adapters). The
  // kind is read from the file. Throws Error: not_found (no such file),
  // corrupt (not a GGUF, or a direction tensor that is not 1-D f32),
  // invalid_argument (neither kind, or one made for another model: another
  // architecture, width, layer count or tensor shapes — llama.cpp's own
  // check for LoRA). Thread-safe; each call loads the file again.
  Adapter load_adapter(const std::string &path) const;

  // Text -> tokens. Never throws for any UTF-8 or binary input.
  std::vector<Token> tokenize(std::string_view text, const TokenizeOptions &options = {}) const;
  // Tokens -> text. Throws Errc::out_of_range for an id outside the vocabulary.
  std::string detokenize(std::span<const Token> tokens, const DetokenizeOptions &options = {}) const;
  // The text of one token (may be a partial UTF-8 sequence).
  std::string token_piece(Token token, bool render_special = false) const;

  std::int32_t n_vocab() const noexcept;
  std::int32_t n_ctx_train() const noexcept;
  std::int32_t n_embd() const noexcept;
  std::int32_t n_layer() const noexcept;
  std::uint64_t n_params() const noexcept;
  std::uint64_t size_bytes() const noexcept;
  // How the model's memory keeps a conversation, which decides what a cut
  // (rewind, fork of a prefix, prefix reuse) costs: plain attention cuts
  // anywhere exactly; a sliding window (Gemma 3) exactly while llama.cpp has
  // not reused the window's older cells, else the conversation is decoded
  // again; a recurrent or hybrid model (Mamba, LFM2) keeps one state per
  // conversation, so a cut inside it is decoded again from its last
  // checkpoint or the start (ExecutorStats::redecodes). docs/EXECUTOR.md,
  // "Model families", has the table.
  enum class Memory { plain, sliding_window, recurrent, hybrid };
  Memory memory() const noexcept;
  // The attention window of a sliding-window model in tokens; 0 otherwise.
  std::int32_t sliding_window() const noexcept;
  Token bos() const noexcept;  // -1 when the vocabulary has none
  Token eos() const noexcept;  // -1 when the vocabulary has none
  // True for end-of-generation tokens (EOS, EOT, ...).
  bool is_eog(Token token) const noexcept;
  // Throws Errc::out_of_range naming `token` and the vocabulary size.
  void check_token(Token token) const;
  // llama.cpp's one-line description ("llama ?B Q8_0").
  std::string description() const;
  // A metadata value by key ("general.name"); empty when absent.
  std::string meta(std::string_view key) const;
  // The chat template stored in the GGUF (tokenizer.chat_template, a Jinja
  // text); empty when the model has none.
  std::string chat_template() const;
  // How the chat template writes a tool call (tool_format_of() of
  // chat_template(): hermes when it shows none). What GenerateParams::tools
  // samples under by default.
  ToolFormat tool_format() const;
  // Formats `messages` as one prompt with a chat template, ending with the
  // assistant's turn opener when `add_assistant` is set. `tmpl` is the
  // template to use: the name of one llama.cpp knows ("chatml", "llama2",
  // "llama3", "gemma", ...; llama_chat_builtin_templates lists them) or a
  // Jinja text it recognises; empty = the model's own (chat_template()),
  // and when the model has none, "chatml" (the documented fallback, as in
  // llama-server). llama.cpp matches templates by pattern and does not run
  // Jinja: a template it does not recognise is refused with
  // Errc::invalid_argument naming it, as is an empty message list. The
  // result carries no BOS (tokenize with add_bos as the model wants).
  // Thread-safe like every const method; it allocates only its result.
  std::string apply_chat_template(std::span<const ChatMessage> messages, bool add_assistant = true,
                                  std::string_view tmpl = {}) const;
  // 64-bit identity of this model for state files: metadata, tensor shapes
  // and sampled bytes of the file. Equal files give equal fingerprints.
  std::uint64_t fingerprint() const noexcept;
  const std::string &path() const noexcept;

  struct Impl;
  // For weft's own internals; not part of the stable API.
  const std::shared_ptr<const Impl> &impl() const noexcept { return impl_; }

 private:
  explicit Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace weft
