#!/usr/bin/env bash
# Event-driven programs over upgraded sockets (issue 4), proved upgraded rather
# than assumed. In a network namespace of its own (so the kernel's IP counter
# counts only this test's traffic), each server below serves 16 concurrent
# connections of echo_client (poll, non-blocking, each a checked pseudo-random
# stream). The client's report must equal the plain/plain reference, both
# logs must say "upgraded to shared memory" once per connection, and IP
# OutOctets must grow by no more than what the connections' debug logs say
# they sent before their switch (and the headers).
#   - epoll_echo_server: level-triggered, EPOLLET, EPOLLONESHOT with 4 threads
#     on one set, the set nested in another epoll set and polled with poll(2);
#   - the Java NIO Selector server (epoll underneath) and python asyncio;
#   - a python selectors server that fails on a readiness without a byte
#     (the binding token arriving in TCP must not look readable);
#   - an upgraded connection idle in epoll costs no CPU (nothing spins).
# usage: epoll_upgrade.sh    (root: it makes a network namespace)
set -Eeuo pipefail
PROGRAMS=${QPSOCK_PROGRAMS_DIR:?}
RUN=${QPSOCK_RUN:?}
LIBRARY=${QPSOCK_LIBRARY:?}
JAR=${QPSOCK_JAVA_JAR:-$PROGRAMS/java/qpsock_test_programs.jar}
ASYNCIO=$(dirname "$(readlink -f "$0")")/../programs/asyncio_echo.py
STRICT=$(dirname "$(readlink -f "$0")")/../programs/strict_selectors_echo.py
CONNECTIONS=16
BYTES=4194304

source "$(dirname "$(readlink -f "$0")")/checks.sh" --own-network-namespace "$@"

# prefix RUNNER LOG: sets PREFIX to what runs a command under RUNNER.
prefix() {
  PREFIX=()
  [[ $1 == qpsock ]] && PREFIX=("$RUN" --library "$LIBRARY" --log-level debug --log-file "$2" --)
  return 0
}
wait_port() { # wait_port PORT: until something listens on it (at most 20 s)
  for _ in $(seq 200); do
    ss -Hltn "sport = :$1" | grep -q . && return 0
    sleep 0.1
  done
  return 1
}

PORT=7000
# echo_pair NAME RUNNER SERVER_COMMAND...: the server (PORT replaced by the
# port) and echo_client under RUNNER; the client's report is $WORK/NAME.RUNNER.
echo_pair() {
  local name=$1 runner=$2
  shift 2
  PORT=$((PORT + 1))
  local command=("${@//@PORT@/$PORT}")
  rm -f "$WORK/$name.$runner".*log
  prefix "$runner" "$WORK/$name.$runner.server.log"
  timeout -k 5 120 "${PREFIX[@]}" "${command[@]}" >"$WORK/$name.$runner.server.out" 2>&1 &
  local server_pid=$!
  PIDS+=("$server_pid")
  if ! wait_port "$PORT"; then
    fail "$name ($runner): the server never listened"
    cat "$WORK/$name.$runner.server.out" >&2
    return
  fi
  local status=0 server_status=0
  prefix "$runner" "$WORK/$name.$runner.client.log"
  timeout -k 5 120 "${PREFIX[@]}" "$PROGRAMS/echo_client" -c "$CONNECTIONS" -b "$BYTES" -s 21 "$PORT" \
    >"$WORK/$name.$runner" 2>"$WORK/$name.$runner.client.out" || status=$?
  wait "$server_pid" || server_status=$?
  if [[ $status != 0 || $server_status != 0 ]]; then
    fail "$name ($runner): client $status, server $server_status"
    cat "$WORK/$name.$runner.server.out" "$WORK/$name.$runner.client.out" >&2
    return
  fi
  if ! cmp -s "$WORK/reference" "$WORK/$name.$runner"; then
    fail "$name ($runner): the echoed streams differ from the plain reference"
    diff "$WORK/reference" "$WORK/$name.$runner" >&2 || true
    return
  fi
  if [[ $runner == qpsock ]]; then
    local side count
    for side in server client; do
      count=$(grep -c "upgraded to shared memory" "$WORK/$name.$runner.$side.log" || true)
      if [[ $count != "$CONNECTIONS" ]]; then
        fail "$name: the $side log shows $count upgrades, not $CONNECTIONS"
        grep -v statistics "$WORK/$name.$runner.$side.log" | head -20 >&2
        return
      fi
    done
  fi
  pass "$name ($runner): $CONNECTIONS x $BYTES bytes echoed intact"
}

# The reference streams: plain epoll server, plain client.
PORT=$((PORT + 1))
"$PROGRAMS/epoll_echo_server" -n "$CONNECTIONS" "$PORT" >/dev/null 2>&1 &
PIDS+=($!)
wait_port "$PORT"
timeout -k 5 60 "$PROGRAMS/echo_client" -c "$CONNECTIONS" -b "$BYTES" -s 21 "$PORT" >"$WORK/reference" 2>/dev/null
wait

SERVERS=(
  "epoll-level|$PROGRAMS/epoll_echo_server -m level -n $CONNECTIONS @PORT@"
  "epoll-edge|$PROGRAMS/epoll_echo_server -m edge -n $CONNECTIONS @PORT@"
  "epoll-oneshot-4-threads|$PROGRAMS/epoll_echo_server -m oneshot -t 4 -n $CONNECTIONS @PORT@"
  "epoll-nested-in-epoll|$PROGRAMS/epoll_echo_server -m edge -w epoll -n $CONNECTIONS @PORT@"
  "epoll-nested-in-poll|$PROGRAMS/epoll_echo_server -m oneshot -t 2 -w poll -n $CONNECTIONS @PORT@"
)
if [[ -f $JAR ]] && command -v java >/dev/null; then
  SERVERS+=("java-nio-selector|java -XX:+UseSerialGC -Xmx256m -XX:TieredStopAtLevel=1 -cp $JAR NioEchoServer @PORT@ $CONNECTIONS")
else
  echo "epoll_upgrade: no JDK or test jar; the Java NIO case is skipped" >&2
fi

payload=0
before=$(out_octets)
for spec in "${SERVERS[@]}"; do
  IFS='|' read -r name command <<<"$spec"
  read -r -a command <<<"$command"
  echo_pair "$name" qpsock "${command[@]}"
  payload=$((payload + 2 * CONNECTIONS * BYTES))
done
grown=$(($(out_octets) - before))
switched=$(switched_tcp_bytes "$WORK"/*.qpsock.*.log)
echo "epoll_upgrade: $payload payload bytes; IP OutOctets grew by $grown;" \
  "the connections sent $switched bytes over TCP before their switch" >&2
# What a connection writes before its switch goes over TCP (how much depends
# on how soon the upgrade completes, up to shm_upgrade_bytes and then what is
# written while the handshake is in flight); after the switch nothing may. So
# TCP/IP may carry those bytes, their headers and acknowledgements, and the
# handshakes: an eighth more and 64 KiB per connection, no more.
allowed=$((switched + switched / 8 + 65536 * CONNECTIONS * ${#SERVERS[@]}))
if ((grown <= allowed)); then
  pass "the kernel's TCP/IP carried $((grown * 100 / payload))% of the payload, the bytes before the switch"
else
  fail "the kernel's TCP/IP carried $grown bytes of $payload; the connections sent $switched before the switch"
fi

# python asyncio: its own client (sha256 per connection), against its plain run.
asyncio_run() { # asyncio_run RUNNER
  local runner=$1 port_file=$WORK/asyncio.$1.port
  prefix "$runner" "$WORK/asyncio.$runner.server.log"
  timeout -k 5 120 "${PREFIX[@]}" python3 "$ASYNCIO" server "$port_file" 8 >"$WORK/asyncio.$runner.server.out" 2>&1 &
  local server_pid=$!
  PIDS+=("$server_pid")
  for _ in $(seq 200); do [[ -s $port_file ]] && break; sleep 0.1; done
  prefix "$runner" "$WORK/asyncio.$runner.client.log"
  timeout -k 5 120 "${PREFIX[@]}" python3 "$ASYNCIO" client "$(cat "$port_file")" 8 "$BYTES" 5 >"$WORK/asyncio.$runner"
  wait "$server_pid"
}
if asyncio_run plain && asyncio_run qpsock && cmp -s "$WORK/asyncio.plain" "$WORK/asyncio.qpsock"; then
  upgrades=$(cat "$WORK"/asyncio.qpsock.{server,client}.log | grep -c "upgraded to shared memory" || true)
  if [[ $upgrades == 16 ]]; then
    pass "python asyncio: 8 connections echoed intact, all upgraded"
  else
    fail "python asyncio: $upgrades upgrade lines, not 16"
  fi
else
  fail "python asyncio: failed or differs from its plain run"
fi

# A server that takes readiness at its word (python selectors; a recv that
# finds nothing after EPOLLIN ends it): every connection switches while
# the server sleeps in epoll_wait, and the binding token that arrives in TCP
# then must not show as readable. Twice 48 connections of 20 messages with
# pauses, every connection upgraded at its first I/O, every echo checked.
strict_run() { # strict_run ROUND
  local port_file=$WORK/strict.$1.port
  "$RUN" --library "$LIBRARY" --log-level info --set shm_upgrade_delay=0 \
    --log-file "$WORK/strict.$1.server.log" -- \
    timeout -k 5 60 python3 "$STRICT" server "$port_file" 48 2>"$WORK/strict.$1.server.out" &
  local server_pid=$!
  PIDS+=("$server_pid")
  for _ in $(seq 200); do [[ -s $port_file ]] && break; sleep 0.1; done
  local echoed="" server_status=0 client_status=0 port=""
  [[ -s $port_file ]] && port=$(cat "$port_file")
  echoed=$("$RUN" --library "$LIBRARY" --log-level info --set shm_upgrade_delay=0 \
             --log-file "$WORK/strict.$1.client.log" -- \
             timeout -k 5 60 python3 "$STRICT" client "${port:-0}" 48 20 5 2>"$WORK/strict.$1.client.out") ||
    client_status=$?
  wait "$server_pid" || server_status=$?
  local upgrades
  upgrades=$(grep -c "upgraded to shared memory" "$WORK/strict.$1.server.log" 2>/dev/null || true)
  if [[ $server_status != 0 || $client_status != 0 || $echoed != 61440 || $upgrades != 48 ]]; then
    fail "strict selectors server, round $1: port '${port}', server $server_status, client" \
         "$client_status, ${echoed:-0} of 61440 bytes echoed, $upgrades of 48 upgraded"
    local each
    for each in server.out client.out server.log client.log; do
      echo "--- strict.$1.$each (last lines)" >&2
      tail -5 "$WORK/strict.$1.$each" >&2 2>/dev/null || true
    done
    return
  fi
  pass "strict selectors server, round $1: 48 connections x 20 messages echoed, all upgraded," \
       "no readiness without a byte"
}
strict_run 1
strict_run 2

# Idle: one upgraded connection waiting in epoll_wait costs no CPU. Upgraded
# at the first I/O (no delay): with the delay, a process's only connection
# upgrades at its first I/O after it, here the pong.
PORT=$((PORT + 1))
"$RUN" --library "$LIBRARY" --log-level info --set shm_upgrade_delay=0 --log-file "$WORK/idle.server.log" -- \
  "$PROGRAMS/epoll_echo_server" -m edge -n 1 "$PORT" >/dev/null 2>&1 &
idle_server=$!
PIDS+=("$idle_server")
wait_port "$PORT"
(echo ping; sleep 3; echo pong) | timeout 20 "$RUN" --library "$LIBRARY" --log-level info --set shm_upgrade_delay=0 \
  --log-file "$WORK/idle.client.log" -- socat - "TCP:127.0.0.1:$PORT" >"$WORK/idle.out" &
idle_client=$!
PIDS+=("$idle_client")
for _ in $(seq 100); do grep -q ping "$WORK/idle.out" 2>/dev/null && break; sleep 0.05; done
server_process=$(pgrep -P "$idle_server" -x epoll_echo_serv || echo "$idle_server")
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
first=$(ticks "$server_process")
sleep 2
idle_ticks=$(($(ticks "$server_process") - first))
wait "$idle_client" || true
wait "$idle_server" || true
if [[ $(tr '\n' ' ' <"$WORK/idle.out") == "ping pong " ]] && grep -q "upgraded to shared memory" "$WORK/idle.server.log" &&
   ((idle_ticks <= 5)); then
  pass "idle upgraded connection in epoll: $idle_ticks CPU ticks in 2 s"
else
  fail "idle upgraded connection: $idle_ticks CPU ticks in 2 s, output '$(cat "$WORK/idle.out")'"
fi

echo "epoll_upgrade: $failures failed" >&2
[[ $failures == 0 ]]
