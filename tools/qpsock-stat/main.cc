// qpsock-stat: the processes running qpsock and their connections (qpsock-stat(1)).
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "report.h"
#include "snapshot.h"

namespace {

constexpr const char* kUsage = R"(Usage: qpsock-stat [OPTIONS]

Lists the processes running qpsock and their TCP connections: local and peer
address, role, path (pending, kernel, shm or rdma), bytes each way over TCP
and offloaded, and why the connection is on its path.

Options:
  -p, --pid PID    only process PID (and connections PID inherited)
  -j, --json       one JSON document instead of the table (see qpsock-stat(1))
  -d, --dir DIR    read DIR instead of $QPSOCK_STAT_DIR, /run/qpsock,
                   /dev/shm/qpsock-<uid> and /tmp/qpsock-<uid>
  -h, --help       show this help
  -V, --version    show the version

The exit status is 0 when the statistics could be read, even if no process
runs qpsock; 2 for a bad option.
)";

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "qpsock-stat: " << message << " (see qpsock-stat --help)\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  long pid = 0;
  std::string directory;
  for (int index = 1; index < argc; ++index) {
    const std::string option = argv[index];
    auto value = [&](const char* what) -> std::string {
      const auto equals = option.find('=');
      if (option.rfind("--", 0) == 0 && equals != std::string::npos) return option.substr(equals + 1);
      if (index + 1 >= argc) usage_error(option + " needs " + what);
      return argv[++index];
    };
    const std::string name = option.substr(0, option.find('='));
    if (name == "-j" || name == "--json") {
      json = true;
    } else if (name == "-p" || name == "--pid") {
      const std::string text = value("a pid");
      char* end = nullptr;
      pid = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || pid <= 0) usage_error("not a pid: '" + text + "'");
    } else if (name == "-d" || name == "--dir") {
      directory = value("a directory");
    } else if (name == "-h" || name == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (name == "-V" || name == "--version") {
      std::cout << "qpsock-stat 0.1.0\n";
      return 0;
    } else {
      usage_error("unknown option '" + option + "'");
    }
  }

  using namespace qpsock::stat_tool;
  std::vector<ProcessSnapshot> processes = read_processes(stat_directories(directory));
  if (pid != 0) {
    std::vector<ProcessSnapshot> selected;
    for (ProcessSnapshot& process : processes) {
      if (process.pid != pid) {
        // Keep only the rows PID holds (connections it inherited).
        std::erase_if(process.connections, [pid](const ConnectionSnapshot& row) {
          for (pid_t user : row.pids)
            if (user == pid) return false;
          return true;
        });
        if (process.connections.empty()) continue;
      }
      selected.push_back(std::move(process));
    }
    processes = std::move(selected);
  }
  if (json) {
    write_json(std::cout, processes);
  } else {
    write_table(std::cout, processes);
  }
  return std::cout.good() ? 0 : 1;
}
