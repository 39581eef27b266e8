#!/usr/bin/env bash
# A peer killed in the middle of an upgraded transfer: the survivor must learn
# it at once, as it would over TCP, from the kernel's FIN or RST on the TCP
# connection that stays open under the stream as its control channel. Two
# bulk_exchange processes under qpsock-run move data both ways with no end in
# sight (1 TiB each way); once both logs say "upgraded to shared memory" and
# the data has flowed for half a second more, one program gets SIGKILL. The
# survivor must exit non-zero within 1 s, with bulk_exchange's message naming
# the error or the end of stream, having verified data before it. Both ways:
# the server killed, then the client. In a network namespace of its own,
# like shm_upgrade.sh.
#
# Which pid is killed: each side runs as `timeout ... qpsock-run ... --
# bulk_exchange ...`. qpsock-run is a bash script that ends in exec, so once
# the upgrade is logged the only child of the timeout process is bulk_exchange
# itself; the script checks that through /proc/PID/exe before killing it
# (killing the timeout would leave the program running; killing qpsock-run
# by name could hit anything). The timeouts stay as ceilings: a survivor that
# never notices ends at its ceiling and shows up as a failure of seconds.
# usage: peer_death.sh    (root: it makes a network namespace)
set -Eeuo pipefail
PROGRAM=${QPSOCK_PROGRAMS_DIR:?}/bulk_exchange
RUN=${QPSOCK_RUN:?}
LIBRARY=${QPSOCK_LIBRARY:?}
BYTES=1099511627776
LIMIT_MS=1000
CEILING=20

source "$(dirname "$(readlink -f "$0")")/checks.sh" --own-network-namespace "$@"

# program_of TIMEOUT_PID: the bulk_exchange process under that timeout.
program_of() {
  local child
  for child in $(pgrep -P "$1"); do
    if [[ $(readlink "/proc/$child/exe" 2>/dev/null) == "$(readlink -f "$PROGRAM")" ]]; then
      echo "$child"
      return 0
    fi
  done
  return 1
}

# kill_one VICTIM: VICTIM (server or client) is killed mid-transfer.
kill_one() {
  local victim=$1 name=kill-$1
  local qpsock=("$RUN" --library "$LIBRARY" --log-level info --)
  local server_log=$WORK/$name.server.log client_log=$WORK/$name.client.log
  rm -f "$WORK/port"
  timeout -k 5 "$CEILING" "${qpsock[@]}" "$PROGRAM" server "$WORK/port" "$BYTES" 2>"$server_log" &
  local server_pid=$!
  PIDS+=("$server_pid")
  for _ in $(seq 200); do [[ -s $WORK/port ]] && break; sleep 0.02; done
  timeout -k 5 "$CEILING" "${qpsock[@]}" "$PROGRAM" client "$(cat "$WORK/port")" "$BYTES" 2>"$client_log" &
  local client_pid=$!
  PIDS+=("$client_pid")

  local upgraded=no
  for _ in $(seq 250); do
    if grep -q "upgraded to shared memory" "$server_log" && grep -q "upgraded to shared memory" "$client_log"; then
      upgraded=yes
      break
    fi
    sleep 0.02
  done
  if [[ $upgraded != yes ]]; then
    fail "$name: the connection was not upgraded within 5 s"
    cat "$server_log" "$client_log" >&2
    return
  fi
  pass "$name: both logs say upgraded to shared memory"
  sleep 0.5 # the data is flowing in both directions by now

  local victim_timeout=$server_pid survivor_timeout=$client_pid survivor=client survivor_log=$client_log
  if [[ $victim == client ]]; then
    victim_timeout=$client_pid survivor_timeout=$server_pid survivor=server survivor_log=$server_log
  fi
  local target
  if ! target=$(program_of "$victim_timeout") || ! kill -0 "$survivor_timeout" 2>/dev/null; then
    fail "$name: a program ended before the kill"
    cat "$server_log" "$client_log" >&2
    return
  fi
  local killed_at exited_at status=0
  killed_at=$(date +%s%N)
  kill -KILL "$target"
  # wait returns as soon as the survivor's timeout reaps it, which it does
  # the moment the program ends.
  wait "$survivor_timeout" || status=$?
  exited_at=$(date +%s%N)
  # (bash's "Killed" notice for the victim's job is expected: not shown)
  { wait "$victim_timeout"; } 2>/dev/null || true
  local elapsed_ms=$(((exited_at - killed_at) / 1000000))
  echo "$name: the $survivor exited with status $status ${elapsed_ms} ms after the $victim's SIGKILL (pid $target)" >&2

  if ((status != 0 && status != 124 && status < 128)); then
    pass "$name: the $survivor exited with failure status $status"
  else
    fail "$name: the $survivor's exit status is $status (expected 1: an error noticed, not a signal or a timeout)"
  fi
  if ((elapsed_ms <= LIMIT_MS)); then
    pass "$name: the $survivor exited ${elapsed_ms} ms after the kill (at most ${LIMIT_MS} ms)"
  else
    fail "$name: the $survivor took ${elapsed_ms} ms after the kill to exit (more than ${LIMIT_MS} ms)"
  fi
  local messages
  messages=$(grep -E '^bulk_exchange: (read|write) after [0-9]+.*: .+' "$survivor_log" || true)
  if [[ -n $messages ]]; then
    pass "$name: the $survivor says why: ${messages//$'\n'/ | }"
  else
    fail "$name: the $survivor's log names no error or end of stream"
    cat "$survivor_log" >&2
  fi
  # Its summary line: data was verified before the peer died, so the kill
  # really came mid-transfer.
  local received
  received=$(sed -n 's/^bulk_exchange: sent [0-9]*, received and verified \([0-9]*\) bytes$/\1/p' "$survivor_log")
  if [[ -n $received ]] && ((received > 0)); then
    pass "$name: the $survivor had received and verified $received bytes before the kill"
  else
    fail "$name: the $survivor verified no data before the kill (${received:-no summary line})"
    cat "$survivor_log" >&2
  fi
}

kill_one server
kill_one client

echo "peer_death: $failures failure(s)" >&2
((failures == 0))
