#!/usr/bin/env bash
# The JDK's ways of ending a blocked socket call, on upgraded connections
# (issue 4): CloseWhileBlocked's client, after reading 1 MiB on each
# connection (so both ends are upgraded and its next call blocks in qpsock's
# stream), has one thread blocked while another calls Socket.close() (the
# JDK's dup2 of a placeholder over the fd, then a signal), SocketChannel.close(),
# Thread.interrupt(), shutdownInput(), or lets SO_TIMEOUT expire, and closes a
# socket whose writer is blocked on a peer that does not read; then it starts
# processes (posix_spawn, as the JDK does) on an upgraded connection and writes
# 1 MiB more, which the server must count whole. Every blocked
# thread must be released within 2 s with the exception the JDK gives on
# kernel TCP: the outputs of client and server must equal a plain run's, and
# both logs must show every connection upgraded. In a network namespace of its
# own, like the other upgrade tests.
# usage: jvm_close.sh    (root: it makes a network namespace)
set -Eeuo pipefail
RUN=${QPSOCK_RUN:?}
LIBRARY=${QPSOCK_LIBRARY:?}
JAR=${QPSOCK_JAVA_JAR:-}
CASES=7

if [[ -z $JAR || ! -f $JAR ]] || ! command -v java >/dev/null; then
  echo "jvm_close: no JDK or test jar; skipped" >&2
  exit 77
fi
source "$(dirname "$(readlink -f "$0")")/checks.sh" --own-network-namespace "$@"

JAVA=(java -XX:+UseSerialGC -Xmx128m -XX:TieredStopAtLevel=1 -cp "$JAR" CloseWhileBlocked)
PORT=7600
# run RUNNER: server and client under RUNNER (plain or qpsock); their outputs
# are $WORK/RUNNER.server and $WORK/RUNNER.client.
run() {
  local runner=$1 server_prefix=() client_prefix=()
  PORT=$((PORT + 1))
  if [[ $runner == qpsock ]]; then
    server_prefix=("$RUN" --library "$LIBRARY" --log-level info --log-file "$WORK/server.log" --)
    client_prefix=("$RUN" --library "$LIBRARY" --log-level info --log-file "$WORK/client.log" --)
  fi
  timeout -k 5 90 "${server_prefix[@]}" "${JAVA[@]}" server "$PORT" >"$WORK/$runner.server" 2>"$WORK/$runner.server.err" &
  local server_pid=$!
  PIDS+=("$server_pid")
  for _ in $(seq 300); do ss -Hltn "sport = :$PORT" | grep -q . && break; sleep 0.1; done
  local status=0 server_status=0
  timeout -k 5 90 "${client_prefix[@]}" "${JAVA[@]}" client "$PORT" >"$WORK/$runner.client" 2>"$WORK/$runner.client.err" ||
    status=$?
  wait "$server_pid" || server_status=$?
  echo "$runner: $(tr '\n' ';' <"$WORK/$runner.client.err")" >&2
  if [[ $status != 0 || $server_status != 0 ]]; then
    fail "$runner: client $status, server $server_status"
    cat "$WORK/$runner".*err >&2
  fi
}

run plain
if [[ $(grep -c "released promptly" "$WORK/plain.client") != $((CASES - 1)) ]]; then
  fail "the plain reference itself is not prompt: $(cat "$WORK/plain.client")"
fi
run qpsock
for side in client server; do
  if cmp -s "$WORK/plain.$side" "$WORK/qpsock.$side"; then
    pass "$side: every case ends as on kernel TCP"
  else
    fail "$side: the outcomes differ from kernel TCP's"
    diff "$WORK/plain.$side" "$WORK/qpsock.$side" >&2 || true
  fi
  upgrades=$(grep -c "upgraded to shared memory" "$WORK/$side.log" || true)
  if [[ $upgrades == "$CASES" ]]; then
    pass "$side: all $CASES connections were upgraded before the blocked call"
  else
    fail "$side: $upgrades of $CASES connections upgraded"
    grep -v statistics "$WORK/$side.log" | head -20 >&2
  fi
done
cat "$WORK/qpsock.client" >&2

echo "jvm_close: $failures failed" >&2
[[ $failures == 0 ]]
