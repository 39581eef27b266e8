#!/usr/bin/env bash
# Servers that exit while their last echoes are still on the way: a nested
# epoll echo server (-m edge -w epoll) serves 16 connections of echo_client,
# 4 MiB each, and exits once all 16 have ended, leaving its kernel to send
# what TCP still holds. Under shm_upgrade_delay=50ms each connection first
# carries megabytes over TCP, then switches; the server closes connections
# whose echo it still holds (a lingering close), and the client reads its
# TCP bytes late. Every round's report (bytes and CRC-32 per connection)
# must equal plain's: a doorbell left unread in a socket at the server's
# exit made the kernel reset it, throwing away TCP's send queue (about one
# round in 30 failed with ECONNRESET before the fix).
# ECHO_EXIT_ROUNDS (default 12) rounds under each qpsock runner.
# usage: echo_exit.sh [RUNNER...]   (see lib.sh; default: plain qpsock:--set shm_upgrade_delay=50ms)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
(($# > 0)) || set -- plain "qpsock:--set shm_upgrade_delay=50ms"
parse_runners "$@"
require_program epoll_echo_server
require_program echo_client

rounds=${ECHO_EXIT_ROUNDS:-12}
reference=""
for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  count=$rounds
  runner_loads_qpsock "$runner" || count=1  # plain's report is the reference
  failed=0
  for ((round = 1; round <= count; round++)); do
    port=$(free_port)
    start_under "$runner" "server.$tag.$round" "$QPSOCK_PROGRAMS_DIR/epoll_echo_server" \
      -m edge -w epoll -n 16 "$port"
    if ! wait_for_port "$port" 20 "server.$tag.$round"; then
      fail "echo_exit ($runner) round $round: the server never listened"
      failed=1
      break
    fi
    report=$TEST_TMP/report.$tag.$round
    if ! run_under "$runner" 120 "$QPSOCK_PROGRAMS_DIR/echo_client" -c 16 -b 4194304 -s 21 \
      "$port" >"$report" 2>"$report.err"; then
      fail "echo_exit ($runner) round $round: $(grep -v qpsock= "$report.err" | head -n 2 | tr '\n' ' ')"
      failed=1
    fi
    wait_background "server.$tag.$round" || {
      fail "echo_exit ($runner) round $round: the server failed"
      failed=1
    }
    [[ -n $reference ]] || reference=$report
    if ! cmp -s "$reference" "$report"; then
      fail "echo_exit ($runner) round $round: the report differs from plain's"
      failed=1
    fi
    ((failed == 0)) || break
  done
  ((failed == 0)) && pass "echo_exit ($runner): $count rounds of 16 x 4 MiB echoed intact, the server exiting at the end"
done
finish
