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

// Runs `<env> weft <args>` through the shell, stdout and stderr together;
// `env` is empty or shell assignments ending in a space ("A=1 B=2 ").
inline CliRun run_cli_env(const std::string &env, const std::string &args) {
  CliRun r;
  FILE *p = ::popen((env + std::string(WEFT_CLI) + " " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// Runs `weft <args>` through the shell, stdout and stderr together.
inline CliRun run_cli(const std::string &args) { return run_cli_env("", args); }

}  // namespace weft_test
