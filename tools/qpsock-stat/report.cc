#include "report.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <string>

namespace qpsock::stat_tool {
namespace format = stats::format;
namespace {

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += static_cast<char>(c);
    } else if (c < 0x20) {
      char escaped[8];
      snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      quoted += escaped;
    } else {
      quoted += static_cast<char>(c);
    }
  }
  return quoted + "\"";
}

void write_bytes_json(std::ostream& out, const uint64_t (&bytes)[2], uint64_t zero_copy) {
  out << "{\"tcp\":" << bytes[format::kTcp] << ",\"offloaded\":" << bytes[format::kOffloaded]
      << ",\"zero_copy\":" << zero_copy << ",\"total\":" << bytes[format::kTcp] + bytes[format::kOffloaded]
      << "}";
}

// "1234", "1234+56" (TCP + offloaded) when anything went offloaded, and
// "1234+56 (zc 40)" when some of that moved zero-copy.
std::string bytes_text(const uint64_t (&bytes)[2], uint64_t zero_copy) {
  std::string text = std::to_string(bytes[format::kTcp]);
  if (bytes[format::kOffloaded] != 0) text += "+" + std::to_string(bytes[format::kOffloaded]);
  if (zero_copy != 0) text += " (zc " + std::to_string(zero_copy) + ")";
  return text;
}

std::string pids_text(const std::vector<pid_t>& pids) {
  std::string text;
  for (pid_t pid : pids) text += (text.empty() ? "" : ",") + std::to_string(pid);
  return text;
}

}  // namespace

void write_table(std::ostream& out, const std::vector<ProcessSnapshot>& processes) {
  if (processes.empty()) {
    out << "no process running qpsock has recorded a connection\n";
    return;
  }
  bool first = true;
  for (const ProcessSnapshot& process : processes) {
    if (!first) out << "\n";
    first = false;
    out << "PID " << process.pid << "  " << process.program << (process.alive ? "" : "  (exited)") << "  "
        << process.connections.size() << " connection(s)";
    if (process.dropped != 0) out << ", " << process.dropped << " not recorded (table full)";
    out << "\n";
    if (process.connections.empty()) continue;
    // Byte columns as wide as their longest entry ("315768+1073426056").
    size_t bytes_width = 16;
    for (const ConnectionSnapshot& row : process.connections)
      for (int direction : {format::kSent, format::kReceived})
        bytes_width = std::max(
            bytes_width, bytes_text(row.bytes[direction], row.zero_copy[direction]).size() + 2);
    const int width = static_cast<int>(bytes_width);
    out << std::left << "  " << std::setw(24) << "LOCAL" << std::setw(24) << "PEER" << std::setw(7)
        << "ROLE" << std::setw(8) << "PATH" << std::setw(width) << "SENT" << std::setw(width) << "RECEIVED"
        << "REASON\n";
    for (const ConnectionSnapshot& row : process.connections) {
      out << "  " << std::setw(24) << row.local << std::setw(24) << row.peer << std::setw(7)
          << format::role_name(row.role) << std::setw(8) << format::path_name(row.path) << std::setw(width)
          << bytes_text(row.bytes[format::kSent], row.zero_copy[format::kSent]) << std::setw(width)
          << bytes_text(row.bytes[format::kReceived], row.zero_copy[format::kReceived]) << row.reason;
      if (row.pids.size() > 1 || (row.pids.size() == 1 && row.pids[0] != process.pid))
        out << " [pids " << pids_text(row.pids) << "]";
      out << "\n";
    }
  }
  out << "\nSENT and RECEIVED are bytes over TCP, plus offloaded bytes after '+' if any; \"zc\": of\n"
         "those, the ones that moved zero-copy (large writes, by rendezvous).\n";
}

void write_json(std::ostream& out, const std::vector<ProcessSnapshot>& processes) {
  out << "{\"version\":" << format::kVersion << ",\"processes\":[";
  for (size_t p = 0; p < processes.size(); ++p) {
    const ProcessSnapshot& process = processes[p];
    out << (p ? "," : "") << "\n {\"pid\":" << process.pid << ",\"program\":" << json_string(process.program)
        << ",\"start_time\":" << process.start_time << ",\"alive\":" << (process.alive ? "true" : "false")
        << ",\"file\":" << json_string(process.file) << ",\"dropped\":" << process.dropped
        << ",\"connections\":[";
    for (size_t c = 0; c < process.connections.size(); ++c) {
      const ConnectionSnapshot& row = process.connections[c];
      out << (c ? "," : "") << "\n  {\"local\":" << json_string(row.local)
          << ",\"peer\":" << json_string(row.peer) << ",\"role\":\"" << format::role_name(row.role)
          << "\",\"path\":\"" << format::path_name(row.path) << "\",\"decision\":"
          << json_string(row.decision) << ",\"reason\":" << json_string(row.reason) << ",\"sent\":";
      write_bytes_json(out, row.bytes[format::kSent], row.zero_copy[format::kSent]);
      out << ",\"received\":";
      write_bytes_json(out, row.bytes[format::kReceived], row.zero_copy[format::kReceived]);
      out << ",\"pids\":[" << pids_text(row.pids) << "],\"opened_ns\":" << row.opened_ns << "}";
    }
    out << "]}";
  }
  out << "\n]}\n";
}

}  // namespace qpsock::stat_tool
