#!/usr/bin/env bash
# rsync's daemon mode (rsync://): the client forks its receiver after the
# connection is upgraded, and that child reads the socket. A forked child
# cannot use its parent's upgraded stream yet (qpsock(7), LIMITATIONS), so:
#  - plain: a pull of three files (0 B, 1 MiB, 20 MiB) matches by sha256;
#  - under qpsock with a `kernel` rule for the daemon's port (what qpsock(7)
#    advises): the same pull works, both ends on TCP;
#  - under qpsock with the defaults: no hang and no wrong byte. Which way it
#    ends depends on timing: when the upgrade comes before the fork (the
#    usual case) the receiver's wait ends at once and its read meets
#    ECONNRESET, so rsync fails within seconds; when the fork comes first the
#    connection stays on TCP and the pull works.
# usage: rsync_daemon.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools rsync

SERVED=$TEST_TMP/served
mkdir -p "$SERVED"
: >"$SERVED/empty.bin"
random_file "$SERVED/mib.bin" 1M
random_file "$SERVED/large.bin" 20M
FILES=(empty.bin mib.bin large.bin)
cat >"$TEST_TMP/rsyncd.conf" <<CONFIG
use chroot = no
uid = $(id -u)
gid = $(id -g)
pid file = $TEST_TMP/rsyncd.pid
[served]
path = $SERVED
read only = yes
CONFIG

# pull RUNNER NAME [ENVIRONMENT...]: starts the daemon and pulls the files
# under RUNNER; leaves the client's status in PULL_STATUS, its seconds in
# PULL_SECONDS and its output in $LOG_DIR/NAME.client[.expected-errors].log.
pull() {
  local runner=$1 name=$2 port started
  shift 2
  port=$(free_port)
  printf '%s\n' "kernel both any $port" "offload both any" >"$TEST_TMP/$name.qpsock.conf"
  start_under "$runner" "$name.daemon" env "$@" rsync --daemon --no-detach \
    --config="$TEST_TMP/rsyncd.conf" --address=127.0.0.1 --port="$port"
  PULL_STATUS=1 PULL_SECONDS=0
  if ! wait_for_port "$port" 20 "$name.daemon"; then
    fail "$name: the rsync daemon is not listening on port $port"
    return
  fi
  rm -rf "$TEST_TMP/$name.out"
  started=$SECONDS
  PULL_STATUS=0
  run_under "$runner" 60 env "$@" rsync -a "rsync://127.0.0.1:$port/served/" "$TEST_TMP/$name.out/" \
    >"$PULL_LOG" 2>&1 || PULL_STATUS=$?
  PULL_SECONDS=$((SECONDS - started))
  stop_background "$name.daemon"
}

expect_pulled() {
  local description=$1 name=$2 file
  assert_equal "$description: rsync exit status" 0 "$PULL_STATUS"
  for file in "${FILES[@]}"; do
    assert_same_checksum "$description: $file" "$SERVED/$file" "$TEST_TMP/$name.out/$file"
  done
}

for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  if ! runner_loads_qpsock "$runner"; then
    PULL_LOG=$LOG_DIR/plain.$tag.client.log
    pull "$runner" "plain.$tag"
    expect_pulled "rsync:// pull ($runner)" "plain.$tag"
    continue
  fi
  PULL_LOG=$LOG_DIR/kernel-rule.$tag.client.log
  pull "$runner" "kernel-rule.$tag" "QPSOCK_CONF=$TEST_TMP/kernel-rule.$tag.qpsock.conf"
  expect_pulled "rsync:// pull with a kernel rule for the daemon's port ($runner)" "kernel-rule.$tag"

  PULL_LOG=$LOG_DIR/defaults.$tag.client.expected-errors.log
  pull "$runner" "defaults.$tag"
  if ((PULL_STATUS == 0)); then
    log "the defaults: the receiver was forked before the upgrade, and the pull stayed on TCP"
    expect_pulled "rsync:// pull with the defaults, kept on TCP ($runner)" "defaults.$tag"
  elif ((PULL_STATUS != 124 && PULL_SECONDS < 20)) && grep -q "Connection reset by peer" "$PULL_LOG"; then
    if grep -q "it cannot be used here yet: ECONNRESET" "$PULL_LOG"; then
      pass "rsync:// pull with the defaults ($runner): the forked receiver failed after ${PULL_SECONDS}s (status $PULL_STATUS), and the log says why"
    else
      pass "rsync:// pull with the defaults ($runner): failed after ${PULL_SECONDS}s with ECONNRESET (status $PULL_STATUS)"
    fi
  else
    fail "rsync:// pull with the defaults ($runner): status $PULL_STATUS after ${PULL_SECONDS}s: $(head -c 400 "$PULL_LOG")"
  fi
done
finish
