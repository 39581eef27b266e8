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

source "$(dirname "$(readlink -f "$0")")/checks.sh" --own-network-namespace "$@"
log=$WORK/qpsock.log

before=$(out_octets)
status=0
bash "$script" "qpsock:--log-level info --log-file $log" || status=$?
grown=$(($(out_octets) - before))
upgrades=$(grep -c "upgraded to shared memory" "$log" 2>/dev/null || true)
echo "$name under qpsock: $upgrades upgrades; IP OutOctets grew by $grown bytes" \
  "($((grown * 100 / min_payload))% of the $min_payload payload bytes it moves at the least)" >&2

if [[ $status != 0 ]]; then
  fail "$name failed under qpsock (status $status)"
fi
if ((upgrades < min_upgrades)); then
  fail "$name: $upgrades upgrades in the logs, fewer than $min_upgrades"
  grep -v statistics "$log" 2>/dev/null | head -20 >&2 || true
else
  pass "$name: $upgrades connection ends upgraded to shared memory"
fi
if ((grown * 4 >= min_payload)); then
  fail "$name: the kernel's TCP/IP carried $grown bytes; the payload is at least $min_payload"
else
  pass "$name: the payload did not cross the kernel's TCP/IP"
fi
((failures == 0))
