#!/usr/bin/env bash
# Sockets handed to another process over SCM_RIGHTS: fd_passing_server.py's
# dispatcher accepts and passes each connection to a worker process
# (socket.send_fds), which echoes it; echo_client -B checks every byte.
# - Passed before any I/O: under qpsock the connections stay on TCP (the
#   dispatcher's log says why for each, and neither end upgrades), and the
#   client's report equals a plain run's.
# - Passed at once after the dispatcher peeked, with shm_upgrade_delay 50ms,
#   the default (the peek claims the upgrade, which begins that much later):
#   the connection stays on TCP and works as plain, as passed before any I/O.
# - The same with shm_upgrade_delay 0 (the peek upgrades the
#   connection to shared memory in the dispatcher): the stream cannot follow the socket,
#   so qpsock resets the connection and says why. The client must fail at
#   once with ECONNRESET, as from a kernel's reset, and never get a wrong
#   byte. (Before, the worker read the bytes sent before the switch, then a
#   clean end of stream: silent truncation. And a reset the control channel
#   had read first reached the client as end of file.)
# In a network namespace of its own (root), like fork_upgrade.sh.
set -Eeuo pipefail
SERVER=$(dirname "$(readlink -f "$0")")/../programs/fd_passing_server.py
CLIENT=${QPSOCK_PROGRAMS_DIR:?}/echo_client
RUN=${QPSOCK_RUN:?}
LIBRARY=${QPSOCK_LIBRARY:?}

source "$(dirname "$(readlink -f "$0")")/checks.sh" --own-network-namespace "$@"

PORT=7412
CONNECTIONS=4
CLIENT_OPTIONS=(-B -c "$CONNECTIONS" -b 1048576 -s 33)

# run_pair NAME RUNNER [--peek]: the server and echo_client, both under RUNNER
# (plain or qpsock; SETTINGS: qpsock-run options). Sets CLIENT_STATUS and SERVER_STATUS.
CLIENT_STATUS= SERVER_STATUS= SETTINGS=()
run_pair() {
  local name=$1 runner=$2 prefix=()
  shift 2
  [[ $runner == qpsock ]] && prefix=("$RUN" --library "$LIBRARY" --log-level info "${SETTINGS[@]}" --)
  timeout -k 5 40 "${prefix[@]}" python3 "$SERVER" "$PORT" "$CONNECTIONS" "$@" \
    2>"$WORK/$name.server.log" &
  local server_pid=$!
  PIDS+=("$server_pid")
  for _ in $(seq 250); do listening "$PORT" && break; sleep 0.02; done
  CLIENT_STATUS=0 SERVER_STATUS=0
  timeout -k 5 30 "${prefix[@]}" "$CLIENT" "${CLIENT_OPTIONS[@]}" "$PORT" \
    >"$WORK/$name.report" 2>"$WORK/$name.client.log" || CLIENT_STATUS=$?
  # A worker left with a socket nobody writes to would wait for good: the
  # server's timeout ends it (its worker then finds the carrier closed).
  wait "$server_pid" || SERVER_STATUS=$?
  echo "$name: client exit $CLIENT_STATUS, server exit $SERVER_STATUS" >&2
}

run_pair plain plain
if [[ $CLIENT_STATUS == 0 && $SERVER_STATUS == 0 ]]; then
  pass "plain: $CONNECTIONS connections passed to the worker, echoed and verified"
else
  fail "plain: client $CLIENT_STATUS, server $SERVER_STATUS"
  cat "$WORK/plain.server.log" "$WORK/plain.client.log" >&2
fi

run_pair passed qpsock
if [[ $CLIENT_STATUS == 0 && $SERVER_STATUS == 0 ]] && cmp -s "$WORK/plain.report" "$WORK/passed.report"; then
  pass "qpsock: passed before any I/O, every connection echoed; the report equals plain's"
else
  fail "qpsock, passed before any I/O: client $CLIENT_STATUS, server $SERVER_STATUS, or a report unlike plain's"
  cat "$WORK/passed.server.log" "$WORK/passed.client.log" >&2
fi
stayed=$(grep -c "passed to another process (SCM_RIGHTS) before its upgrade; stays on TCP" \
  "$WORK/passed.server.log" || true)
if ((stayed == CONNECTIONS)); then
  pass "the dispatcher's log says, for each of the $CONNECTIONS, that it stays on TCP and why"
else
  fail "the dispatcher's log says so for $stayed of $CONNECTIONS connections"
  cat "$WORK/passed.server.log" >&2
fi
if ! grep -q "upgraded to" "$WORK/passed.server.log" "$WORK/passed.client.log"; then
  pass "neither end upgraded a passed connection"
else
  fail "a passed connection was upgraded"
  grep "upgraded to" "$WORK/passed.server.log" "$WORK/passed.client.log" >&2
fi

run_pair plain-peek plain --peek
if [[ $CLIENT_STATUS == 0 && $SERVER_STATUS == 0 ]] && cmp -s "$WORK/plain.report" "$WORK/plain-peek.report"; then
  pass "plain, peeked before passing: every connection echoed; the same report"
else
  fail "plain, peeked before passing: client $CLIENT_STATUS, server $SERVER_STATUS"
  cat "$WORK/plain-peek.server.log" "$WORK/plain-peek.client.log" >&2
fi

SETTINGS=(--set shm_upgrade_delay=50ms)
run_pair peek-early qpsock --peek
if [[ $CLIENT_STATUS == 0 && $SERVER_STATUS == 0 ]] && cmp -s "$WORK/plain.report" "$WORK/peek-early.report" &&
   ! grep -q "upgraded to" "$WORK/peek-early.server.log" "$WORK/peek-early.client.log"; then
  pass "qpsock, peeked and passed within shm_upgrade_delay: on TCP, every connection echoed; the report equals plain's"
else
  fail "qpsock, peeked and passed within shm_upgrade_delay: client $CLIENT_STATUS, server $SERVER_STATUS, a report unlike plain's, or an upgrade"
  cat "$WORK/peek-early.server.log" "$WORK/peek-early.client.log" >&2
fi

SETTINGS=(--set shm_upgrade_delay=0)
run_pair peek qpsock --peek
if ((CLIENT_STATUS != 0 && CLIENT_STATUS < 124)) && grep -q "Connection reset by peer" "$WORK/peek.client.log"; then
  pass "qpsock, upgraded then passed: the client failed at once with ECONNRESET (exit $CLIENT_STATUS: $(grep -m 1 "^echo_client: connection" "$WORK/peek.client.log"))"
else
  fail "qpsock, upgraded then passed: the client's exit is $CLIENT_STATUS (ECONNRESET was due, within the time)"
  cat "$WORK/peek.server.log" "$WORK/peek.client.log" >&2
fi
if ! grep -q "wrong byte" "$WORK/peek.client.log"; then
  pass "qpsock, upgraded then passed: no wrong byte reached the client"
else
  fail "qpsock, upgraded then passed: wrong bytes"
fi
reset=$(grep -c "an upgraded connection cannot be passed to another process (SCM_RIGHTS) yet; resetting it" \
  "$WORK/peek.server.log" || true)
if ((reset >= 1)); then
  pass "the dispatcher's log says why it reset the connection ($reset line(s))"
else
  fail "no line in the dispatcher's log says why"
  cat "$WORK/peek.server.log" >&2
fi

echo "fd_passing: $failures failure(s)" >&2
((failures == 0))
