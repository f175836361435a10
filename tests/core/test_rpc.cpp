// ModelParams::rpc against real ggml-rpc-server peers (built from the pinned
// source, started here on free ports): a model split over two peers gives
// the logits of local decoding, and peers weft cannot use are refused with
// typed errors before llama.cpp (which would abort) sees them; a peer that
// dies or goes silent mid-decode fails that model's conversations with
// Errc::backend while the process, and a model loaded again, carry on.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "common.hpp"
#include "core/rpc.hpp"
#include "reference.hpp"

extern char **environ;

namespace {

using weft::Errc;
using namespace std::chrono_literals;

// A listening socket on a free loopback port (kept open while it is used).
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd, 4), 0);
    ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port); }
};

int free_port() { return Listener().port; }

// One ggml-rpc-server process, stopped (SIGTERM, then SIGKILL) on scope exit.
struct Peer {
  pid_t pid = -1;
  std::string endpoint;
  // On a free port, or on `fixed` (a peer restarted where one died).
  explicit Peer(int fixed = 0) {
#ifdef WEFT_RPC_SERVER
    for (int attempt = 0; attempt < 5 && pid < 0; ++attempt) {
      const std::string port = std::to_string(fixed > 0 ? fixed : free_port());
      std::vector<std::string> args = {WEFT_RPC_SERVER, "-H", "127.0.0.1", "-p", port, "-t", "1"};
      std::vector<char *> argv;
      for (auto &a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      pid_t p = -1;
      posix_spawn_file_actions_t quiet;  // it logs every connection
      posix_spawn_file_actions_init(&quiet);
      posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
      posix_spawn_file_actions_adddup2(&quiet, 1, 2);
      const int rc = ::posix_spawn(&p, WEFT_RPC_SERVER, &quiet, nullptr, argv.data(), environ);
      posix_spawn_file_actions_destroy(&quiet);
      if (rc != 0) break;
      endpoint = "127.0.0.1:" + port;
      // Ready when it answers ggml-rpc's HELLO (bounded: 10 s).
      for (int i = 0; i < 100; ++i) {
        try {
          weft::detail::check_rpc_peer(endpoint, 1000ms);
          pid = p;
          break;
        } catch (const weft::Error &) {
          int status = 0;
          if (::waitpid(p, &status, WNOHANG) == p) {  // exited: port taken, try another
            std::this_thread::sleep_for(200ms);
            break;
          }
          std::this_thread::sleep_for(100ms);
        }
      }
      if (pid < 0) stop(p);
    }
#endif
  }
  static void stop(pid_t p) {
    if (p <= 0) return;
    ::kill(p, SIGTERM);
    for (int i = 0; i < 50; ++i) {
      if (::waitpid(p, nullptr, WNOHANG) == p) return;
      std::this_thread::sleep_for(20ms);
    }
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  ~Peer() { stop(pid); }
  // Dies as a crashed or unplugged machine would: no goodbye.
  void kill_now() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  int port() const { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }
};

#ifndef WEFT_RPC_SERVER
#define SKIP_WITHOUT_RPC() GTEST_SKIP() << "weft built without WEFT_RPC"
#else
#define SKIP_WITHOUT_RPC() (void)0
#endif

}  // namespace

TEST(Rpc, ModelSplitOverTwoPeersMatchesLocalDecoding) {
  SKIP_WITHOUT_RPC();
  Peer a, b;
  ASSERT_GT(a.pid, 0);
  ASSERT_GT(b.pid, 0);
  const auto &local = weft_test::tiny();
  const weft::Model remote = weft::Model::load({.path = local.path(), .rpc = {a.endpoint, b.endpoint}});
  EXPECT_EQ(remote.fingerprint(), local.fingerprint());
  const double tol = weft_test::logits_tolerance(local);
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    weft::ExecutorParams p;
    p.n_ctx = 1024;
    p.n_batch = 64;
    p.n_seq_max = 6;
    p.n_threads = 1;
    weft::Executor ex(remote, p);
    std::vector<weft::Conversation> convs;
    for (int i = 0; i < 6; ++i) {
      convs.push_back(ex.create());
      convs.back().prompt(weft_test::random_tokens(rng, local, 5 + static_cast<int>(rng() % 90), true));
    }
    weft_test::run_until_idle(ex, &rng, 48);
    // More input for half of them, decoded beside the others' nothing.
    for (int i = 0; i < 6; i += 2) convs[i].prompt(weft_test::random_tokens(rng, local, 1 + static_cast<int>(rng() % 20)));
    weft_test::run_until_idle(ex, &rng, 16);
    for (auto &c : convs) {
      const double e = weft_test::nmse(c.logits(), weft_test::reference_logits(local, c.tokens()));
      EXPECT_LE(e, tol) << "conversation " << c.id();
    }
  }
}

TEST(Rpc, PeersWeftCannotUseAreRefusedWithTypedErrors) {
  SKIP_WITHOUT_RPC();
  const std::string path = weft_test::tiny().path();
  auto load = [&](std::vector<std::string> rpc, int timeout_ms = 5000) {
    return [=] { weft::Model::load({.path = path, .rpc = rpc, .rpc_timeout_ms = timeout_ms}); };
  };
  EXPECT_TRUE(weft_test::throws_weft(load({"localhost"}), Errc::invalid_argument, "localhost"));
  EXPECT_TRUE(weft_test::throws_weft(load({":50052"}), Errc::invalid_argument, "no host"));
  EXPECT_TRUE(weft_test::throws_weft(load({"127.0.0.1:0"}), Errc::invalid_argument, "127.0.0.1:0"));
  EXPECT_TRUE(weft_test::throws_weft(load({"127.0.0.1:70000"}), Errc::invalid_argument, "70000"));
  EXPECT_TRUE(weft_test::throws_weft(load({"127.0.0.1:5x"}), Errc::invalid_argument, "5x"));
  EXPECT_TRUE(weft_test::throws_weft(load({"127.0.0.1:1", "127.0.0.1:1"}), Errc::invalid_argument, "twice"));
  std::vector<std::string> many;
  for (int i = 0; i < 17; ++i) many.push_back("127.0.0.1:" + std::to_string(1000 + i));
  EXPECT_TRUE(weft_test::throws_weft(load(many), Errc::out_of_range, "17"));
  EXPECT_TRUE(weft_test::throws_weft(load({"127.0.0.1:1"}, 0), Errc::invalid_argument, "rpc_timeout_ms"));
  // Nothing listens: refused at once.
  EXPECT_TRUE(weft_test::throws_weft(load({"127.0.0.1:" + std::to_string(free_port())}), Errc::io, "unreachable"));
  {
    // Accepts (the kernel's backlog) but never answers: bounded by the timeout.
    Listener silent;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(weft_test::throws_weft(load({silent.endpoint()}, 300), Errc::io, "HELLO"));
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(waited, 250ms);
    EXPECT_LT(waited, 5s);
  }
  {
    // Answers with something that is not ggml-rpc.
    Listener http;
    std::thread server([&] {
      const int c = ::accept(http.fd, nullptr, nullptr);
      if (c < 0) return;
      const char reply[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
      (void)!::write(c, reply, sizeof(reply) - 1);
      ::close(c);
    });
    EXPECT_TRUE(weft_test::throws_weft(load({http.endpoint()}, 2000), Errc::io, http.endpoint()));
    server.join();
  }
  // A live peer next to an unreachable one: nothing is loaded, the live peer
  // still serves a later load.
  Peer live;
  ASSERT_GT(live.pid, 0);
  EXPECT_TRUE(weft_test::throws_weft(load({live.endpoint, "127.0.0.1:" + std::to_string(free_port())}), Errc::io));
  const weft::Model m = weft::Model::load({.path = path, .rpc = {live.endpoint}});
  weft::Executor ex(m, {.n_ctx = 256, .n_batch = 32, .n_seq_max = 2, .n_threads = 1});
  auto c = ex.create();
  c.prompt(std::vector<weft::Token>{m.bos(), 100, 200, 300});
  weft_test::run_until_idle(ex);
  EXPECT_LE(weft_test::nmse(c.logits(), weft_test::reference_logits(weft_test::tiny(), c.tokens())),
            weft_test::logits_tolerance(weft_test::tiny()));
}

TEST(Rpc, CliTakesPeers) {
  SKIP_WITHOUT_RPC();
  auto run = [](const std::string &args) {
    const std::string cmd = std::string(WEFT_CLI) + " info -m " + weft_test::tiny().path() + " " + args + " 2>&1";
    FILE *p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
    return std::make_pair(::pclose(p), out);
  };
  Peer peer;
  ASSERT_GT(peer.pid, 0);
  const auto [ok, out] = run("--rpc " + peer.endpoint);
  EXPECT_EQ(ok, 0) << out;
  EXPECT_NE(out.find("layers      2"), std::string::npos) << out;
  const auto [bad, why] = run("--rpc " + peer.endpoint + ",127.0.0.1:" + std::to_string(free_port()));
  EXPECT_NE(bad, 0);
  EXPECT_NE(why.find("error (io): RPC peer 127.0.0.1:"), std::string::npos) << why;
}

namespace {

// A few conversations with prompts long enough for a decode to take a while.
std::vector<weft::Conversation> prompted(weft::Executor &ex, const weft::Model &m, std::mt19937 &rng, int n) {
  std::vector<weft::Conversation> convs;
  for (int i = 0; i < n; ++i) {
    convs.push_back(ex.create());
    convs.back().prompt(weft_test::random_tokens(rng, weft_test::tiny(), 100 + static_cast<int>(rng() % 100), true));
  }
  (void)m;
  return convs;
}

void expect_failed_over(const weft::Conversation &c, const std::string &endpoint) {
  ASSERT_TRUE(c.error().has_value()) << "conversation " << c.id();
  EXPECT_EQ(c.error()->code(), Errc::backend);
  EXPECT_NE(std::string(c.error()->what()).find("RPC peer " + endpoint), std::string::npos) << c.error()->what();
}

}  // namespace

TEST(Rpc, PeerThatDiesMidDecodeFailsItsConversationsNotTheProcess) {
  SKIP_WITHOUT_RPC();
  Peer a, b;
  ASSERT_GT(a.pid, 0);
  ASSERT_GT(b.pid, 0);
  const auto &local = weft_test::tiny();
  const weft::ExecutorParams p{.n_ctx = 1024, .n_batch = 512, .n_seq_max = 4, .n_threads = 1};
  std::mt19937 rng(7);
  std::optional<weft::Model> remote = weft::Model::load({.path = local.path(), .rpc = {a.endpoint, b.endpoint}});
  std::optional<weft::Executor> ex(std::in_place, *remote, p);
  auto convs = prompted(*ex, *remote, rng, 1);
  weft_test::run_until_idle(*ex, &rng, 1);  // one with KV from before
  ASSERT_FALSE(convs[0].error().has_value());
  for (auto &c : prompted(*ex, *remote, rng, 3)) convs.push_back(std::move(c));
  convs[0].prompt(weft_test::random_tokens(rng, local, 50));
  // Frozen first, so the step is surely waiting on it when it dies.
  ::kill(b.pid, SIGSTOP);
  weft::StepResult r;
  std::thread stepper([&] { r = ex->step(); });
  std::this_thread::sleep_for(300ms);
  b.kill_now();
  stepper.join();
  EXPECT_GE(r.failed, 1u);
  // Those the first step did not reach fail when their turn comes.
  for (int i = 0; i < 4; ++i) (void)ex->step();
  for (const auto &c : convs) expect_failed_over(c, b.endpoint);
  // Everything after fails the same way, at once, and nothing saved holds
  // the relay's zeros.
  convs[1].clear_error();
  convs[1].prompt(std::vector<weft::Token>{100, 200});
  EXPECT_EQ(ex->step().failed, 1u);
  expect_failed_over(convs[1], b.endpoint);
  EXPECT_TRUE(weft_test::throws_weft([&] { (void)convs[0].save(); }, Errc::backend, b.endpoint));
  EXPECT_TRUE(weft_test::throws_weft([&] { weft::Executor again(*remote, p); }, Errc::backend, b.endpoint));

  // Back at the same address while the failed model is still loaded: ggml
  // would hand a new load that model's dead connection, so it is refused
  // (peer a, still healthy, would have been shared).
  Peer b2(b.port());
  ASSERT_GT(b2.pid, 0);
  EXPECT_TRUE(weft_test::throws_weft(
      [&] { weft::Model::load({.path = local.path(), .rpc = {a.endpoint, b2.endpoint}}); }, Errc::backend,
      "still loaded"));
  // Freed: the same peers serve a new load, which decodes exactly.
  convs.clear();
  ex.reset();
  remote.reset();
  const weft::Model again = weft::Model::load({.path = local.path(), .rpc = {a.endpoint, b2.endpoint}});
  weft::Executor ex2(again, p);
  auto fresh = prompted(ex2, again, rng, 4);
  weft_test::run_until_idle(ex2, &rng, 8);
  for (const auto &c : fresh) {
    EXPECT_FALSE(c.error().has_value());
    EXPECT_LE(weft_test::nmse(c.logits(), weft_test::reference_logits(local, c.tokens())),
              weft_test::logits_tolerance(local));
  }
}

TEST(Rpc, SilentPeerIsBoundedByTheReplyTimeout) {
  SKIP_WITHOUT_RPC();
  Peer a;
  ASSERT_GT(a.pid, 0);
  const auto &local = weft_test::tiny();
  EXPECT_TRUE(weft_test::throws_weft(
      [&] { weft::Model::load({.path = local.path(), .rpc = {a.endpoint}, .rpc_reply_timeout_ms = 0}); },
      Errc::invalid_argument, "rpc_reply_timeout_ms"));
  {
    const weft::Model m = weft::Model::load({.path = local.path(), .rpc = {a.endpoint}, .rpc_reply_timeout_ms = 500});
    weft::Executor ex(m, {.n_ctx = 512, .n_batch = 256, .n_seq_max = 2, .n_threads = 1});
    std::mt19937 rng(3);
    auto convs = prompted(ex, m, rng, 2);
    ::kill(a.pid, SIGSTOP);  // alive, connected, never answers
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = ex.step();
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(r.failed, 1u);
    EXPECT_GE(waited, 450ms);
    EXPECT_LT(waited, 10s);
    (void)ex.step();
    for (const auto &c : convs) {
      expect_failed_over(c, a.endpoint);
      EXPECT_NE(std::string(c.error()->what()).find("500 ms"), std::string::npos) << c.error()->what();
    }
  }
  ::kill(a.pid, SIGCONT);
}
