// weft bench rpc: one model decoded locally, then split over ggml-rpc-server
// peers (ModelParams::rpc) started here — prompt and generation speed side
// by side, and the bytes each token costs on the network, counted by a
// forwarding proxy in front of every peer.
#include <fmt/format.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>

#include "bench_commands.hpp"
#include "bench_common.hpp"
#include "bench_server.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_rpc_cmd {
namespace {

struct Opts {
  std::string model, json, server_binary;
  unsigned peers = 2, conversations = 8, pp = 128, tg = 32, reps = 3;
  int threads = 1;
  bool quiet = false;
};

// A ggml-rpc-server child on a free port; killed with the bench (PDEATHSIG)
// or when this goes away.
class Peer {
 public:
  Peer(const std::string &binary, int threads) {
    for (int attempt = 0; attempt < 5 && pid_ < 0; ++attempt) {
      port_ = bench::free_loopback_port();
      const std::string port = std::to_string(port_), t = std::to_string(threads);
      const pid_t p = ::fork();
      if (p < 0) throw weft::Error(weft::Errc::backend, "fork failed");
      if (p == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        ::dup2(null, 2);
        ::execl(binary.c_str(), binary.c_str(), "-H", "127.0.0.1", "-p", port.c_str(), "-t", t.c_str(), nullptr);
        ::_exit(127);
      }
      // Ready once it accepts a connection (bounded: 10 s).
      for (int i = 0; i < 200; ++i) {
        if (::waitpid(p, nullptr, WNOHANG) == p) break;
        if (connects()) {
          pid_ = p;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (pid_ < 0) stop(p);
    }
    if (pid_ < 0) throw weft::Error(weft::Errc::backend, fmt::format("{} did not start (is it built?)", binary));
  }
  ~Peer() { stop(pid_); }
  int port() const { return port_; }

 private:
  bool connects() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port_));
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0;
    ::close(fd);
    return ok;
  }
  static void stop(pid_t p) {
    if (p <= 0) return;
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  pid_t pid_ = -1;
  int port_ = 0;
};

// Forwards connections from its own port to `target`, counting bytes.
class CountingProxy {
 public:
  explicit CountingProxy(int target) : target_(target) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = loopback(0);
    socklen_t len = sizeof(a);
    if (::bind(listen_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0 || ::listen(listen_, 8) != 0 ||
        ::pipe2(wake_, O_CLOEXEC) != 0) {
      throw weft::Error(weft::Errc::io, "counting proxy: cannot listen on 127.0.0.1");
    }
    ::getsockname(listen_, reinterpret_cast<sockaddr *>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~CountingProxy() {
    (void)!::write(wake_[1], "x", 1);
    thread_.join();
    ::close(listen_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  std::string endpoint() const { return fmt::format("127.0.0.1:{}", port_); }
  std::uint64_t sent() const { return up_.load(); }        // to the peer
  std::uint64_t received() const { return down_.load(); }  // from the peer

 private:
  static sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    return a;
  }
  // One connection at a time, as ggml-rpc-server serves them.
  void serve() {
    for (;;) {
      pollfd p[2] = {{listen_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(p, 2, -1) < 0 && errno == EINTR) continue;
      if (p[1].revents != 0) return;
      const int client = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int peer = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const sockaddr_in a = loopback(target_);
      if (::connect(peer, reinterpret_cast<const sockaddr *>(&a), sizeof(a)) == 0) {
        if (!pump(client, peer)) {
          ::close(peer);
          ::close(client);
          return;
        }
      }
      ::close(peer);
      ::close(client);
    }
  }
  // False when woken to stop.
  bool pump(int client, int peer) {
    std::vector<char> buf(1 << 16);
    for (;;) {
      pollfd p[3] = {{client, POLLIN, 0}, {peer, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(p, 3, -1) < 0) {
        if (errno == EINTR) continue;
        return true;
      }
      if (p[2].revents != 0) return false;
      for (int side = 0; side < 2; ++side) {
        if (p[side].revents == 0) continue;
        const ssize_t n = ::recv(p[side].fd, buf.data(), buf.size(), 0);
        if (n <= 0) return true;
        const int to = side == 0 ? peer : client;
        for (ssize_t off = 0; off < n;) {
          const ssize_t k = ::send(to, buf.data() + off, static_cast<std::size_t>(n - off), MSG_NOSIGNAL);
          if (k <= 0) return true;
          off += k;
        }
        (side == 0 ? up_ : down_) += static_cast<std::uint64_t>(n);
      }
    }
  }
  int target_, listen_ = -1, port_ = 0, wake_[2] = {-1, -1};
  std::atomic<std::uint64_t> up_{0}, down_{0};
  std::thread thread_;
};

struct Phase {
  double seconds = 0, tok_s = 0, bytes_per_token = 0;
};
struct Run {
  Phase pp, tg;
};

std::uint64_t traffic(const std::vector<std::unique_ptr<CountingProxy>> &proxies) {
  std::uint64_t n = 0;
  for (const auto &p : proxies) n += p->sent() + p->received();
  return n;
}

Run run_once(const Opts &o, const weft::Model &m, const std::vector<std::unique_ptr<CountingProxy>> &proxies) {
  weft::ExecutorParams p;
  p.n_ctx = std::max(512u, o.conversations * (o.pp + o.tg + 8));
  p.n_batch = 512;
  p.n_seq_max = o.conversations;
  p.n_threads = o.threads;
  p.prefix_cache_cells = 0;
  weft::Executor ex(m, p);
  std::mt19937_64 rng(42);
  std::vector<weft::Conversation> convs;
  for (unsigned i = 0; i < o.conversations; ++i) {
    auto t = bench::random_tokens(rng, o.pp - 1, m.n_vocab(), 3);
    t.insert(t.begin(), m.bos());
    convs.push_back(ex.create());
    convs.back().prompt(t);
  }
  Run r;
  auto phase = [&](Phase &ph, double tokens, auto &&until_done) {
    const std::uint64_t b0 = traffic(proxies);
    const auto t0 = bench::now_ns();
    until_done();
    ph.seconds = bench::seconds_since(t0);
    ph.tok_s = tokens / ph.seconds;
    ph.bytes_per_token = static_cast<double>(traffic(proxies) - b0) / tokens;
  };
  phase(r.pp, double(o.conversations) * o.pp, [&] {
    while (!ex.step().idle) {
    }
  });
  // Greedy, one token each per step, to the length (end-of-generation ignored).
  phase(r.tg, double(o.conversations) * o.tg, [&] {
    for (unsigned k = 0; k < o.tg; ++k) {
      for (auto &c : convs) c.prompt(std::vector<weft::Token>{c.sample()});
      ex.step();
    }
  });
  return r;
}

Run median(std::vector<Run> runs) {
  auto mid = [&](auto key) {
    std::vector<double> v;
    for (const auto &r : runs) v.push_back(key(r));
    return bench::percentile(v, 50);
  };
  Run m;
  m.pp = {mid([](const Run &r) { return r.pp.seconds; }), mid([](const Run &r) { return r.pp.tok_s; }),
          mid([](const Run &r) { return r.pp.bytes_per_token; })};
  m.tg = {mid([](const Run &r) { return r.tg.seconds; }), mid([](const Run &r) { return r.tg.tok_s; }),
          mid([](const Run &r) { return r.tg.bytes_per_token; })};
  return m;
}

std::string default_peer_binary() {
  // Built next to the weft CLI's build tree: <build>/bin/ggml-rpc-server.
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  for (const auto &c : {self.parent_path() / "ggml-rpc-server", self.parent_path() / "../../bin/ggml-rpc-server"}) {
    if (std::filesystem::exists(c, ec)) return std::filesystem::weakly_canonical(c, ec).string();
  }
  return "ggml-rpc-server";
}

void run(Opts o) {
  const std::string path = bench::model_path(o.model);
  if (o.server_binary.empty()) o.server_binary = default_peer_binary();
  if (!std::filesystem::exists(o.server_binary)) {
    throw weft::Error(weft::Errc::not_found, fmt::format("ggml-rpc-server not found at '{}' (build the "
                                                         "ggml-rpc-server target, or pass --server)", o.server_binary));
  }
  std::vector<std::unique_ptr<Peer>> peers;
  std::vector<std::unique_ptr<CountingProxy>> proxies;
  std::vector<std::string> endpoints;
  for (unsigned i = 0; i < o.peers; ++i) {
    peers.push_back(std::make_unique<Peer>(o.server_binary, o.threads));
    proxies.push_back(std::make_unique<CountingProxy>(peers.back()->port()));
    endpoints.push_back(proxies.back()->endpoint());
  }
  const std::vector<std::unique_ptr<CountingProxy>> none;
  nlohmann::json results = nlohmann::json::array();
  std::vector<std::pair<std::string, Run>> rows;
  std::uint64_t load_bytes = 0;
  double load_s = 0;
  // local; over the peers as weft loads them (each through its relay, so a
  // dead peer is an error, not an abort); over the peers with ggml-rpc
  // talking to them directly (ModelParams::rpc_relay = false).
  struct Mode {
    const char *name;
    bool remote, relay;
  };
  for (const Mode mode : {Mode{"local", false, false}, Mode{"rpc", true, true}, Mode{"rpc, no relay", true, false}}) {
    const std::uint64_t b0 = traffic(proxies);
    const auto t0 = bench::now_ns();
    const weft::Model m = weft::Model::load(
        {.path = path, .rpc = mode.remote ? endpoints : std::vector<std::string>{}, .rpc_relay = mode.relay});
    if (mode.remote && mode.relay) {
      load_s = bench::seconds_since(t0);
      load_bytes = traffic(proxies) - b0;
    }
    std::vector<Run> runs;
    for (unsigned r = 0; r < o.reps; ++r) runs.push_back(run_once(o, m, mode.remote ? proxies : none));
    rows.emplace_back(mode.name, median(runs));
    if (!o.quiet) fmt::print(stderr, "{}: done\n", mode.name);
  }
  fmt::print("\nweft bench rpc: {}, {} conversations, pp {} / tg {} each; {} thread(s) here and on each peer; "
             "medians of {} runs; load {:.2f}\n\n", std::filesystem::path(path).filename().string(), o.conversations,
             o.pp, o.tg, o.threads, o.reps, bench::load_average_1min());
  fmt::print("| {:<14} | {:>9} | {:>9} | {:>12} | {:>12} |\n", "model on", "pp tok/s", "tg tok/s", "pp B/token",
             "tg B/token");
  fmt::print("|----------------|-----------|-----------|--------------|--------------|\n");
  for (const auto &[name, r] : rows) {
    fmt::print("| {:<14} | {:>9.1f} | {:>9.1f} | {:>12.0f} | {:>12.0f} |\n", name, r.pp.tok_s, r.tg.tok_s,
               r.pp.bytes_per_token, r.tg.bytes_per_token);
    results.push_back({{"model_on", name},
                       {"pp_tok_s", r.pp.tok_s},
                       {"tg_tok_s", r.tg.tok_s},
                       {"pp_bytes_per_token", r.pp.bytes_per_token},
                       {"tg_bytes_per_token", r.tg.bytes_per_token}});
  }
  fmt::print("rpc / local: pp {:.2f}x, tg {:.2f}x; rpc / no relay: pp {:.2f}x, tg {:.2f}x; loading over RPC took "
             "{:.2f} s and {:.1f} MiB (the weights)\n",
             rows[1].second.pp.tok_s / rows[0].second.pp.tok_s, rows[1].second.tg.tok_s / rows[0].second.tg.tok_s,
             rows[1].second.pp.tok_s / rows[2].second.pp.tok_s, rows[1].second.tg.tok_s / rows[2].second.tg.tok_s,
             load_s, static_cast<double>(load_bytes) / 1048576.0);
  fmt::print("(B/token: bytes both ways through every peer's connection per token decoded; tg: each step samples and "
             "decodes one token for every conversation)\n");
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "rpc"}, {"model", path}, {"peers", o.peers}, {"conversations", o.conversations},
                               {"pp", o.pp}, {"tg", o.tg}, {"threads", o.threads}, {"reps", o.reps},
                               {"load_seconds", load_s}, {"load_bytes", load_bytes},
                               {"machine", bench::machine_info()}, {"results", results}});
  }
}

}  // namespace
}  // namespace bench_rpc_cmd

void add_bench_rpc(CLI::App &bench) {
  using namespace bench_rpc_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("rpc", "A model decoded locally vs split over ggml-rpc-server peers started "
                                          "here: speed and network bytes per token");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the generated small model, made on first use)");
  cmd->add_option("--peers", o->peers, "ggml-rpc-server peers")->check(CLI::Range(1u, 16u))->capture_default_str();
  cmd->add_option("--conversations", o->conversations, "Conversations")->check(CLI::Range(1u, 64u))->capture_default_str();
  cmd->add_option("--pp", o->pp, "Prompt tokens each")->check(CLI::Range(2u, 4096u))->capture_default_str();
  cmd->add_option("--tg", o->tg, "Generated tokens each")->check(CLI::Range(1u, 4096u))->capture_default_str();
  cmd->add_option("--reps", o->reps, "Runs per engine (the median is reported)")->check(CLI::Range(1u, 50u))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads here and on each peer")->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--server", o->server_binary, "ggml-rpc-server binary (default: the one built with weft)");
  cmd->add_option("--json", o->json, "Also write the results here");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress lines");
  cmd->callback([o] { run(*o); });
}

}  // namespace weft_cli
