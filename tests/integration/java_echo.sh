#!/usr/bin/env bash
# Java echo: BlockingEchoServer (java.net, a thread per connection) and
# NioEchoServer (java.nio Selector, one thread, non-blocking channels), each
# with BlockingEchoClient opening 16 concurrent connections that send a
# deterministic pseudo-random stream of several MB in random-sized writes and
# check every echoed byte. The C echo_client (poll, non-blocking) also runs
# against the NIO server. All clients print the same report for the same
# seed, so every report must have the same sha256 — across servers, clients
# and runners. Servers and clients both run under the runner.
# usage: java_echo.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools java
[[ -n "$QPSOCK_JAVA_JAR" && -f "$QPSOCK_JAVA_JAR" ]] ||
  die "the Java test programs are not built (QPSOCK_JAVA_JAR='$QPSOCK_JAVA_JAR'): install a JDK 17 (javac) and re-run cmake"
require_program echo_client

CONNECTIONS=${CONNECTIONS:-16}
BYTES=${BYTES:-$((4 * 1024 * 1024))}
SEED=${SEED:-7}
JAVA_OPTIONS=(-XX:+UseSerialGC -Xmx256m -XX:TieredStopAtLevel=1)
REFERENCE=""

# echo_case RUNNER SERVER_CLASS CLIENT
echo_case() {
  local runner=$1 server=$2 client=$3 tag port status=0 report
  tag=$(runner_tag "$runner").$server.$client
  report=$TEST_TMP/report.$tag
  start_server "$runner" "server.$tag" java "${JAVA_OPTIONS[@]}" -cp "$QPSOCK_JAVA_JAR" \
    "$server" @PORT@ "$CONNECTIONS" || return 0
  port=$SERVER_PORT
  if [[ $client == java ]]; then
    run_under "$runner" 45 java "${JAVA_OPTIONS[@]}" -cp "$QPSOCK_JAVA_JAR" BlockingEchoClient \
      "$port" "$CONNECTIONS" "$BYTES" "$SEED" >"$report" 2>"$LOG_DIR/client.$tag.log" || status=$?
  else
    run_under "$runner" 45 "$QPSOCK_PROGRAMS_DIR/echo_client" -c "$CONNECTIONS" -b "$BYTES" \
      -s "$SEED" "$port" >"$report" 2>"$LOG_DIR/client.$tag.log" || status=$?
  fi
  assert_equal "$client client, $CONNECTIONS x $BYTES bytes, $server ($runner)" 0 "$status"
  assert_log_preload_state "$client client" "$LOG_DIR/client.$tag.log" "$runner"
  status=0
  wait_background "server.$tag" || status=$?
  assert_equal "$server served $CONNECTIONS connections ($runner)" 0 "$status"
  if [[ -z "$REFERENCE" ]]; then
    REFERENCE=$report
    cp "$report" "$LOG_DIR/reference-report"
  else
    assert_same_checksum "$client client report, $server ($runner) vs the first run" "$REFERENCE" "$report"
  fi
}

for runner in "${RUNNERS[@]}"; do
  echo_case "$runner" BlockingEchoServer java
  echo_case "$runner" NioEchoServer java
  echo_case "$runner" NioEchoServer c
done
finish
