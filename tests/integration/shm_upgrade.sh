#!/usr/bin/env bash
# Same-host upgrade to shared memory, proved rather than assumed. In a network
# namespace of its own (so no other test's traffic counts), two bulk_exchange
# processes under qpsock-run move BYTES each way at once with random write and
# read sizes from 1 B to 4 MiB; every byte is verified. The kernel's IP
# counter (/proc/net/netstat IpExt OutOctets) must grow by far less than the
# payload, and both logs must say the connection was upgraded. Then mixed
# pairs (qpsock with a plain peer, both roles) must move the same bytes intact
# on TCP, with no stall.
# usage: shm_upgrade.sh [BYTES]    (root: it makes a network namespace)
set -Eeuo pipefail
BYTES=${1:-1073741824}
PROGRAM=${QPSOCK_PROGRAMS_DIR:?}/bulk_exchange
RUN=${QPSOCK_RUN:?}
LIBRARY=${QPSOCK_LIBRARY:?}

if [[ ${QPSOCK_IN_NAMESPACE:-} != 1 ]]; then
  if [[ $(id -u) != 0 ]] || ! unshare --net true 2>/dev/null; then
    echo "shm_upgrade: needs root for a network namespace; skipped" >&2
    exit 77
  fi
  exec unshare --net env QPSOCK_IN_NAMESPACE=1 bash "$0" "$@"
fi
ip link set lo up

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*" >&2; }

out_octets() { awk '/^IpExt:/ { if (header) { print $9; exit } header = 1 }' /proc/net/netstat; }

# run_pair NAME SERVER_RUNNER CLIENT_RUNNER: each runner is "qpsock" or "plain".
run_pair() {
  local name=$1 server_runner=$2 client_runner=$3
  local server=() client=()
  [[ $server_runner == qpsock ]] && server=("$RUN" --library "$LIBRARY" --log-level info --)
  [[ $client_runner == qpsock ]] && client=("$RUN" --library "$LIBRARY" --log-level info --)
  rm -f "$WORK/port"
  timeout -k 5 150 "${server[@]}" "$PROGRAM" server "$WORK/port" "$BYTES" \
    2>"$WORK/$name.server.log" &
  local server_pid=$!
  PIDS+=("$server_pid")
  for _ in $(seq 100); do [[ -s $WORK/port ]] && break; sleep 0.05; done
  local status=0
  timeout -k 5 150 "${client[@]}" "$PROGRAM" client "$(cat "$WORK/port")" "$BYTES" \
    2>"$WORK/$name.client.log" || status=$?
  local server_status=0
  wait "$server_pid" || server_status=$?
  if [[ $status == 0 && $server_status == 0 ]]; then
    pass "$name: $BYTES bytes each way verified"
  else
    fail "$name: client $status, server $server_status"
    cat "$WORK/$name.server.log" "$WORK/$name.client.log" >&2
  fi
}

before=$(out_octets)
started=$(date +%s.%N)
run_pair both-qpsock qpsock qpsock
seconds=$(echo "$(date +%s.%N) - $started" | bc)
after=$(out_octets)
grown=$((after - before))
echo "both-qpsock: $((2 * BYTES)) payload bytes in ${seconds}s; IP OutOctets grew by $grown" >&2
if ((grown * 100 < 2 * BYTES)); then
  pass "the kernel's TCP/IP carried under 1% of the payload"
else
  fail "the kernel's TCP/IP carried $grown bytes of $((2 * BYTES))"
fi
for side in server client; do
  if grep -q "upgraded to shared memory" "$WORK/both-qpsock.$side.log"; then
    pass "$side log: upgraded to shared memory"
  else
    fail "$side log does not show the upgrade"
    cat "$WORK/both-qpsock.$side.log" >&2
  fi
done

MIXED_BYTES=$((BYTES < 67108864 ? BYTES : 67108864))
BYTES=$MIXED_BYTES run_pair qpsock-server-plain-client qpsock plain
BYTES=$MIXED_BYTES run_pair plain-server-qpsock-client plain qpsock

echo "shm_upgrade: $failures failure(s)" >&2
((failures == 0))
