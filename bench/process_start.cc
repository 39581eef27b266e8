// process_start: what does a preloaded library add to starting a program?
//
//   process_start [--runs 200] [--warmup 5] --variant NAME=[PRELOAD] ... -- PROGRAM [ARGS...]
//
// Runs PROGRAM to completion RUNS times in each variant, the variants taking
// turns run by run (A B A B ..., so that a change in machine load hits them
// alike), with LD_PRELOAD set to PRELOAD (an empty PRELOAD: no LD_PRELOAD at
// all). Each run is a posix_spawn and a wait4: the wall time covers exec,
// dynamic loading, constructors, the program and exit; the CPU time (user +
// system) comes from wait4's rusage. Reports per variant the median and mean
// wall time and the median CPU time in microseconds, as a JSON line on stdout
// (keys NAME_wall_us_median, NAME_wall_us_mean, NAME_cpu_us_median) and a
// human line per variant on stderr. PROGRAM's output goes to /dev/null.
#include <fcntl.h>
#include <spawn.h>

#include <algorithm>
#include <vector>

#include "bench_net.h"

extern char** environ;

namespace {

struct Variant {
  std::string name;
  std::vector<std::string> environment;  // KEY=VALUE strings
  std::vector<double> wall_us, cpu_us;
};

[[noreturn]] void usage() {
  std::fputs(
      "usage: process_start [--runs N] [--warmup N] --variant NAME=[PRELOAD] ... -- PROGRAM [ARGS...]\n",
      stderr);
  std::exit(2);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / double(values.size());
}

// One run of argv in `variant`; records its wall and CPU microseconds if `keep`.
void run_once(char* const* argv, Variant& variant, posix_spawn_file_actions_t* actions, bool keep) {
  std::vector<char*> envp;
  for (auto& entry : variant.environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  std::uint64_t start = bench::now_ns();
  int error = posix_spawn(&pid, argv[0], actions, nullptr, argv, envp.data());
  if (error != 0) {
    errno = error;
    bench::die_errno(("posix_spawn " + std::string(argv[0])).c_str());
  }
  int status = 0;
  rusage usage{};
  while (wait4(pid, &status, 0, &usage) < 0)
    if (errno != EINTR) bench::die_errno("wait4");
  std::uint64_t end = bench::now_ns();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "process_start: %s failed in variant %s (status %d)\n", argv[0],
                 variant.name.c_str(), status);
    std::exit(1);
  }
  if (!keep) return;
  auto us = [](const timeval& tv) { return double(tv.tv_sec) * 1e6 + double(tv.tv_usec); };
  variant.wall_us.push_back(double(end - start) / 1000.0);
  variant.cpu_us.push_back(us(usage.ru_utime) + us(usage.ru_stime));
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 200, warmup = 5;
  std::vector<Variant> variants;
  int index = 1;
  for (; index < argc; ++index) {
    std::string_view argument = argv[index];
    if (argument == "--") { ++index; break; }
    if (index + 1 >= argc) usage();
    std::string_view value = argv[++index];
    if (argument == "--runs") runs = long(bench::parse_size(value));
    else if (argument == "--warmup") warmup = long(bench::parse_size(value));
    else if (argument == "--variant") {
      auto equals = value.find('=');
      if (equals == 0 || equals == std::string_view::npos) usage();
      Variant variant;
      variant.name = value.substr(0, equals);
      std::string_view preload = value.substr(equals + 1);
      // The caller's environment less LD_PRELOAD, plus this variant's.
      for (char** entry = environ; *entry; ++entry)
        if (std::string_view(*entry).substr(0, 11) != "LD_PRELOAD=") variant.environment.emplace_back(*entry);
      if (!preload.empty()) variant.environment.push_back("LD_PRELOAD=" + std::string(preload));
      variants.push_back(std::move(variant));
    } else {
      usage();
    }
  }
  if (index >= argc || variants.empty() || runs <= 0 || warmup < 0) usage();
  char* const* program = argv + index;

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);

  for (long i = 0; i < warmup + runs; ++i)
    for (auto& variant : variants) run_once(program, variant, &actions, i >= warmup);
  posix_spawn_file_actions_destroy(&actions);

  std::string json = "{\"benchmark\":\"process_start\",\"program\":\"" + std::string(program[0]) +
                     "\",\"runs\":" + std::to_string(runs);
  for (auto& variant : variants) {
    char fields[256];
    std::snprintf(fields, sizeof fields,
                  ",\"%s_wall_us_median\":%.1f,\"%s_wall_us_mean\":%.1f,\"%s_cpu_us_median\":%.1f",
                  variant.name.c_str(), median(variant.wall_us), variant.name.c_str(),
                  mean(variant.wall_us), variant.name.c_str(), median(variant.cpu_us));
    json += fields;
    std::fprintf(stderr, "process_start %s (%s): wall median %.1f us, mean %.1f us; CPU median %.1f us\n",
                 program[0], variant.name.c_str(), median(variant.wall_us), mean(variant.wall_us),
                 median(variant.cpu_us));
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
