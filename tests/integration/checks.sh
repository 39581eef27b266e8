# checks.sh: sourced by the integration tests that do not use lib.sh's
# runners (the upgrade tests: each proves one scenario in its own way).
#
#   source checks.sh [--own-network-namespace] "$@"
#
# With --own-network-namespace, the script re-runs itself in a new network
# namespace (so the kernel's IP counters count only its own traffic, and
# fixed ports are safe) and brings lo up there; without root it exits 77
# (ctest's SKIP_RETURN_CODE). Then it gets:
#   WORK      a temporary directory, removed at exit
#   PIDS      pids to kill at exit (each one's children first: a timeout
#             killed alone would leave its program running)
#   pass/fail one "ok:"/"FAIL:" line each; fail counts into $failures
#   out_octets the kernel's IP output byte counter (IpExt OutOctets)
#   switched_tcp_bytes LOG...  what the connections in these debug logs sent
#             over TCP before their switch to the offloaded stream
#   listening PORT  whether a TCP listener is on PORT
if [[ ${1:-} == --own-network-namespace ]]; then
  shift
  if [[ ${QPSOCK_IN_NAMESPACE:-} != 1 ]]; then
    if [[ $(id -u) != 0 ]] || ! unshare --net true 2>/dev/null; then
      echo "$(basename "$0" .sh): needs root for a network namespace; skipped" >&2
      exit 77
    fi
    exec unshare --net env QPSOCK_IN_NAMESPACE=1 bash "$0" "$@"
  fi
  ip link set lo up
fi

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do pkill -KILL -P "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*" >&2; }
# log_says LOG PATTERN WHAT: passes WHAT if LOG has a line matching PATTERN;
# else fails, showing the log.
log_says() {
  if grep -q "$2" "$1"; then
    pass "$3"
  else
    fail "$3: no '$2' in $1"
    cat "$1" >&2
  fi
}
# listening PORT: something listens on TCP PORT (IPv4) here.
listening() {
  awk -v port="$(printf '%04X' "$1")" '$4 == "0A" { split($2, a, ":"); if (a[2] == port) found = 1 }
                                           END { exit !found }' /proc/net/tcp
}
# What the kernel's IP layer has sent (the namespace's own, in one).
out_octets() { awk '/^IpExt:/ { if (header) { print $9; exit } header = 1 }' /proc/net/netstat; }
switched_tcp_bytes() {
  cat "$@" | awk '/sending switched to the stream after [0-9]+ TCP bytes/ {
                    for (i = 1; i < NF; i++) if ($i == "after") sum += $(i + 1) }
                  END { printf "%.0f\n", sum }'
}
