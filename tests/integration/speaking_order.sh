#!/usr/bin/env bash
# Speaking orders: the upgrade must not care who talks first. conversation
# (tests/programs/conversation.c) is a strictly alternating dialogue (200
# turns each, messages of 1 B to 256 KiB, every byte verified, then an orderly
# half-close on both sides); the client's first write may race the upgrade
# handshake, the server's first write may come before the client ever reads.
# For each FIRST (client, server) it runs plain/plain as the reference, then
# qpsock with a plain peer in both roles, then qpsock/qpsock. Every run must
# succeed on both sides with no stall: the dialogue's turns together may take
# at most 1 s more than the reference's, no single turn may take 1 s, and the
# pair's wall time (which includes starting qpsock-run, slow on a loaded
# machine) at most 3 s more than the reference's. Only the
# qpsock/qpsock pairs may, and must, say "upgraded to shared memory".
# In a network namespace of its own, like shm_upgrade.sh.
# usage: speaking_order.sh [ROUNDS]    (root: it makes a network namespace)
set -Eeuo pipefail
ROUNDS=${1:-200}
PROGRAM=${QPSOCK_PROGRAMS_DIR:?}/conversation
RUN=${QPSOCK_RUN:?}
LIBRARY=${QPSOCK_LIBRARY:?}

source "$(dirname "$(readlink -f "$0")")/checks.sh" --own-network-namespace "$@"

# The stall allowances over the plain/plain reference (the dialogue alone, and
# the whole run with process start-up), and the longest turn. An upgrade that
# stalled would cost its timeout, seconds.
SLACK_MS=1000
WALL_SLACK_MS=3000
TURN_LIMIT_MS=1000

# The longest turn a conversation log reports, in whole milliseconds (or
# "none" if the program never got as far as saying it).
longest_turn_ms() {
  local value
  value=$(sed -n 's/.*longest turn \([0-9.]*\) ms.*/\1/p' "$1" | tail -n 1)
  [[ -n $value ]] && printf '%.0f' "$value" || echo none
}

# The time a side's turns took together, in milliseconds (the wall time less
# process start-up, library load and connection set-up), or "none".
turns_ms() {
  local value
  value=$(sed -n 's/.*all turns in \([0-9]*\) ms.*/\1/p' "$1" | tail -n 1)
  echo "${value:-none}"
}

# The slower side's turns_ms for a pair (they differ by the last turn only).
pair_turns_ms() {
  local server client
  server=$(turns_ms "$WORK/$1.server.log")
  client=$(turns_ms "$WORK/$1.client.log")
  if [[ $server == none || $client == none ]]; then
    echo none
  else
    echo $((server > client ? server : client))
  fi
}

# run_pair NAME FIRST SERVER_RUNNER CLIENT_RUNNER: each runner is "qpsock" or
# "plain". Sets WALL_MS to the pair's wall time, from the server's start to
# both ends' exit. Returns non-zero if either side failed.
WALL_MS=0
run_pair() {
  local name=$1 first=$2 server_runner=$3 client_runner=$4
  local server=() client=()
  [[ $server_runner == qpsock ]] && server=("$RUN" --library "$LIBRARY" --log-level info --)
  [[ $client_runner == qpsock ]] && client=("$RUN" --library "$LIBRARY" --log-level info --)
  rm -f "$WORK/port"
  local started
  started=$(date +%s%N)
  timeout -k 5 30 "${server[@]}" "$PROGRAM" server "$WORK/port" "$first" "$ROUNDS" \
    2>"$WORK/$name.server.log" &
  local server_pid=$!
  PIDS+=("$server_pid")
  for _ in $(seq 200); do
    [[ -s $WORK/port ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.02
  done
  local port
  port=$(cat "$WORK/port" 2>/dev/null) || port=0
  local status=0 server_status=0
  timeout -k 5 30 "${client[@]}" "$PROGRAM" client "$port" "$first" "$ROUNDS" \
    2>"$WORK/$name.client.log" || status=$?
  wait "$server_pid" || server_status=$?
  WALL_MS=$((($(date +%s%N) - started) / 1000000))
  if [[ $status == 0 && $server_status == 0 ]]; then
    pass "$name: $((2 * ROUNDS)) turns verified on both sides (client $status, server $server_status)"
    return 0
  fi
  fail "$name: client $status, server $server_status"
  cat "$WORK/$name.server.log" "$WORK/$name.client.log" >&2
  return 1
}

for first in client server; do
  # The reference: the kernel alone, on the same machine at the same moment.
  reference=$first-first.plain-plain
  run_pair "$reference" "$first" plain plain || true
  reference_ms=$WALL_MS
  reference_turns_ms=$(pair_turns_ms "$reference")
  echo "$reference: ${reference_ms} ms (turns ${reference_turns_ms} ms)," \
    "longest turn $(longest_turn_ms "$WORK/$reference.server.log") ms (server)" \
    "/ $(longest_turn_ms "$WORK/$reference.client.log") ms (client)" >&2

  for pair in "qpsock plain" "plain qpsock" "qpsock qpsock"; do
    read -r server_runner client_runner <<<"$pair"
    name=$first-first.$server_runner-server.$client_runner-client
    run_pair "$name" "$first" "$server_runner" "$client_runner" || continue
    server_turn=$(longest_turn_ms "$WORK/$name.server.log")
    client_turn=$(longest_turn_ms "$WORK/$name.client.log")
    turns=$(pair_turns_ms "$name")
    echo "$name: ${WALL_MS} ms (turns ${turns} ms; reference ${reference_ms} ms, turns ${reference_turns_ms} ms)," \
      "longest turn ${server_turn} ms (server) / ${client_turn} ms (client)" >&2
    # The wall time includes qpsock-run (a bash script) and loading the
    # library, some 50 ms idle but far more on a loaded machine; the turns
    # alone are the dialogue itself. Both must stay within the slack.
    if ((WALL_MS <= reference_ms + WALL_SLACK_MS)); then
      pass "$name: no stall (${WALL_MS} ms, at most $((reference_ms + WALL_SLACK_MS)) allowed)"
    else
      fail "$name: ${WALL_MS} ms, more than the reference's ${reference_ms} ms + ${WALL_SLACK_MS} ms"
    fi
    if [[ $turns != none && $reference_turns_ms != none ]] && ((turns <= reference_turns_ms + SLACK_MS)); then
      pass "$name: the turns took ${turns} ms (at most $((reference_turns_ms + SLACK_MS)) allowed)"
    else
      fail "$name: the turns took ${turns} ms, the reference's ${reference_turns_ms} ms"
    fi
    if [[ $server_turn != none && $client_turn != none ]] &&
      ((server_turn < TURN_LIMIT_MS && client_turn < TURN_LIMIT_MS)); then
      pass "$name: every turn under ${TURN_LIMIT_MS} ms"
    else
      fail "$name: longest turn ${server_turn} ms (server), ${client_turn} ms (client)"
      cat "$WORK/$name.server.log" "$WORK/$name.client.log" >&2
    fi
    # Only a qpsock peer can upgrade: with a plain one, nothing may claim it.
    for side in server client; do
      runner=${server_runner}
      [[ $side == client ]] && runner=$client_runner
      [[ $runner == qpsock ]] || continue
      log=$WORK/$name.$side.log
      if [[ $pair == "qpsock qpsock" ]]; then
        if grep -q "upgraded to shared memory" "$log"; then
          pass "$name: $side log: upgraded to shared memory"
        else
          fail "$name: $side log does not show the upgrade"
          cat "$log" >&2
        fi
      elif grep -q "upgraded to shared memory" "$log"; then
        fail "$name: $side log claims an upgrade with a plain peer"
        cat "$log" >&2
      else
        pass "$name: $side log: stayed on TCP with a plain peer"
      fi
    done
  done
done

echo "speaking_order: $failures failure(s)" >&2
((failures == 0))
