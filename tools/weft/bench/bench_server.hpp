// An HTTP server under test — llama-server, or `weft serve` (this binary) —
// started and stopped by the bench, on a free port of 127.0.0.1, with every
// wait bounded by a timeout.
//
// The child is killed when the ServerProcess is destroyed (normal exit and
// exceptions), when the bench gets SIGINT/SIGTERM/SIGHUP (a handler kills it,
// then lets the signal take its default course), and when the bench itself
// dies any other way (PR_SET_PDEATHSIG on Linux).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace weft_cli::bench {

enum class ServerKind { llama_server, weft_serve };

struct ServerOptions {
  ServerKind kind = ServerKind::llama_server;
  std::string binary;    // path of llama-server, or of weft (run as `weft serve`)
  std::string model;
  std::string log_path;  // the server's stdout and stderr go here
  unsigned ctx = 0, batch = 0, ubatch = 0, slots = 1;
  int threads = 0;                // 0: the server's default
  std::string flash_attn;         // "on", "off" or "auto" (-fa / --flash-attn); "": the server's default
  std::vector<std::string> extra_args;  // appended to the command line
  double ready_timeout_s = 60;    // until /health answers 200
};

class ServerProcess {
 public:
  // Starts the server and waits until it is ready. Throws weft::Error
  // (not_found: no such binary; backend: it exited or did not get ready in
  // time; the message quotes the end of its log).
  explicit ServerProcess(ServerOptions options);
  ~ServerProcess();
  ServerProcess(const ServerProcess &) = delete;
  ServerProcess &operator=(const ServerProcess &) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::vector<std::string> &argv() const { return argv_; }
  // "llama-server" or "weft serve", for messages.
  const char *name() const;
  // The attention kernel the server reports using, read from its log
  // ("on"/"off", with weft serve's reason), else what it was asked for.
  std::string flash_attn_used() const;
  // SIGTERM, up to 5 s, then SIGKILL; reaps the child. Idempotent.
  void stop();
  // The last `lines` lines of the server's log.
  std::string log_tail(std::size_t lines = 15) const;

 private:
  bool spawn(int port);  // false: it exited before it was ready (e.g. port taken)
  ServerOptions opt_;
  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A port that was free on 127.0.0.1 a moment ago (bound to port 0, closed).
int free_loopback_port();

}  // namespace weft_cli::bench
