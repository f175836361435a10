// weft serve: the server as a whole — the model, one executor stepped by
// the server's own thread, cpp-httplib with the routes and limits, and the
// graceful shutdown.
//
// Lifetime: construct (loads the model, creates the executor; throws
// weft::Error), bind(), run() on one thread, shutdown() from another (or
// after run() returned). The destructor shuts down if that has not happened.
#pragma once

#include <httplib.h>

#include <memory>
#include <thread>

#include "serve/serve_context.hpp"
#include "serve/serve_options.hpp"

namespace weft_cli::serve {

class ServeApp {
 public:
  explicit ServeApp(ServeOptions opt);
  ~ServeApp();
  ServeApp(const ServeApp &) = delete;
  ServeApp &operator=(const ServeApp &) = delete;

  // Binds host:port (port 0: any free one) and returns the port. Throws
  // weft::Error(io) naming the address when it cannot.
  int bind();
  // Serves on a thread of its own until shutdown().
  void start();
  // False once the HTTP server stopped (shutdown, or a failure).
  bool running() const;
  // Graceful: new requests get 503; running generations (and embeddings) get
  // --shutdown-grace seconds to finish, then are cancelled (streams end with
  // an error event and [DONE]); open requests get up to 5 s to answer; then
  // the HTTP server, the stepping thread and the executor stop. Idempotent.
  void shutdown();

  ServeContext &context() { return *ctx_; }

 private:
  void configure_http();

  std::unique_ptr<ServeContext> ctx_;
  httplib::Server svr_;
  std::thread listener_;
  bool shut_ = false;
};

}  // namespace weft_cli::serve
