#include "bench_server.hpp"

#include "bench_common.hpp"

// Built only with cpp-httplib; see tools/weft/CMakeLists.txt.
#if __has_include(<httplib.h>)
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <mutex>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "weft/weft.hpp"

namespace weft_cli::bench {
namespace {

// Whether process `pid` holds a TCP socket listening on `port` (/proc/net/tcp
// and tcp6: the socket's inode among the process's open files).
bool listens_on(pid_t pid, int port) {
  std::vector<std::string> inodes;
  for (const char *table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
      const auto colon = local.rfind(':');
      if (state != "0A" || colon == std::string::npos) continue;  // 0A: LISTEN
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) inodes.push_back("socket:[" + inode + "]");
    }
  }
  if (inodes.empty()) return false;
  std::error_code ec;
  for (const auto &fd : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
    const auto target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (std::find(inodes.begin(), inodes.end(), target) != inodes.end()) return true;
  }
  return false;
}

// The running server, for the signal handler (one at a time).
std::atomic<pid_t> g_server{0};

extern "C" void kill_server_and_reraise(int sig) {
  const pid_t pid = g_server.load();
  if (pid > 0) {
    ::kill(-pid, SIGKILL);  // its process group: the server and anything it started
    ::kill(pid, SIGKILL);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_signal_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = kill_server_and_reraise;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  });
}

using Clock = std::chrono::steady_clock;

}  // namespace

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw weft::Error(weft::Errc::io, "cannot open a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) throw weft::Error(weft::Errc::io, "cannot bind a socket on 127.0.0.1 to find a free port");
  return ntohs(addr.sin_port);
}

const char *ServerProcess::name() const {
  return opt_.kind == ServerKind::weft_serve ? "weft serve" : "llama-server";
}

ServerProcess::ServerProcess(ServerOptions options) : opt_(std::move(options)) {
  if (::access(opt_.binary.c_str(), X_OK) != 0) {
    const bool is_weft = opt_.kind == ServerKind::weft_serve;
    throw weft::Error(weft::Errc::not_found,
                      fmt::format("{} not found or not executable at '{}'; {}", is_weft ? "weft" : "llama-server",
                                  opt_.binary,
                                  is_weft ? "pass --weft-binary PATH"
                                       : "build it with `cmake --build --preset release --target llama-tools`, pass "
                                         "--server PATH, or run --target weft"));
  }
  install_signal_handlers();
  // A port can be taken between our probe and the server's bind: try another.
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (spawn(free_loopback_port())) return;
  }
  throw weft::Error(weft::Errc::backend,
                    fmt::format("{} could not bind a free port on 127.0.0.1 in 3 tries; its log ({}):\n{}", name(),
                                opt_.log_path, log_tail()));
}

ServerProcess::~ServerProcess() { stop(); }

std::string ServerProcess::flash_attn_used() const {
  std::ifstream in(opt_.log_path);
  for (std::string line; std::getline(in, line);) {
    // llama.cpp, resolving -fa auto: "...: Flash Attention enabled" or "... not supported, set to disabled".
    if (line.find("Flash Attention enabled") != std::string::npos) return "on (llama.cpp resolved auto)";
    if (line.find("Flash Attention not supported") != std::string::npos) return "off (llama.cpp resolved auto)";
    // weft serve: "weft serve: flash attention on (measured: ...)".
    if (const auto at = line.find("weft serve: flash attention "); at != std::string::npos) {
      return line.substr(at + std::string_view("weft serve: flash attention ").size());
    }
  }
  // llama-server logs the resolution only at higher verbosity (-lv).
  if (opt_.flash_attn == "auto") {
    return "auto (not in the server's log; llama.cpp turns it on where the device supports it, as the CPU does)";
  }
  return opt_.flash_attn.empty() ? "the server's default" : opt_.flash_attn + " (as asked)";
}

bool ServerProcess::spawn(int port) {
  port_ = port;
  if (opt_.kind == ServerKind::weft_serve) {
    argv_ = {opt_.binary, "serve", "-m", opt_.model, "--host", "127.0.0.1", "--port", std::to_string(port),
             "--ctx", std::to_string(opt_.ctx), "--batch", std::to_string(opt_.batch), "--ubatch",
             std::to_string(opt_.ubatch), "--parallel", std::to_string(opt_.slots), "-t",
             std::to_string(std::max(0, opt_.threads))};
  } else {
    argv_ = {opt_.binary, "-m", opt_.model, "--host", "127.0.0.1", "--port", std::to_string(port),
             "-c", std::to_string(opt_.ctx), "-b", std::to_string(opt_.batch), "-ub", std::to_string(opt_.ubatch),
             "-np", std::to_string(opt_.slots), "-kvu", "-cb", "--no-webui"};
    if (cpu_has_amx()) argv_.push_back("--no-repack");  // as weft does there (bench_common.hpp)
  }
  if (opt_.threads > 0 && opt_.kind == ServerKind::llama_server) {
    for (const char *flag : {"-t", "-tb"}) {
      argv_.push_back(flag);
      argv_.push_back(std::to_string(opt_.threads));
    }
  }
  if (!opt_.flash_attn.empty()) {
    argv_.push_back(opt_.kind == ServerKind::weft_serve ? "--flash-attn" : "-fa");
    argv_.push_back(opt_.flash_attn);
  }
  argv_.insert(argv_.end(), opt_.extra_args.begin(), opt_.extra_args.end());
  std::vector<char *> args;
  for (auto &a : argv_) args.push_back(a.data());
  args.push_back(nullptr);
  const std::string header = fmt::format("weft bench: starting {}\n", fmt::join(argv_, " "));
  const std::string exec_failed = fmt::format("weft bench: exec of {} failed\n", name());

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw weft::Error(weft::Errc::backend, fmt::format("fork() failed while starting {}", name()));
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    ::setpgid(0, 0);
#ifdef __linux__
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    if (::getppid() != parent) ::_exit(126);
    const int log = ::open(opt_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int null = ::open("/dev/null", O_RDONLY);
    if (log >= 0) {
      (void)!::write(log, header.data(), header.size());
      ::dup2(log, STDOUT_FILENO);
      ::dup2(log, STDERR_FILENO);
    }
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::execv(args[0], args.data());
    (void)!::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    ::_exit(127);
  }
  pid_ = pid;
  g_server.store(pid);

  // Ready when /health answers 200 (503 while the model loads).
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(1, 0);
  cli.set_read_timeout(2, 0);
  const auto deadline = Clock::now() + std::chrono::duration<double>(opt_.ready_timeout_s);
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      g_server.store(0);
      const std::string tail = log_tail();
      // The port was taken meanwhile (llama-server's words, then weft serve's).
      if (tail.find("couldn't bind") != std::string::npos || tail.find("cannot listen on") != std::string::npos)
        return false;
      throw weft::Error(weft::Errc::backend,
                        fmt::format("{} exited ({}) before it was ready; the end of its log ({}):\n{}", name(),
                                    WIFEXITED(status) ? fmt::format("status {}", WEXITSTATUS(status))
                                                      : fmt::format("signal {}", WTERMSIG(status)),
                                    opt_.log_path, tail));
    }
    // Another process may hold the port (it was free when picked): only
    // the child's own listening socket counts.
    if (auto res = cli.Get("/health"); res && res->status == 200 && listens_on(pid_, port)) return true;
    if (Clock::now() > deadline) {
      stop();
      throw weft::Error(weft::Errc::backend,
                        fmt::format("{} was not ready within {} s (stopped it); the end of its log ({}):\n{}",
                                    name(), opt_.ready_timeout_s, opt_.log_path, log_tail()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void ServerProcess::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid_, SIGKILL);  // anything left in its group
  g_server.store(0);
  pid_ = -1;
}

std::string ServerProcess::log_tail(std::size_t lines) const {
  std::ifstream in(opt_.log_path);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back("  " + line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (auto &l : last) out += l + "\n";
  return out.empty() ? "  (empty)\n" : out;
}

}  // namespace weft_cli::bench

#endif  // __has_include(<httplib.h>)
