#!/usr/bin/env bash
# The RDMA path on a host without RDMA: both ends of a bulk_exchange pair run
# under qpsock-run with same_host = rdma (so that a loopback pair takes the
# path used between hosts), find no RDMA device, and stay on TCP: every byte
# verified, each end's log has its one "no RDMA device on this host" line,
# and neither says "upgraded". Twice: with rdma_upgrade_delay 0 each end
# asks at once (the client in connect, the server at its first I/O); with
# the built-in delay each asks once the connection has lived that long (the
# pair holds its connection open until both lines are there). Skipped (77)
# where an RDMA device exists: the Soft-RoCE VM suite
# (tests/vm/rdma_upgrade.sh) covers that case.
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
LINE="no RDMA device on this host.*stays on TCP"

# pair NAME SETTING...: a server and a client, each under qpsock-run with
# same_host = rdma and the SETTINGs (--set NAME=VALUE); with a hold file in
# $HOLD, the pair keeps its connection open until that file exists.
pair() {
  local name=$1 server client_status=0 server_status=0 side
  shift
  local settings=(--set same_host=rdma)
  for setting in "$@"; do settings+=(--set "$setting"); done
  local hold=() released=$WORK/$name.released
  [[ -n ${HOLD:-} ]] && hold=(env BULK_EXCHANGE_HOLD="$released")
  timeout 60 "${hold[@]}" "$RUN" --library "$LIBRARY" "${settings[@]}" --log-level info \
    --log-file "$WORK/$name.server.log" -- "$PROGRAM" server "$WORK/$name.port" "$BYTES" \
    2>"$WORK/$name.server.out" &
  PIDS+=($!)
  server=$!
  for ((i = 0; i < 200; i++)); do [[ -s $WORK/$name.port ]] && break; sleep 0.05; done
  [[ -s $WORK/$name.port ]] || { fail "$name: the server did not listen"; return; }
  timeout 60 "${hold[@]}" "$RUN" --library "$LIBRARY" "${settings[@]}" --log-level info \
    --log-file "$WORK/$name.client.log" -- "$PROGRAM" client "$(<"$WORK/$name.port")" "$BYTES" \
    2>"$WORK/$name.client.out" &
  PIDS+=($!)
  local client=$!
  if [[ -n ${HOLD:-} ]]; then
    # Until both ends asked (each once its delay is over), then released.
    for ((i = 0; i < 400; i++)); do
      grep -q "$LINE" "$WORK/$name.server.log" 2>/dev/null &&
        grep -q "$LINE" "$WORK/$name.client.log" 2>/dev/null && break
      sleep 0.05
    done
    touch "$released"
  fi
  wait "$client" || client_status=$?
  wait "$server" || server_status=$?
  local want="received and verified $BYTES bytes"
  if ((client_status == 0 && server_status == 0)) && grep -q "$want" "$WORK/$name.client.out" &&
     grep -q "$want" "$WORK/$name.server.out"; then
    pass "$name: $BYTES bytes each way verified at both ends"
  else
    fail "$name: exit client $client_status server $server_status"
  fi
  for side in client server; do
    if [[ $(grep -c "$LINE" "$WORK/$name.$side.log") == 1 ]] &&
       ! grep -q "upgraded to" "$WORK/$name.$side.log"; then
      pass "$name: $side: one 'no RDMA device' line, not upgraded"
    else
      fail "$name: $side: expected one 'no RDMA device' line and no upgrade"
      sed 's/^/    | /' "$WORK/$name.$side.log" >&2
    fi
  done
}

HOLD= pair no-delay rdma_upgrade_delay=0
HOLD=1 pair built-in-delay
((failures == 0))
