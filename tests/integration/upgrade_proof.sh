#!/usr/bin/env bash
# Runs one real-program scenario (a lib.sh script: socat/nc, iperf3, curl
# against http.server, the Java blocking and NIO servers with 16 clients)
# under qpsock only, in a network namespace of its own, and proves that its
# connections were upgraded to shared memory rather than assuming it:
#   - the scenario passes (its own checksums against the original data);
#   - the log of every process shows at least MIN_UPGRADES upgrades;
#   - the kernel's IP counter (/proc/net/netstat IpExt OutOctets, the
#     namespace's alone) grows by less than a quarter of MIN_PAYLOAD, the
#     bytes the scenario is known to move at the least (what crosses TCP is
#     what each connection wrote before its switch, and the handshakes).
# usage: upgrade_proof.sh SCRIPT MIN_UPGRADES MIN_PAYLOAD_BYTES
#        (root: it makes a network namespace; else skipped)
set -Eeuo pipefail
script=$1 min_upgrades=$2 min_payload=$3
name=$(basename "$script" .sh)

if [[ ${QPSOCK_IN_NAMESPACE:-} != 1 ]]; then
  if [[ $(id -u) != 0 ]] || ! unshare --net true 2>/dev/null; then
    echo "upgrade_proof: needs root for a network namespace; skipped" >&2
    exit 77
  fi
  exec unshare --net env QPSOCK_IN_NAMESPACE=1 bash "$0" "$@"
fi
ip link set lo up

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
log=$WORK/qpsock.log
out_octets() { awk '/^IpExt:/ { if (header) { print $9; exit } header = 1 }' /proc/net/netstat; }

before=$(out_octets)
status=0
bash "$script" "qpsock:--log-level info --log-file $log" || status=$?
grown=$(($(out_octets) - before))
upgrades=$(grep -c "upgraded to shared memory" "$log" 2>/dev/null || true)
echo "$name under qpsock: $upgrades upgrades; IP OutOctets grew by $grown bytes" \
  "($((grown * 100 / min_payload))% of the $min_payload payload bytes it moves at the least)" >&2

failures=0
if [[ $status != 0 ]]; then
  echo "FAIL: $name failed under qpsock (status $status)" >&2
  failures=$((failures + 1))
fi
if ((upgrades < min_upgrades)); then
  echo "FAIL: $name: $upgrades upgrades in the logs, fewer than $min_upgrades" >&2
  grep -v statistics "$log" 2>/dev/null | head -20 >&2 || true
  failures=$((failures + 1))
else
  echo "ok: $name: $upgrades connection ends upgraded to shared memory" >&2
fi
if ((grown * 4 >= min_payload)); then
  echo "FAIL: $name: the kernel's TCP/IP carried $grown bytes; the payload is at least $min_payload" >&2
  failures=$((failures + 1))
else
  echo "ok: $name: the payload did not cross the kernel's TCP/IP" >&2
fi
((failures == 0))
