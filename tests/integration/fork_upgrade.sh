#!/usr/bin/env bash
# Fork-per-connection servers upgrade in the child: the process that does the
# first I/O on an accepted socket runs the server's side of the handshake, so
# when fork_echo_server accepts in the parent and echoes in a forked child,
# each "upgraded to shared memory" line of the server's log must carry a
# child's pid (the log line is "qpsock[PID]: info: fd N: upgraded to shared
# memory"), one per connection, all distinct, never the parent's. The parent
# names its children ("connection N served by child PID"); the parent's own
# pid is the program under the timeout (qpsock-run execs it) and is also the
# pid on the log lines of its accepts.
# Then the same for a prefork server (fork_echo_server -p: workers forked
# before any connection, all accepting from the one listener): every upgrade
# line carries a worker's pid, never the parent's.
# echo_client -B opens the connections at once, with blocking I/O and no poll,
# and checks every echoed byte; its report must match a plain/plain run's. In
# a network namespace of its own, like shm_upgrade.sh.
# usage: fork_upgrade.sh [CONNECTIONS]    (root: it makes a network namespace)
set -Eeuo pipefail
CONNECTIONS=${1:-4}
SERVER=${QPSOCK_PROGRAMS_DIR:?}/fork_echo_server
CLIENT=${QPSOCK_PROGRAMS_DIR:?}/echo_client
RUN=${QPSOCK_RUN:?}
LIBRARY=${QPSOCK_LIBRARY:?}

source "$(dirname "$(readlink -f "$0")")/checks.sh" --own-network-namespace "$@"

# A fixed port is safe here: the namespace is ours alone.
PORT=7411
# 4 MiB each, in echoes of at most 64 KiB: the children live long enough to
# overlap, and every one goes well past its upgrade.
CLIENT_OPTIONS=(-B -c "$CONNECTIONS" -b 4194304 -s 21)

# run_pair NAME RUNNER [SERVER_OPTION...]: fork_echo_server and echo_client
# both under RUNNER (plain or qpsock). Sets PARENT to the server program's pid.
PARENT=
run_pair() {
  local name=$1 runner=$2 prefix=()
  shift 2
  [[ $runner == qpsock ]] && prefix=("$RUN" --library "$LIBRARY" --log-level info --)
  timeout -k 5 60 "${prefix[@]}" "$SERVER" -n "$CONNECTIONS" "$@" "$PORT" 2>"$WORK/$name.server.log" &
  local server_pid=$!
  PIDS+=("$server_pid")
  for _ in $(seq 250); do listening "$PORT" && break; sleep 0.02; done
  # The program itself, not the timeout: its only child once it listens.
  PARENT=$(pgrep -P "$server_pid" | head -n 1) || PARENT=
  local status=0 server_status=0
  timeout -k 5 60 "${prefix[@]}" "$CLIENT" "${CLIENT_OPTIONS[@]}" "$PORT" \
    >"$WORK/$name.report" 2>"$WORK/$name.client.log" || status=$?
  wait "$server_pid" || server_status=$?
  if [[ $status == 0 && $server_status == 0 ]]; then
    pass "$name: $CONNECTIONS connections echoed and verified; every child succeeded"
  else
    fail "$name: client $status, server $server_status"
    cat "$WORK/$name.server.log" "$WORK/$name.client.log" >&2
  fi
}

# same_report_as_plain NAME: the client's report of run NAME equals plain's.
same_report_as_plain() {
  if cmp -s "$WORK/plain.report" "$WORK/$1.report"; then
    pass "$1: the client's report (bytes and CRC-32 per connection) is the same as plain's"
  else
    fail "$1: the client's report differs from plain's"
    diff "$WORK/plain.report" "$WORK/$1.report" >&2 || true
  fi
}
# pids_on LOG REGEX: the pid each of LOG's lines matching REGEX (a sed
# pattern whose one group is the pid) names, one a line, sorted.
pids_on() {
  sed -n "s/$2/\\1/p" "$1" | sort -n
}
# upgrading_pids LOG: the pids on LOG's "upgraded to shared memory" lines.
upgrading_pids() {
  pids_on "$1" '^qpsock\[\([0-9]*\)\]: info: fd [0-9]*: upgraded to shared memory$'
}

run_pair plain plain
run_pair qpsock qpsock
same_report_as_plain qpsock

log=$WORK/qpsock.server.log
upgraded=$(upgrading_pids "$log")
children=$(pids_on "$log" '^fork_echo_server\[[0-9]*\]: connection [0-9]* served by child \([0-9]*\)$')
accepted_by=$(pids_on "$log" '^qpsock\[\([0-9]*\)\]: info: fd [0-9]*: server .* <- .*' | uniq)
echo "server parent pid ${PARENT:-unknown} (accepts logged by ${accepted_by//$'\n'/ });" \
  "children: ${children//$'\n'/ }; upgraded in: ${upgraded//$'\n'/ }" >&2

if [[ -n $PARENT && $accepted_by == "$PARENT" ]]; then
  pass "the parent (pid $PARENT) logged every accept"
else
  fail "the parent's pid ${PARENT:-unknown} is not the one on the accept lines (${accepted_by//$'\n'/ })"
fi
if (($(wc -l <<<"$upgraded") == CONNECTIONS)) && [[ -n $upgraded && $(sort -u <<<"$upgraded") == "$upgraded" ]]; then
  pass "the server upgraded $CONNECTIONS connections, each in a process of its own"
else
  fail "the server's upgrades, by pid: ${upgraded//$'\n'/ } (expected $CONNECTIONS distinct pids)"
  cat "$log" >&2
fi
if [[ -n $children && $upgraded == "$children" ]]; then
  pass "every upgrade happened in the forked child serving its connection"
else
  fail "the upgrading pids (${upgraded//$'\n'/ }) are not the children (${children//$'\n'/ })"
fi
if [[ -n $PARENT ]] && ! grep -qx "$PARENT" <<<"$upgraded"; then
  pass "the parent (pid $PARENT) upgraded nothing"
else
  fail "the parent (pid ${PARENT:-unknown}) is among the upgrading pids"
fi
client_upgrades=$(grep -c "upgraded to shared memory" "$WORK/qpsock.client.log" || true)
if ((client_upgrades == CONNECTIONS)); then
  pass "the client upgraded all $CONNECTIONS connections"
else
  fail "the client upgraded $client_upgrades of $CONNECTIONS connections"
  cat "$WORK/qpsock.client.log" >&2
fi

# The prefork server: CONNECTIONS workers, each may take any connection.
run_pair prefork-plain plain -p "$CONNECTIONS"
run_pair prefork qpsock -p "$CONNECTIONS"
same_report_as_plain prefork
log=$WORK/prefork.server.log
upgraded=$(upgrading_pids "$log")
workers=$(pids_on "$log" '^fork_echo_server\[\([0-9]*\)\]: prefork worker ready$')
took=$(pids_on "$log" '^fork_echo_server\[\([0-9]*\)\]: worker took a connection$')
echo "prefork parent pid ${PARENT:-unknown}; workers: ${workers//$'\n'/ };" \
  "connections taken by: ${took//$'\n'/ }; upgraded in: ${upgraded//$'\n'/ }" >&2
if [[ -n $upgraded && $upgraded == "$took" ]] && (($(wc -l <<<"$upgraded") == CONNECTIONS)); then
  pass "prefork: each of the $CONNECTIONS connections was upgraded in the worker that took it"
else
  fail "prefork: upgrades by pid (${upgraded//$'\n'/ }) are not the takers (${took//$'\n'/ })"
  cat "$log" >&2
fi
if [[ -n $workers && -n $PARENT ]] && ! grep -qx "$PARENT" <<<"$upgraded" &&
   [[ -z $(comm -23 <(sort -u <<<"$upgraded") <(sort -u <<<"$workers")) ]]; then
  pass "prefork: only workers upgraded (the parent ${PARENT} none)"
else
  fail "prefork: an upgrade outside the workers (${workers//$'\n'/ }), parent ${PARENT:-unknown}"
fi

echo "fork_upgrade: $failures failure(s)" >&2
((failures == 0))
