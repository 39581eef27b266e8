#!/usr/bin/env bash
# socat as a fork-per-connection echo server through a pipe (socat
# TCP-LISTEN:PORT,fork PIPE) and 50 asyncio clients, each writing messages
# of 1 B to 2 MiB, each whole (awaiting drain) before it reads the echo back.
# socat blocks writing into its own pipe while its socket is not writable:
# it works only if the connection's buffers hold a message, as TCP's do.
# (backlog=128: socat's default listen backlog of 5 makes some of 50
# simultaneous connects fail plainly.)
# Under qpsock a write the peer's ring has no room for goes into the
# writer's send backlog at once, as into TCP's send buffer, and the reader's
# engine holds more in its receive backlog (docs/stream-engine.md, "Room").
# Every echo is compared by sha256;
# a run that does not finish in 60 s hung.
# usage: pipe_echo.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
# PIPE_ECHO_RUNS (default 20) runs under qpsock, 3 plain.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools socat python3

CLIENTS=50 MESSAGES=10
clients=$(dirname "${BASH_SOURCE[0]}")/pipe_echo_clients.py

for runner in "${RUNNERS[@]}"; do
  runs=3
  runner_loads_qpsock "$runner" && runs=${PIPE_ECHO_RUNS:-20}
  tag=$(runner_tag "$runner")
  hung=0 failed=0 bytes=0
  for ((run = 1; run <= runs; run++)); do
    start_server "$runner" "socat.$tag.$run" socat "TCP-LISTEN:@PORT@,bind=127.0.0.1,reuseaddr,fork,backlog=128" PIPE ||
      { failed=$((failed + 1)); continue; }
    status=0
    out=$LOG_DIR/clients.$tag.$run.log
    run_under "$runner" 60 python3 "$clients" "$SERVER_PORT" "$CLIENTS" "$MESSAGES" "$run" >"$out" 2>&1 ||
      status=$?
    stop_background "socat.$tag.$run"
    if ((status == 124 || status == 137)); then
      hung=$((hung + 1))
    elif ((status != 0)) || ! grep -q '^ok ' "$out"; then
      failed=$((failed + 1))
      log "run $run ($runner): $(tail -n 1 "$out")"
    else
      bytes=$((bytes + $(sed -n 's/^ok //p' "$out")))
    fi
  done
  check "$runner: $runs runs of $CLIENTS clients echoed through socat's pipe, $bytes bytes intact; $hung hung, $failed failed" \
    test "$hung" -eq 0 -a "$failed" -eq 0
done
finish
