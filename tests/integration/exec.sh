#!/usr/bin/env bash
# exec, environments and exit statuses under the runner:
#  - a server accepts a connection, echoes its first bytes itself, then execs
#    a different program (fd_echo) that inherits the connected socket (fd
#    number in argv) and echoes the rest; the client's report must match
#    across runners.
#  - programs that start others with an EMPTY environment (execve with an
#    empty envp and with envp NULL, execle,
#    execvpe, fexecve, fork+execve, vfork+execve, posix_spawn, posix_spawnp,
#    clearenv+system, clearenv+popen, env -i, Java ProcessBuilder with a cleared environment):
#    the program started must have libqpsock.so loaded exactly when the
#    runner loads it (qpsock keeps itself across exec).
#  - the exit status is propagated (3 gives 3, 0 gives 0, death by SIGTERM
#    gives 143).
#  - a shell script (bash, talking over /dev/tcp) and `java -jar` run
#    under the runner with the same output; the script's socket is renumbered
#    by bash before its upgrade, and its children inherit it after; a script
#    whose background child reads the socket it connected keeps it on TCP,
#    and a program handed the socket after its upgrade fails with ECONNRESET.
#  - so does a program that a client started beside itself (posix_spawn,
#    system, popen) after its upgrade, and the client's stream goes on.
#  - a program that clears its own environment before its first socket (as
#    daemons and nginx's workers do) keeps the settings it started with: its
#    log goes to the file named, and QPSOCK_OFFLOAD=0 keeps it on TCP.
# usage: exec.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools java env
# The cases after an upgrade need it before the exec or spawn: met at the
# first I/O. (With the default delay such a socket is still on TCP then, and
# simply goes on there: fork_upgrade.sh and fd_passing.sh cover that.)
export QPSOCK_SHM_UPGRADE_DELAY=0
for program in exec_probe fd_echo echo_client fork_echo_server; do require_program "$program"; done
[[ -n "$QPSOCK_JAVA_JAR" && -f "$QPSOCK_JAVA_JAR" ]] ||
  die "the Java test programs are not built (QPSOCK_JAVA_JAR='$QPSOCK_JAVA_JAR'): install a JDK 17 (javac) and re-run cmake"

PROBE=$QPSOCK_PROGRAMS_DIR/exec_probe
for script in shell_probe.sh shell_reader_child.sh shell_child_after_upgrade.sh; do
  cp "$QPSOCK_SOURCE_DIR/tests/programs/$script" "$TEST_TMP/$script"
  chmod +x "$TEST_TMP/$script"
done
JAVA_OPTIONS=(-XX:+UseSerialGC -Xmx128m -XX:TieredStopAtLevel=1 -Xshare:auto)
declare -A REFERENCE=()

# compare_with_reference KEY DESCRIPTION FILE: the first runner's FILE is the
# reference for KEY; later runners' must have the same sha256.
compare_with_reference() {
  local key=$1 description=$2 file=$3
  if [[ -z "${REFERENCE[$key]:-}" ]]; then
    REFERENCE[$key]=$file
  else
    assert_same_checksum "$description vs ${RUNNERS[0]}" "${REFERENCE[$key]}" "$file"
  fi
}

# expect_state DESCRIPTION RUNNER OUTPUT_FILE STATUS
expect_state() {
  local description=$1 runner=$2 output=$3 status=$4 expected=absent actual
  runner_loads_qpsock "$runner" && expected=loaded
  actual=$(grep -o 'qpsock=[a-z]*' "$output" | tr '\n' ' ') || true
  actual=${actual% }
  if ((status == 0)) && [[ "$actual" == "qpsock=$expected" ]]; then
    pass "$description ($runner): child reports qpsock=$expected"
  else
    fail "$description ($runner): expected qpsock=$expected and status 0, got '${actual:-no report}' and status $status"
  fi
}

inherited_socket() {
  local runner=$1 tag port status=0 report
  tag=$(runner_tag "$runner")
  start_server "$runner" "serve-then-exec.$tag" "$PROBE" serve-then-exec @PORT@ 100000 \
    "$QPSOCK_PROGRAMS_DIR/fd_echo" || return 0
  port=$SERVER_PORT
  report=$TEST_TMP/inherited.$tag
  run_under "$runner" 30 "$QPSOCK_PROGRAMS_DIR/echo_client" -c 1 -b 8388608 -s 21 "$port" \
    >"$report" 2>"$LOG_DIR/inherited-client.$tag.log" || status=$?
  assert_equal "client of a server that execs mid-connection ($runner)" 0 "$status"
  status=0
  wait_background "serve-then-exec.$tag" || status=$?
  assert_equal "exec_probe -> exec fd_echo on the inherited socket ($runner)" 0 "$status"
  if grep -q 'fd_echo: echoed' "$(background_log "serve-then-exec.$tag")"; then
    pass "fd_echo served the inherited fd after exec ($runner)"
  else
    fail "fd_echo did not report serving the inherited fd ($runner)"
  fi
  assert_log_preload_state "fd_echo after exec" "$(background_log "serve-then-exec.$tag")" "$runner"
  compare_with_reference inherited "echo report through exec ($runner)" "$report"
}

clean_environment() {
  local runner=$1 tag method status output
  tag=$(runner_tag "$runner")
  for method in execve execve-null execle execvpe fexecve fork-execve vfork-execve posix_spawn posix_spawnp system popen; do
    output=$LOG_DIR/clean-exec.$tag.$method.log
    status=0
    run_under "$runner" 10 "$PROBE" clean-exec "$method" "$PROBE" report >"$output" 2>&1 || status=$?
    expect_state "$method with an empty environment" "$runner" "$output" "$status"
  done
  output=$LOG_DIR/env-i.$tag.log
  status=0
  run_under "$runner" 10 env -i "$PROBE" report >"$output" 2>&1 || status=$?
  expect_state "env -i" "$runner" "$output" "$status"
  output=$LOG_DIR/sh-env-i.$tag.log
  status=0
  # shellcheck disable=SC2016 # expanded by that sh
  run_under "$runner" 10 sh -c 'exec env -i "$0" report' "$PROBE" >"$output" 2>&1 || status=$?
  expect_state "sh -c 'exec env -i ...'" "$runner" "$output" "$status"
  output=$LOG_DIR/java-spawn.$tag.log
  status=0
  run_under "$runner" 30 java "${JAVA_OPTIONS[@]}" -cp "$QPSOCK_JAVA_JAR" SpawnProbe "$PROBE" report \
    >"$output" 2>&1 || status=$?
  expect_state "Java ProcessBuilder with environment().clear()" "$runner" "$output" "$status"
}

exit_statuses() {
  local runner=$1
  assert_status "exec_probe exit 3 ($runner)" 3 run_under "$runner" 10 "$PROBE" exit 3
  assert_status "exec_probe exit 0 ($runner)" 0 run_under "$runner" 10 "$PROBE" exit 0
  assert_status "exec_probe exit 255 ($runner)" 255 run_under "$runner" 10 "$PROBE" exit 255
  assert_status "exec_probe clean-exec execve ... exit 5 ($runner)" 5 \
    run_under "$runner" 10 "$PROBE" clean-exec execve "$PROBE" exit 5
  assert_status "sh killed by SIGTERM ($runner)" 143 run_under "$runner" 10 sh -c 'kill -TERM $$'
  assert_status "false ($runner)" 1 run_under "$runner" 10 false
}

shell_and_java_jar() {
  local runner=$1 tag port status=0 output
  tag=$(runner_tag "$runner")
  # -w: each child's first read (where qpsock's upgrade starts) waits for the
  # client's first bytes, so a script's forks before them come first.
  start_server "$runner" "echo-server.$tag" "$QPSOCK_PROGRAMS_DIR/fork_echo_server" -w -n 7 @PORT@ || return 0
  port=$SERVER_PORT
  output=$TEST_TMP/shell.$tag
  # fd 3 taken: bash connects on another number, then dup2s it to 3.
  QPSOCK_LOG_LEVEL=info run_under "$runner" 30 "$TEST_TMP/shell_probe.sh" "$port" "$PROBE" \
    3</dev/null >"$output" 2>"$LOG_DIR/shell.$tag.log" || status=$?
  assert_equal "shell script over /dev/tcp ($runner)" 0 "$status"
  if [[ $runner == qpsock ]]; then
    if grep -q "upgraded to shared memory" "$LOG_DIR/shell.$tag.log"; then
      pass "shell script: its socket, renumbered to fd 3, was upgraded; a child exec'd mid-stream left it be"
    else
      fail "shell script: no upgrade in its log"
    fi
  fi
  expect_state "exec_probe started by the shell script" "$runner" "$output" "$status"
  grep -v '^qpsock=' "$output" >"$output.transcript" || true
  compare_with_reference shell "shell script transcript ($runner)" "$output.transcript"

  # The script's reading done by a child it forked right after connecting.
  output=$TEST_TMP/shell-reader.$tag
  status=0
  QPSOCK_LOG_LEVEL=info run_under "$runner" 30 "$TEST_TMP/shell_reader_child.sh" "$port" \
    >"$output" 2>"$LOG_DIR/shell-reader.$tag.log" || status=$?
  assert_equal "shell script whose child reads the socket ($runner)" 0 "$status"
  compare_with_reference shell-reader "echo read by the script's child ($runner)" "$output"
  if [[ $runner == qpsock ]]; then
    if grep -q "a child process forked since the connection was made holds the socket" "$LOG_DIR/shell-reader.$tag.log"; then
      pass "shell script whose child reads the socket: kept on TCP, and the log says why"
    else
      fail "shell script whose child reads the socket: no line saying why it stayed on TCP"
    fi
  fi

  # The socket handed to a program started after the upgrade: it works
  # without qpsock; under it the program fails at once, and the log says why.
  output=$TEST_TMP/shell-after.$tag
  status=0
  run_under "$runner" 30 "$TEST_TMP/shell_child_after_upgrade.sh" "$port" \
    >"$output" 2>"$LOG_DIR/shell-after.$tag.expected-errors.log" || status=$?
  assert_equal "shell script that hands its socket to head ($runner)" 0 "$status"
  if [[ $runner == qpsock ]]; then
    if grep -q '^head exit 1$' "$output" &&
       grep -q "it cannot be used here yet: ECONNRESET" "$LOG_DIR/shell-after.$tag.expected-errors.log"; then
      pass "head given an upgraded socket failed at once with ECONNRESET, and the log says why"
    else
      fail "head given an upgraded socket: $(cat "$output"), no ECONNRESET line"
    fi
  else
    assert_equal "head given the socket ($runner)" "head exit 0" "$(cat "$output")"
  fi

  output=$TEST_TMP/java-jar.$tag
  status=0
  run_under "$runner" 40 java "${JAVA_OPTIONS[@]}" -jar "$QPSOCK_JAVA_JAR" "$port" 4 1048576 31 \
    >"$output" 2>"$LOG_DIR/java-jar.$tag.log" || status=$?
  assert_equal "java -jar (BlockingEchoClient, 4 connections) ($runner)" 0 "$status"
  assert_log_preload_state "java -jar" "$LOG_DIR/java-jar.$tag.log" "$runner"
  compare_with_reference java-jar "java -jar echo report ($runner)" "$output"
  status=0
  wait_background "echo-server.$tag" || status=$?
  assert_equal "fork_echo_server for the shell script and java -jar ($runner)" 0 "$status"
}

# A server that upgraded its connection to shared memory and then execs, the
# socket inherited: the stream cannot follow into the new image yet, so qpsock
# resets the connection (docs/upgrade-protocol.md). Either the exec came
# before any direction switched and everything arrives, or the client sees
# the error and the server's log says why; never a silently wrong stream.
inherited_upgraded_socket() {
  local runner=$1 tag port status=0 report log
  tag=$(runner_tag "$runner")
  start_server "$runner" "serve-then-exec-shm.$tag.expected-errors" "$PROBE" serve-then-exec @PORT@ 100000 \
    "$QPSOCK_PROGRAMS_DIR/fd_echo" || return 0
  port=$SERVER_PORT
  report=$TEST_TMP/inherited-shm.$tag
  run_under "$runner" 30 "$QPSOCK_PROGRAMS_DIR/echo_client" -c 1 -b 8388608 -s 21 "$port" \
    >"$report" 2>"$LOG_DIR/inherited-shm-client.$tag.log" || status=$?
  wait_background "serve-then-exec-shm.$tag.expected-errors" || true
  log=$(background_log "serve-then-exec-shm.$tag.expected-errors")
  if [[ $status == 0 ]]; then
    assert_same_checksum "upgraded socket across exec, no switch yet ($runner)" \
      "${REFERENCE[inherited]}" "$report"
  elif grep -q "cannot be inherited across exec" "$log"; then
    pass "upgraded socket across exec: reset, and the log says why ($runner)"
  else
    fail "upgraded socket across exec: client failed ($status) without qpsock's reset ($runner)"
  fi
}

# A client that made a round trip (qpsock has upgraded its connection by
# then) starts a program beside itself that inherits the socket and peeks at
# it (posix_spawn, posix_spawnp, system, popen: none goes through fork and
# exec in this process). Without qpsock the program sees the kernel's socket;
# under it the program is told the stream is not its own and gets
# ECONNRESET, with a line saying why, never an empty socket; the client's
# stream goes on intact.
spawned_program_peeks() {
  local runner=$1 tag method port status log
  tag=$(runner_tag "$runner")
  start_server "$runner" "spawn-echo.$tag" "$QPSOCK_PROGRAMS_DIR/fork_echo_server" -n 4 @PORT@ || return 0
  port=$SERVER_PORT
  for method in posix_spawn posix_spawnp system popen; do
    log=$LOG_DIR/spawn.$tag.$method.expected-errors.log
    status=0
    run_under "$runner" 30 "$PROBE" connect-then-spawn "$port" "$method" >/dev/null 2>"$log" || status=$?
    assert_equal "client that starts a program by $method mid-connection ($runner)" 0 "$status"
    if runner_loads_qpsock "$runner"; then
      if grep -q "peek-fd [0-9]*: ECONNRESET" "$log" && grep -q "it cannot be used here yet: ECONNRESET" "$log"; then
        pass "program started by $method given an upgraded socket: ECONNRESET, and the log says why"
      else
        fail "program started by $method given an upgraded socket: $(grep -h 'peek-fd' "$log" || echo 'no report')"
      fi
    elif grep -q "peek-fd [0-9]*: \(data\|EAGAIN\)" "$log"; then
      pass "program started by $method peeks at the kernel's socket ($runner)"
    else
      fail "program started by $method: $(grep -h 'peek-fd' "$log" || echo 'no report') ($runner)"
    fi
  done
  status=0
  wait_background "spawn-echo.$tag" || status=$?
  assert_equal "fork_echo_server for the spawning clients ($runner)" 0 "$status"
}

# A python client that clears its environment, then echoes 1 MiB through a
# qpsock server; started with QPSOCK_OFFLOAD=0 and an info log to a file.
settings_outlive_a_cleared_environment() {
  local runner=$1 tag qplog output status=0
  tag=$(runner_tag "$runner")
  qplog=$LOG_DIR/cleared-environment.$tag.qplog
  output=$LOG_DIR/cleared-environment.$tag.log
  start_server "$runner" "cleared-environment-server.$tag" "$QPSOCK_PROGRAMS_DIR/fork_echo_server" -n 1 @PORT@ ||
    return 0
  QPSOCK_OFFLOAD=0 QPSOCK_LOG_LEVEL=info QPSOCK_LOG_FILE=$qplog run_under "$runner" 30 python3 -c '
import os, socket, sys
os.environ.clear()
data = os.urandom(1 << 20)
with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as connection:
    connection.sendall(data)
    connection.shutdown(socket.SHUT_WR)
    received = bytearray()
    while chunk := connection.recv(65536):
        received += chunk
print("echoed" if received == data else f"corrupt: {len(received)} bytes")' "$SERVER_PORT" >"$output" 2>&1 ||
    status=$?
  if ((status == 0)) && grep -qx echoed "$output"; then
    pass "a client that cleared its environment echoed 1 MiB intact ($runner)"
  else
    fail "a client that cleared its environment: status $status, $(head -c 300 "$output")"
  fi
  if grep -q 'QPSOCK_OFFLOAD=0' "$qplog" 2>/dev/null && ! grep -q 'upgraded' "$qplog"; then
    pass "its settings outlived the cleared environment: the log file named got its lines, and QPSOCK_OFFLOAD=0 kept it on TCP ($runner)"
  else
    fail "its settings were lost with its environment: $(head -c 300 "$qplog" 2>/dev/null || echo 'no log file')"
  fi
  status=0
  wait_background "cleared-environment-server.$tag" || status=$?
  assert_equal "fork_echo_server for the client that cleared its environment ($runner)" 0 "$status"
}

for runner in "${RUNNERS[@]}"; do
  if runner_loads_qpsock "$runner"; then
    settings_outlive_a_cleared_environment "$runner"
    # On TCP, exec passes the socket through untouched.
    QPSOCK_SAME_HOST=kernel inherited_socket "$runner"
    inherited_upgraded_socket "$runner"
  else
    inherited_socket "$runner"
  fi
  clean_environment "$runner"
  exit_statuses "$runner"
  shell_and_java_jar "$runner"
  spawned_program_peeks "$runner"
done
finish
