#!/usr/bin/env bash
# Clients that send 1 KiB to MAX bytes and exit without closing (plainly,
# after shutdown(SHUT_WR), after one non-blocking send, or with every write
# MSG_MORE; through exit or _exit): the server must
# read every byte each one sent, then end of file, as TCP gives it. Under
# qpsock on one host the stream learns of the death from the peer's pidfd,
# perhaps before the kernel has processed the dying socket's FIN: it must
# wait for that FIN, never read the death as a reset.
# PEER_EXIT_COUNT (default 150) connections, PEER_EXIT_MAX (default 4 MiB).
# usage: peer_exit.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_program exit_after_send

count=${PEER_EXIT_COUNT:-150}
max=${PEER_EXIT_MAX:-4194304}
program=$QPSOCK_PROGRAMS_DIR/exit_after_send

for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  port=$(free_port)
  start_under "$runner" "server.$tag" "$program" server "$port" "$count"
  if ! wait_for_port "$port" 20 "server.$tag"; then
    fail "exit_after_send server ($runner) is not listening on port $port"
    continue
  fi
  sent=$TEST_TMP/sent.$tag
  if ! run_under "$runner" 600 "$program" client "$port" "$count" 7 "$max" >"$sent"; then
    fail "exit_after_send client ($runner) failed"
    stop_background "server.$tag"
    continue
  fi
  wait_background "server.$tag" || true
  read_log=$(background_log "server.$tag")
  received=$TEST_TMP/received.$tag
  grep -E '^[0-9]+ [0-9]+ ' "$read_log" >"$received" || true
  resets=$(grep -c 'error:' "$received" || true)
  differing=$(join -j1 <(sort -k1,1 "$sent") <(sort -k1,1 "$received") |
    awk '$2 != $3 || $4 != "eof"' | wc -l)
  check "$count peers exited after sending ($runner): $(wc -l <"$received") read to their end, $resets errors" \
    test "$(wc -l <"$received")" -eq "$count" -a "$resets" -eq 0 -a "$differing" -eq 0
done
finish
