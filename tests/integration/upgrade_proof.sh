#!/usr/bin/env bash
# Runs one real-program scenario (a lib.sh script: socat/nc, iperf3, curl
# against http.server, the Java blocking and NIO servers with 16 clients)
# under qpsock only, in a network namespace of its own, and proves that its
# connections were upgraded to shared memory rather than assuming it:
#   - the scenario passes (its own checksums against the original data);
#   - the log of every process shows at least MIN_UPGRADES upgrades;
#   - the kernel's IP counter (/proc/net/netstat IpExt OutOctets, the
#     namespace's alone) grows by no more than what the connections' debug
#     logs say they sent before their switch, with headers and handshakes:
#     after the switch, nothing crosses TCP. MIN_PAYLOAD, the bytes the
#     scenario is known to move at the least, is there to report the share;
#     TCP_BYTES (0 if not given) is what its connections that end before an
#     upgrade carry over TCP by design.
# usage: upgrade_proof.sh SCRIPT MIN_UPGRADES MIN_PAYLOAD_BYTES [TCP_BYTES]
#        (root: it makes a network namespace; else skipped)
set -Eeuo pipefail
script=$1 min_upgrades=$2 min_payload=$3 tcp_bytes=${4:-0}
name=$(basename "$script" .sh)

source "$(dirname "$(readlink -f "$0")")/checks.sh" --own-network-namespace "$@"
log=$WORK/qpsock.log

before=$(out_octets)
status=0
bash "$script" "qpsock:--log-level debug --log-file $log" || status=$?
grown=$(($(out_octets) - before))
upgrades=$(grep -c "upgraded to shared memory" "$log" 2>/dev/null || true)
switched=$(switched_tcp_bytes "$log" 2>/dev/null || echo 0)
echo "$name under qpsock: $upgrades upgrades; IP OutOctets grew by $grown bytes" \
  "($((grown * 100 / min_payload))% of the $min_payload payload bytes it moves at the least);" \
  "the connections sent $switched bytes over TCP before their switch" >&2

if [[ $status != 0 ]]; then
  fail "$name failed under qpsock (status $status)"
  # What qpsock said last, and every warning: a failure in CI has nothing else.
  printf '\n----- qpsock.log: warnings and errors -----\n' >&2
  grep -E ": (warn|error): " "$log" 2>/dev/null | tail -40 >&2 || true
  printf '\n----- qpsock.log (last 80 lines) -----\n' >&2
  grep -v statistics "$log" 2>/dev/null | tail -80 >&2 || true
fi
if ((upgrades < min_upgrades)); then
  fail "$name: $upgrades upgrades in the logs, fewer than $min_upgrades"
  grep -v statistics "$log" 2>/dev/null | head -20 >&2 || true
else
  pass "$name: $upgrades connection ends upgraded to shared memory"
fi
# Headers and acknowledgements: an eighth more; the handshakes and the
# connections that end before upgrading: 64 KiB per upgraded end.
if ((grown > tcp_bytes + switched + switched / 8 + 65536 * upgrades)); then
  fail "$name: the kernel's TCP/IP carried $grown bytes; the connections sent $switched before their switch"
else
  pass "$name: after the switch the payload did not cross the kernel's TCP/IP"
fi
((failures == 0))
