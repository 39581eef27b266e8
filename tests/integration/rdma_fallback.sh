#!/usr/bin/env bash
# The RDMA path on a host without RDMA: both ends of a bulk_exchange pair run
# under qpsock-run with same_host = rdma (so that a loopback pair takes the
# path used between hosts), find no RDMA device, and stay on TCP: every byte
# verified, each end's log has its one "no RDMA device on this host" line,
# and neither says "upgraded". Skipped (77) where an RDMA device exists: the
# Soft-RoCE VM suite (tests/vm/rdma_upgrade.sh) covers that case.
set -Eeuo pipefail
PROGRAM=${QPSOCK_PROGRAMS_DIR:?}/bulk_exchange
RUN=${QPSOCK_RUN:?}
LIBRARY=${QPSOCK_LIBRARY:?}

if [[ -e /dev/infiniband/rdma_cm ]] && compgen -G '/sys/class/infiniband/*' >/dev/null; then
  echo "rdma_fallback: this host has an RDMA device; skipped" >&2
  exit 77
fi

source "$(dirname "$(readlink -f "$0")")/checks.sh"

BYTES=$((8 << 20))
qpsock() {  # log-file program...
  local log=$1; shift
  timeout 60 "$RUN" --library "$LIBRARY" --set same_host=rdma --log-level info --log-file "$log" -- "$@"
}
qpsock "$WORK/server.log" "$PROGRAM" server "$WORK/port" "$BYTES" 2>"$WORK/server.out" &
PIDS+=($!)
server=$!
for ((i = 0; i < 200; i++)); do [[ -s $WORK/port ]] && break; sleep 0.05; done
[[ -s $WORK/port ]] || { fail "the server did not listen"; exit 1; }
client_status=0
qpsock "$WORK/client.log" "$PROGRAM" client "$(<"$WORK/port")" "$BYTES" 2>"$WORK/client.out" || client_status=$?
server_status=0
wait "$server" || server_status=$?

want="received and verified $BYTES bytes"
if ((client_status == 0 && server_status == 0)) && grep -q "$want" "$WORK/client.out" &&
   grep -q "$want" "$WORK/server.out"; then
  pass "$BYTES bytes each way verified at both ends"
else
  fail "exit client $client_status server $server_status"
fi
for side in client server; do
  if [[ $(grep -c "no RDMA device on this host.*stays on TCP" "$WORK/$side.log") == 1 ]] &&
     ! grep -q "upgraded to" "$WORK/$side.log"; then
    pass "$side: one 'no RDMA device' line, not upgraded"
  else
    fail "$side: expected one 'no RDMA device' line and no upgrade"
    sed 's/^/    | /' "$WORK/$side.log" >&2
  fi
done
((failures == 0))
