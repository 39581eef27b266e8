#!/usr/bin/env bash
# A client near its descriptor limit: 1000 connections held open at once,
# each echoed and checked, under a soft RLIMIT_NOFILE of 1024 at both ends.
# Plainly that works; under qpsock it must too, and qpsock's own descriptors
# must stay out of the application's range (src/common/own_descriptor.h):
# - soft 1024 under a higher hard limit: every connection upgrades, its
#   descriptors renumbered above 1024 (the client holds them all a while
#   after the last opened: a server begins an upgrade shm_upgrade_delay
#   after a connection's first I/O, and one whose client closed first
#   stays on TCP);
# - soft = hard = 1024: no room above, so every connection stays on TCP,
#   with one warning line from each process that would have used some.
# usage: descriptor_limit.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools python3 prlimit

count=1000
# 20 times the default shm_upgrade_delay.
hold_seconds=1
program=$QPSOCK_SOURCE_DIR/tests/programs/connection_hoard.py
hard=$(ulimit -Hn)
[[ $hard == unlimited ]] && hard=1048576

# hoard RUNNER TAG LIMITS: one server and one client under prlimit's LIMITS;
# true if both succeeded.
hoard() {
  local runner=$1 tag=$2 limits=$3 port_file=$TEST_TMP/port.$2 status=0
  export QPSOCK_LOG_LEVEL=info
  export QPSOCK_LOG_FILE=$TEST_TMP/qpsock.$tag.log
  start_under "$runner" "server.$tag" prlimit --nofile="$limits" python3 "$program" server \
    "$port_file" "$count"
  for _ in $(seq 200); do [[ -s $port_file ]] && break; sleep 0.05; done
  if run_under "$runner" 120 prlimit --nofile="$limits" python3 "$program" client \
    "$(cat "$port_file" 2>/dev/null)" "$count" "$hold_seconds" >"$TEST_TMP/client.$tag" 2>&1; then
    log "$(cat "$TEST_TMP/client.$tag")"
  else
    fail "$tag: client failed: $(tail -n 2 "$TEST_TMP/client.$tag" | tr '\n' ' ')"
    status=1
  fi
  if wait_background "server.$tag"; then
    log "$(cat "$(background_log "server.$tag")")"
  else
    fail "$tag: server failed: $(tail -n 2 "$(background_log "server.$tag")" | tr '\n' ' ')"
    status=1
  fi
  unset QPSOCK_LOG_LEVEL QPSOCK_LOG_FILE
  return "$status"
}

# lines PATTERN TAG: how many of TAG's qpsock log lines match.
lines() { grep -c -- "$1" "$TEST_TMP/qpsock.$2.log" 2>/dev/null || true; }

for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  if ((hard >= 8192)); then
    if hoard "$runner" "above.$tag" 1024:"$hard"; then
      if ! runner_loads_qpsock "$runner"; then
        pass "soft limit 1024 ($runner): $count connections held and echoed"
      elif [[ $(lines "upgraded to shared memory" "above.$tag") == $((2 * count)) ]]; then
        pass "soft limit 1024 ($runner): $count connections held, echoed, all upgraded"
      else
        fail "soft limit 1024 ($runner): $(lines "upgraded to shared memory" "above.$tag") of $((2 * count)) ends upgraded"
      fi
    fi
  else
    log "hard limit $hard: no room above a soft 1024 for every connection's descriptors; that case skipped"
  fi
  if hoard "$runner" "equal.$tag" 1024:1024; then
    if ! runner_loads_qpsock "$runner"; then
      pass "limit 1024:1024 ($runner): $count connections held and echoed"
    else
      upgraded=$(lines "upgraded to" "equal.$tag")
      warned=$(lines "RLIMIT_NOFILE 1024 (hard 1024): no room above" "equal.$tag")
      warnings=$(lines ": warn: " "equal.$tag")
      if [[ $upgraded == 0 && $warned -ge 1 && $warned -le 2 && $warnings == "$warned" ]]; then
        pass "limit 1024:1024 ($runner): $count connections on TCP, $warned warning lines (one a process)"
      else
        fail "limit 1024:1024 ($runner): $upgraded upgraded, $warned limit warnings, $warnings warnings"
      fi
    fi
  fi
done
finish
