#!/usr/bin/env bash
# A storm of short connections: a server that serves each in a thread of
# its own and closes it, so that every number is reused at once while
# qpsock's upgrades, FINs and doorbells for the connection that had it may
# be under way: a quarter are closed by the client before any byte, a
# quarter by the server after one, and half carry 1 B to 256 KiB answered
# by CRC-32, the client closing first (tests/programs/reuse_storm.c). Every answer
# must be right, and every connection accounted for at both ends.
# REUSE_STORM_COUNT (default 1200) connections from 8 client threads.
# usage: reuse_storm.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_program reuse_storm

count=${REUSE_STORM_COUNT:-1200}
program=$QPSOCK_PROGRAMS_DIR/reuse_storm

for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  port=$(free_port)
  start_under "$runner" "server.$tag" "$program" server "$port" "$count"
  if ! wait_for_port "$port" 20 "server.$tag"; then
    fail "reuse_storm server ($runner) is not listening on port $port"
    continue
  fi
  output=$TEST_TMP/client.$tag
  if run_under "$runner" 120 "$program" client "$port" "$count" 8 11 >"$output" 2>&1; then
    pass "reuse_storm client ($runner): $(tail -n 1 "$output")"
  else
    fail "reuse_storm client ($runner): $(tail -n 3 "$output" | tr '\n' ' ')"
  fi
  if wait_background "server.$tag"; then
    pass "reuse_storm server ($runner): $(grep served "$(background_log "server.$tag")")"
  else
    fail "reuse_storm server ($runner): $(tail -n 3 "$(background_log "server.$tag")" | tr '\n' ' ')"
  fi
done
finish
