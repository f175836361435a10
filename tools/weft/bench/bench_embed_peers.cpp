// weft bench embed's peers (bench_embed.hpp): llama-embedding as a process,
// llama-server through bench_server.hpp's ServerProcess.
#include "bench_embed.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include <unistd.h>

#include "bench_common.hpp"
#include "bench_server.hpp"
#include "weft/error.hpp"

#if __has_include(<httplib.h>)
#include <httplib.h>
#define WEFT_BENCH_EMBED_HTTP 1
#endif

namespace weft_cli::bench_embed {

namespace {

std::string quote(const std::string &s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

LlamaEmbedding::LlamaEmbedding(PeerParams p, const std::vector<std::string> &texts) : p_(std::move(p)) {
  if (::access(p_.binary.c_str(), X_OK) != 0) {
    throw weft::Error(weft::Errc::not_found, fmt::format("{} is not built (cmake --build <dir> --target llama-tools)",
                                                         p_.binary));
  }
  const auto dir = std::filesystem::temp_directory_path();
  const auto tag = std::to_string(::getpid());
  texts_file_ = (dir / ("weft-bench-embed-texts-" + tag + ".txt")).string();
  one_file_ = (dir / ("weft-bench-embed-one-" + tag + ".txt")).string();
  log_ = (dir / ("weft-bench-embed-llama-embedding-" + tag + ".log")).string();
  std::ofstream out(texts_file_);
  for (std::size_t i = 0; i < texts.size(); ++i) out << texts[i] << (i + 1 < texts.size() ? "\n" : "");
  std::ofstream(one_file_) << "hello";
}

LlamaEmbedding::~LlamaEmbedding() {
  std::error_code ec;
  std::filesystem::remove(texts_file_, ec);
  std::filesystem::remove(one_file_, ec);
}

double LlamaEmbedding::run(const std::string &file) const {
  // The texts one a line (its default separator), mean pooling, L2 norm as
  // weft's embedder; -c is the cells (and, non-causal, the batch) of a decode.
  std::string cmd = fmt::format(
      "{} -m {} -f {} -c {} -b {} -ub {} --pooling mean --embd-normalize 2 --embd-output-format array -t {} -tb {}{} "
      ">{} 2>&1",
      quote(p_.binary), quote(p_.model), quote(file), p_.n_ctx, p_.n_ctx, p_.n_ctx, p_.threads, p_.threads,
      bench::cpu_has_amx() ? " --no-repack" : "", quote(log_));
  const auto t0 = bench::now_ns();
  const int rc = std::system(cmd.c_str());
  const double s = bench::seconds_since(t0);
  if (rc != 0) throw weft::Error(weft::Errc::backend, fmt::format("llama-embedding failed ({}); see {}", rc, log_));
  return s;
}

double LlamaEmbedding::run_all() const { return run(texts_file_); }
double LlamaEmbedding::run_startup() const { return run(one_file_); }

#ifdef WEFT_BENCH_EMBED_HTTP
struct EmbeddingServer::Impl {
  std::unique_ptr<bench::ServerProcess> server;
};

EmbeddingServer::EmbeddingServer(PeerParams p) : impl_(new Impl) {
  log_ = fmt::format("/tmp/weft-bench-embed-server-{}.log", ::getpid());
  try {
    impl_->server = std::make_unique<bench::ServerProcess>(
        bench::ServerOptions{.kind = bench::ServerKind::llama_server,
                             .binary = p.binary,
                             .model = p.model,
                             .log_path = log_,
                             .ctx = p.n_ctx * p.n_seq,
                             .batch = p.n_ctx,
                             .ubatch = p.n_ctx,
                             .slots = p.n_seq,
                             .threads = p.threads,
                             .extra_args = {"--embeddings", "--pooling", "mean"}});
  } catch (...) {
    delete impl_;
    throw;
  }
}

EmbeddingServer::~EmbeddingServer() { delete impl_; }
bool EmbeddingServer::available() { return true; }

double EmbeddingServer::run(const std::vector<std::string> &texts) const {
  httplib::Client cli("127.0.0.1", impl_->server->port());
  cli.set_read_timeout(600, 0);
  const nlohmann::json body = {{"input", texts}, {"encoding_format", "float"}};
  const auto t0 = bench::now_ns();
  auto res = cli.Post("/v1/embeddings", body.dump(), "application/json");
  const double s = bench::seconds_since(t0);
  if (!res || res->status != 200) {
    throw weft::Error(weft::Errc::backend,
                      res ? fmt::format("llama-server: HTTP {}: {}", res->status, res->body.substr(0, 200))
                          : std::string("llama-server: no response"));
  }
  const auto j = nlohmann::json::parse(res->body);
  if (!j.contains("data") || j["data"].size() != texts.size()) {
    throw weft::Error(weft::Errc::backend, fmt::format("llama-server: {} vectors for {} texts",
                                                       j.contains("data") ? j["data"].size() : 0, texts.size()));
  }
  return s;
}
#else
struct EmbeddingServer::Impl {};
EmbeddingServer::EmbeddingServer(PeerParams) {
  throw weft::Error(weft::Errc::invalid_argument, "this weft was built without an HTTP client");
}
EmbeddingServer::~EmbeddingServer() = default;
bool EmbeddingServer::available() { return false; }
double EmbeddingServer::run(const std::vector<std::string> &) const { return 0; }
#endif

}  // namespace weft_cli::bench_embed
