// weft bench embed's peers: llama.cpp's own llama-embedding (one process per
// run, the texts as one batch) and llama-server --embeddings (POST
// /v1/embeddings), on the same texts as weft's embedder.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace weft_cli::bench_embed {

struct PeerParams {
  std::string model;      // the embedding model
  std::string binary;     // llama-embedding or llama-server
  unsigned n_ctx = 512;   // cells (and batch) of one decode, as weft's embedder
  unsigned n_seq = 16;    // llama-server's slots
  int threads = 2;
};

// One timed run of the peer. Throws weft::Error (backend) when it fails.
class LlamaEmbedding {
 public:
  LlamaEmbedding(PeerParams p, const std::vector<std::string> &texts);
  ~LlamaEmbedding();
  LlamaEmbedding(const LlamaEmbedding &) = delete;
  LlamaEmbedding &operator=(const LlamaEmbedding &) = delete;
  // Wall seconds of one process embedding every text (load included).
  double run_all() const;
  // Wall seconds of one process embedding a single one-word text: its
  // start-up (load, warm-up, exit), to read run_all() against.
  double run_startup() const;

 private:
  double run(const std::string &file) const;
  PeerParams p_;
  std::string texts_file_, one_file_, log_;
};

// llama-server --embeddings --pooling mean, started once; each run POSTs
// every text in one /v1/embeddings request and checks that as many vectors
// came back. Only with an HTTP client (cpp-httplib); else available() false.
class EmbeddingServer {
 public:
  EmbeddingServer(PeerParams p);
  ~EmbeddingServer();
  EmbeddingServer(const EmbeddingServer &) = delete;
  EmbeddingServer &operator=(const EmbeddingServer &) = delete;
  static bool available();
  double run(const std::vector<std::string> &texts) const;
  std::string log_path() const { return log_; }

 private:
  struct Impl;
  Impl *impl_ = nullptr;
  std::string log_;
};

}  // namespace weft_cli::bench_embed
