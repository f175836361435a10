// Running the weft CLI from tests: exit status and combined output.
#pragma once

#include <cstdio>
#include <string>

#include <sys/wait.h>

namespace weft_test {

struct CliRun {
  int status = -1;
  std::string output;
};

// Runs `weft <args>` through the shell, stdout and stderr together.
inline CliRun run_cli(const std::string &args) {
  CliRun r;
  FILE *p = ::popen((std::string(WEFT_CLI) + " " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace weft_test
