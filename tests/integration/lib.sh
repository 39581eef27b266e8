# lib.sh: shared helpers for qpsock's integration tests (sourced, not run).
#
# Every scenario runs the same real programs once per "runner" and compares
# what came out (sha256 checksums, exit statuses). A runner says how a program
# is started:
#   plain             the program alone (LD_PRELOAD removed)
#   qpsock            under scripts/qpsock-run with $QPSOCK_LIBRARY
#   qpsock:OPTIONS    the same with extra qpsock-run options, split on spaces,
#                     e.g. "qpsock:-c /path/shm.conf" or "qpsock:--set spin_us=0"
# A scenario's runners are its arguments, else $QPSOCK_INTEG_RUNNERS (';'
# separated), else "plain" and "qpsock". The first runner is the reference.
#
# Environment (ctest sets it, see CMakeLists.txt):
#   QPSOCK_LIBRARY        libqpsock.so under test (required by qpsock runners)
#   QPSOCK_SOURCE_DIR     the source tree (for scripts/qpsock-run)
#   QPSOCK_BINARY_DIR     the build tree
#   QPSOCK_PROGRAMS_DIR   where tests/programs built its programs
#   QPSOCK_JAVA_JAR       the jar of tests/programs/java (empty: Java missing)
#   QPSOCK_INTEG_KEEP=1   keep the temporary directory (for debugging)
#
# Nothing here ever talks to anything but 127.0.0.1 and ::1, and every
# command runs under a timeout: a hang is a failure, never a stuck test.
#
# A scenario looks like:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   parse_runners "$@"
#   for runner in "${RUNNERS[@]}"; do
#     start_server "$runner" server.X my_server --port @PORT@ || continue
#     run_under "$runner" 30 my_client "$SERVER_PORT" >"$TEST_TMP/out.X" || ...
#     assert_same_checksum "what" "$TEST_TMP/expected" "$TEST_TMP/out.X"
#   done
#   finish
#
# Helpers: pass, fail, die, check, log; with_timeout; runner_prefix, run_under,
# run_plain, run_qpsock, runner_loads_qpsock, runner_tag; start_background,
# start_under, start_server, wait_background, stop_background,
# background_running, background_log; free_port, port_listening,
# wait_for_port; random_file, sha256_of, assert_same_checksum, assert_equal,
# assert_status, assert_preload_state, assert_log_preload_state;
# require_tools, require_program; finish. The exit trap kills every program
# started (TERM, then KILL, by pid), prints the logs if anything failed and
# removes $TEST_TMP.

set -Eeuo pipefail
shopt -s inherit_errexit 2>/dev/null || true

TEST_NAME=${TEST_NAME:-$(basename "${BASH_SOURCE[1]:-$0}" .sh)}
INTEG_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
QPSOCK_SOURCE_DIR=${QPSOCK_SOURCE_DIR:-$(cd "$INTEG_DIR/../.." && pwd)}
QPSOCK_BINARY_DIR=${QPSOCK_BINARY_DIR:-$QPSOCK_SOURCE_DIR/build}
QPSOCK_PROGRAMS_DIR=${QPSOCK_PROGRAMS_DIR:-$QPSOCK_BINARY_DIR/tests/programs}
QPSOCK_JAVA_JAR=${QPSOCK_JAVA_JAR-$QPSOCK_PROGRAMS_DIR/java/qpsock_test_programs.jar}
QPSOCK_RUN=${QPSOCK_RUN:-$QPSOCK_SOURCE_DIR/scripts/qpsock-run}
# Grace period between TERM and KILL, for timeouts and for cleanup.
KILL_GRACE=${KILL_GRACE:-3}
# Upper bound on any background program's life.
BACKGROUND_TIMEOUT=${BACKGROUND_TIMEOUT:-120}

# Loopback only: no proxy may route a test's traffic anywhere else.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY ftp_proxy FTP_PROXY
export no_proxy='*' NO_PROXY='*'
# The reference run must not inherit a preload from whoever started us.
unset LD_PRELOAD

TEST_TMP=$(mktemp -d "/tmp/qpsock-integ-${TEST_NAME}.XXXXXX")
LOG_DIR=$TEST_TMP/logs
mkdir -p "$LOG_DIR"

# The script's own stdout and stderr, kept for PASS/FAIL lines and logs: a
# check or a trap may run while a function's output is redirected to a file.
# Closed in every program started (see with_timeout, start_background).
exec {REPORT_FD}>&1 {ERROR_FD}>&2

FAILURES=0
CHECKS=0
FOREGROUND_PID=""
declare -a BG_NAMES=()
declare -A BG_PID=()     # name -> pid of the timeout wrapping it
declare -A BG_STATUS=()  # name -> exit status once reaped
declare -a RUNNERS=()

# ---------------------------------------------------------------- output

log() { printf '[%s] %s\n' "$TEST_NAME" "$*" >&"$ERROR_FD"; }

pass() {
  CHECKS=$((CHECKS + 1))
  printf 'PASS %s: %s\n' "$TEST_NAME" "$*" >&"$REPORT_FD"
}

# Records a failed check and goes on (the test exits non-zero at the end).
fail() {
  CHECKS=$((CHECKS + 1))
  FAILURES=$((FAILURES + 1))
  printf 'FAIL %s: %s\n' "$TEST_NAME" "$*" >&"$REPORT_FD"
}

# A failure after which nothing sensible can follow.
die() {
  fail "$*"
  exit 1
}

# check DESCRIPTION CMD...: PASS if CMD succeeds, else FAIL.
check() {
  local description=$1
  shift
  if "$@"; then pass "$description"; else fail "$description"; fi
}

dump_logs() {
  exec 1>&"$ERROR_FD" 2>&"$ERROR_FD"
  local file
  shopt -s nullglob
  for file in "$LOG_DIR"/*; do
    [[ -s "$file" ]] || continue
    printf '\n----- %s (last 60 lines) -----\n' "${file#"$TEST_TMP"/}" >&2
    tail -n 60 "$file" >&2 || true
  done
  shopt -u nullglob
  printf '\n----- end of logs (from %s; QPSOCK_INTEG_KEEP=1 keeps it) -----\n' "$TEST_TMP" >&2
}

# ---------------------------------------------------------------- cleanup

# True if PID exists and is not a zombie waiting to be reaped.
pid_alive() {
  local state
  state=$(sed -e 's/.*) //' -e 's/ .*//' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z ]]
}

# TERM, then after KILL_GRACE seconds KILL, one pid.
terminate_pid() {
  local pid=$1 waited=0
  pid_alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  while pid_alive "$pid" && ((waited < KILL_GRACE * 20)); do
    sleep 0.05
    waited=$((waited + 1))
  done
  if pid_alive "$pid"; then
    # timeout(1) forwards TERM to its child; the group holds the stragglers.
    kill -KILL -- "-$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  fi
}

on_exit() {
  local status=$?
  trap - EXIT ERR INT TERM HUP
  set +e
  local name
  [[ -n "${FOREGROUND_PID:-}" ]] && terminate_pid "$FOREGROUND_PID"
  for name in "${BG_NAMES[@]}"; do
    [[ -n "${BG_STATUS[$name]:-}" ]] && continue
    terminate_pid "${BG_PID[$name]}"
    wait "${BG_PID[$name]}" 2>/dev/null
  done
  if ((status != 0 || FAILURES > 0)); then
    dump_logs
    ((status != 0)) || status=1
  fi
  if [[ "${QPSOCK_INTEG_KEEP:-0}" == 1 ]]; then
    log "kept $TEST_TMP"
  else
    rm -rf -- "$TEST_TMP"
  fi
  exit "$status"
}

on_error() {
  local status=$? line=$1 command=$2
  fail "unexpected error (status $status) at ${BASH_SOURCE[1]##*/}:$line: $command"
  exit "$status"
}

on_signal() {
  fail "interrupted by SIG$1"
  exit "$2"
}

trap on_exit EXIT
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

# ---------------------------------------------------------------- timeouts

# with_timeout SECS CMD...: CMD, killed (TERM, then KILL) after SECS seconds.
# Returns CMD's status; 124 means it timed out (and says so).
with_timeout() {
  local seconds=$1 status=0
  shift
  # In the background and waited for, so that a signal to this script is
  # handled at once (bash defers traps until a foreground child ends); the
  # exit trap kills it. Stdin is passed on explicitly.
  timeout -k "$KILL_GRACE" "$seconds" "$@" <&0 {REPORT_FD}>&- {ERROR_FD}>&- &
  FOREGROUND_PID=$!
  wait "$FOREGROUND_PID" || status=$?
  FOREGROUND_PID=""
  if ((status == 124 || status == 137)); then
    log "timed out after ${seconds}s: $*"
  fi
  return "$status"
}

# ---------------------------------------------------------------- runners

# runner_prefix RUNNER: sets the array RUNNER_PREFIX to the words that start a
# program under RUNNER.
runner_prefix() {
  local runner=$1
  case "$runner" in
    plain)
      RUNNER_PREFIX=(env -u LD_PRELOAD) ;;
    qpsock | qpsock:*)
      [[ -n "${QPSOCK_LIBRARY:-}" && -f "$QPSOCK_LIBRARY" ]] ||
        die "runner $runner: QPSOCK_LIBRARY (${QPSOCK_LIBRARY:-unset}) is not a file"
      RUNNER_PREFIX=("$QPSOCK_RUN" --library "$QPSOCK_LIBRARY")
      if [[ "$runner" == qpsock:* ]]; then
        local -a options
        read -r -a options <<<"${runner#qpsock:}"
        RUNNER_PREFIX+=("${options[@]}")
      fi
      RUNNER_PREFIX+=(--) ;;
    *) die "unknown runner '$runner' (plain, qpsock or qpsock:OPTIONS)" ;;
  esac
}

# True if programs started under RUNNER should have libqpsock.so loaded.
runner_loads_qpsock() { [[ "$1" == qpsock || "$1" == qpsock:* ]]; }

# A name for files: the runner with everything odd replaced.
runner_tag() {
  local tag=${1//[^A-Za-z0-9_.-]/_}
  printf '%s' "${tag:0:60}"
}

# run_under RUNNER SECS CMD...: CMD in the foreground under RUNNER and a timeout.
run_under() {
  local runner=$1 seconds=$2
  shift 2
  runner_prefix "$runner"
  with_timeout "$seconds" "${RUNNER_PREFIX[@]}" "$@"
}

# The two fixed runners as prefixes: run_plain SECS CMD..., run_qpsock SECS CMD...
run_plain() { run_under plain "$@"; }
run_qpsock() { run_under qpsock "$@"; }

# Sets RUNNERS from the scenario's arguments (or the defaults).
parse_runners() {
  RUNNERS=()
  if (($# > 0)); then
    RUNNERS=("$@")
  elif [[ -n "${QPSOCK_INTEG_RUNNERS:-}" ]]; then
    IFS=';' read -r -a RUNNERS <<<"$QPSOCK_INTEG_RUNNERS"
  else
    RUNNERS=(plain qpsock)
  fi
  local runner
  for runner in "${RUNNERS[@]}"; do runner_prefix "$runner"; done
  log "runners: ${RUNNERS[*]}"
}

# ---------------------------------------------------------------- background

# start_background NAME CMD...: CMD in the background (stdin /dev/null, stdout
# and stderr to $LOG_DIR/NAME.log) under a BACKGROUND_TIMEOUT ceiling. Killed
# at exit if still running.
start_background() {
  local name=$1
  shift
  [[ -z "${BG_PID[$name]:-}" ]] || die "start_background: '$name' started twice"
  timeout -k "$KILL_GRACE" "$BACKGROUND_TIMEOUT" "$@" </dev/null >"$LOG_DIR/$name.log" 2>&1 \
    {REPORT_FD}>&- {ERROR_FD}>&- &
  BG_PID[$name]=$!
  BG_NAMES+=("$name")
}

# start_under RUNNER NAME CMD...: start_background with RUNNER's prefix.
start_under() {
  local runner=$1 name=$2
  shift 2
  runner_prefix "$runner"
  start_background "$name" "${RUNNER_PREFIX[@]}" "$@"
}

background_log() { printf '%s' "$LOG_DIR/$1.log"; }

background_running() {
  local name=$1
  [[ -z "${BG_STATUS[$name]:-}" ]] && pid_alive "${BG_PID[$name]}"
}

# wait_background NAME: waits for NAME (bounded by its timeout ceiling) and
# returns its exit status.
wait_background() {
  local name=$1 status=0
  [[ -n "${BG_PID[$name]:-}" ]] || die "wait_background: no job '$name'"
  if [[ -z "${BG_STATUS[$name]:-}" ]]; then
    wait "${BG_PID[$name]}" || status=$?
    BG_STATUS[$name]=$status
  fi
  return "${BG_STATUS[$name]}"
}

# stop_background NAME: TERM (then KILL) a job that runs until told to stop.
stop_background() {
  local name=$1
  [[ -n "${BG_STATUS[$name]:-}" ]] && return 0
  terminate_pid "${BG_PID[$name]}"
  wait_background "$name" || true
}

# program_pid NAME: the pid of the program itself (the child of the timeout
# wrapper; env and qpsock-run exec into it).
program_pid() {
  local child
  child=$(pgrep -P "${BG_PID[$1]}" | head -n 1) || true
  [[ -n "$child" ]] || return 1
  printf '%s' "$child"
}

# assert_preload_state NAME RUNNER: checks that NAME's program has
# libqpsock.so mapped exactly when RUNNER loads it.
assert_preload_state() {
  local name=$1 runner=$2 pid loaded=no
  pid=$(program_pid "$name") || { fail "$name ($runner): no program process to inspect"; return; }
  if grep -q 'libqpsock\.so' "/proc/$pid/maps" 2>/dev/null; then loaded=yes; fi
  if runner_loads_qpsock "$runner"; then
    if [[ $loaded == yes ]]; then
      pass "$name ($runner): libqpsock.so is loaded (pid $pid)"
    else
      fail "$name ($runner): libqpsock.so is NOT loaded in pid $pid"
    fi
  elif [[ $loaded == no ]]; then
    pass "$name ($runner): runs without libqpsock.so (pid $pid)"
  else
    fail "$name ($runner): libqpsock.so is loaded in pid $pid though the runner is plain"
  fi
}

# assert_log_preload_state DESCRIPTION LOG RUNNER: the test programs print
# "qpsock=loaded" or "qpsock=absent" (from their /proc/self/maps) in their
# logs; checks that every such line in LOG says what RUNNER implies.
assert_log_preload_state() {
  local description=$1 file=$2 runner=$3 states expected=absent
  runner_loads_qpsock "$runner" && expected=loaded
  states=$(grep -o 'qpsock=[a-z]*' "$file" 2>/dev/null | sort -u | tr '\n' ' ') || true
  states=${states% }
  if [[ "$states" == "qpsock=$expected" ]]; then
    pass "$description ($runner): libqpsock.so $expected"
  else
    fail "$description ($runner): expected qpsock=$expected, the program reported '${states:-nothing}'"
  fi
}

# ---------------------------------------------------------------- ports

# free_port: a TCP port on 127.0.0.1 the kernel just handed out (and freed).
free_port() {
  with_timeout 10 python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# True if something listens on TCP PORT (IPv4 or IPv6), from /proc/net: no
# connection is made, so one-shot servers keep their only accept.
port_listening() {
  local hex
  hex=$(printf '%04X' "$1")
  awk -v port="$hex" '$4 == "0A" { split($2, a, ":"); if (a[2] == port) found = 1 }
                      END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# wait_for_port PORT TIMEOUT [NAME]: waits until PORT listens. Returns 0 once
# it does, 1 after TIMEOUT seconds, 2 as soon as the background job NAME has
# exited (it will never listen then). Records no check: callers decide.
wait_for_port() {
  local port=$1 seconds=$2 name=${3:-} deadline
  deadline=$((SECONDS + seconds))
  while ! port_listening "$port"; do
    if [[ -n "$name" ]] && ! background_running "$name"; then
      wait_background "$name" || true
      log "$name exited (status ${BG_STATUS[$name]}) before listening on port $port"
      return 2
    fi
    if ((SECONDS >= deadline)); then
      log "nothing listens on port $port after ${seconds}s${name:+ ($name)}"
      return 1
    fi
    sleep 0.05
  done
}

# forget_background NAME: drops a finished job (its log is kept as NAME.failed-N.log).
forget_background() {
  local name=$1 attempt=1 kept=() other
  while [[ -e "$LOG_DIR/$name.failed-$attempt.log" ]]; do attempt=$((attempt + 1)); done
  mv -f "$LOG_DIR/$name.log" "$LOG_DIR/$name.failed-$attempt.log" 2>/dev/null || true
  for other in "${BG_NAMES[@]}"; do [[ "$other" == "$name" ]] || kept+=("$other"); done
  BG_NAMES=("${kept[@]}")
  unset "BG_PID[$name]" "BG_STATUS[$name]"
}

# start_server RUNNER NAME CMD...: starts a server under RUNNER in the
# background with every word @PORT@ of CMD replaced by a free port, waits
# until it listens, and checks its preload state (assert_preload_state).
# Another process can take the port between free_port and the server's bind,
# so a server that exits before listening is retried on a new port (3 tries).
# Sets SERVER_PORT; returns non-zero (with a FAIL) if it never listens.
SERVER_PORT=""
start_server() {
  local runner=$1 name=$2 attempt status
  shift 2
  local -a command
  for attempt in 1 2 3; do
    SERVER_PORT=$(free_port)
    command=("${@//@PORT@/$SERVER_PORT}")
    start_under "$runner" "$name" "${command[@]}"
    status=0
    wait_for_port "$SERVER_PORT" 20 "$name" || status=$?
    if ((status == 0)); then
      assert_preload_state "$name" "$runner"
      return 0
    fi
    if ((status == 1)); then
      fail "$name ($runner): not listening on port $SERVER_PORT after 20s"
      return 1
    fi
    if ((attempt < 3)); then
      log "$name: retrying on another port"
      forget_background "$name"
    fi
  done
  fail "$name ($runner): exited before listening, 3 times (last status ${BG_STATUS[$name]})"
  return 1
}

# ---------------------------------------------------------------- data

# random_file PATH SIZE: SIZE (as head -c takes it: 1, 1M, 100M) random bytes.
random_file() {
  with_timeout 60 head -c "$2" /dev/urandom >"$1"
}

sha256_of() { sha256sum <"$1" | cut -d' ' -f1; }

# assert_same_checksum DESCRIPTION EXPECTED_FILE ACTUAL_FILE
assert_same_checksum() {
  local description=$1 expected=$2 actual=$3 want got
  if [[ ! -f "$actual" ]]; then
    fail "$description: $actual was not written"
    return
  fi
  want=$(sha256_of "$expected")
  got=$(sha256_of "$actual")
  if [[ "$want" == "$got" ]]; then
    pass "$description: sha256 ${want:0:16}… ($(stat -c %s "$actual") bytes)"
  else
    fail "$description: sha256 $got (size $(stat -c %s "$actual")) != expected $want (size $(stat -c %s "$expected"))"
  fi
}

# make_served_files DIRECTORY LARGE_SIZE: files of 0 B, 1 B, 1 MiB and
# LARGE_SIZE random bytes for a web server to serve; their names in FILES.
make_served_files() {
  local directory=$1 large_size=$2
  mkdir -p "$directory"
  : >"$directory/empty.bin"
  random_file "$directory/one.bin" 1
  random_file "$directory/mib.bin" 1M
  random_file "$directory/large.bin" "$large_size"
  FILES=(empty.bin one.bin mib.bin large.bin)
}

# download_at_once RUNNER TAG URL SERVED OUT FILE...: every download at once
# under RUNNER, two curls per FILE (URL/FILE) and one curl fetching them all,
# into OUT; each must exit 0 and each copy match SERVED/FILE by sha256.
download_at_once() {
  local runner=$1 tag=$2 url=$3 served=$4 out=$5 file copy job status
  shift 5
  local -a files=("$@") jobs=() all_arguments=()
  local -a options=(--fail --silent --show-error --http1.1 --noproxy '*' --connect-timeout 10 --max-time 40)
  for file in "${files[@]}"; do
    for copy in 1 2; do
      start_under "$runner" "curl.$tag.$file.$copy" curl "${options[@]}" -o "$out/$file.$copy" "$url/$file"
      jobs+=("curl.$tag.$file.$copy")
    done
    all_arguments+=(-o "$out/$file.all" "$url/$file")
  done
  start_under "$runner" "curl.$tag.all" curl "${options[@]}" "${all_arguments[@]}"
  jobs+=("curl.$tag.all")
  for job in "${jobs[@]}"; do
    status=0
    wait_background "$job" || status=$?
    assert_equal "${job%%.*} ${job#*."$tag".} ($runner)" 0 "$status"
  done
  for file in "${files[@]}"; do
    for copy in 1 2 all; do
      assert_same_checksum "GET $url/$file, copy $copy ($runner)" "$served/$file" "$out/$file.$copy"
    done
  done
}

# assert_equal DESCRIPTION EXPECTED ACTUAL
assert_equal() {
  if [[ "$2" == "$3" ]]; then pass "$1: $3"; else fail "$1: got '$3', expected '$2'"; fi
}

# assert_status DESCRIPTION EXPECTED CMD...: runs CMD and compares its status.
assert_status() {
  local description=$1 expected=$2 status=0
  shift 2
  "$@" || status=$?
  assert_equal "$description (exit status)" "$expected" "$status"
}

# require_tools TOOL...: every tool must exist; the suite's setup installs
# them (socat netcat-openbsd iperf3 curl nginx-light rsync), so a missing one is a failure.
require_tools() {
  local tool missing=()
  for tool in "$@"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  if ((${#missing[@]} > 0)); then
    die "required tool(s) missing: ${missing[*]} (install with: apt-get install socat netcat-openbsd iperf3 curl nginx-light rsync, or run scripts/setup-debian)"
  fi
}

require_program() {
  [[ -x "$QPSOCK_PROGRAMS_DIR/$1" ]] ||
    die "test program $QPSOCK_PROGRAMS_DIR/$1 is missing: build the project first"
}

# check_qpsock_errors: qpsock's own "qpsock[PID]: error: ..." lines in any
# program's log are a failure (warnings are only counted), except in logs
# named *.expected-errors.log, where a scenario provokes them on purpose.
check_qpsock_errors() {
  local errors warnings
  errors=$(grep -rh --exclude='*.expected-errors.log' 'qpsock\[[0-9]*\]: error:' "$LOG_DIR" 2>/dev/null |
    head -n 5) || true
  warnings=$(grep -rh 'qpsock\[[0-9]*\]: warn:' "$LOG_DIR" 2>/dev/null | wc -l) || true
  [[ "${warnings:-0}" == 0 ]] || log "qpsock logged $warnings warning(s) (see the logs)"
  if [[ -n "$errors" ]]; then
    fail "qpsock logged errors, first ones: ${errors//$'\n'/ | }"
  fi
}

# finish: the summary line and the exit status.
finish() {
  check_qpsock_errors
  if ((FAILURES > 0)); then
    printf 'FAIL %s: %d of %d checks failed\n' "$TEST_NAME" "$FAILURES" "$CHECKS" >&"$REPORT_FD"
    exit 1
  fi
  printf 'PASS %s: all %d checks passed (runners: %s)\n' "$TEST_NAME" "$CHECKS" "${RUNNERS[*]}" >&"$REPORT_FD"
  exit 0
}
