#!/usr/bin/env bash
# shell_child_after_upgrade.sh PORT [HOST]: a shell script that talks to an
# echo server on HOST:PORT (default 127.0.0.1) over bash's /dev/tcp, then
# hands the socket to a program it starts: `head -c 7 <&3` reads the echo of
# the script's second line. Prints "head exit STATUS" and exits 0.
#
# Without qpsock head reads the 7 bytes. Under qpsock, once the script's
# connection is upgraded, its stream is the script's: head cannot read it,
# and must fail at once with ECONNRESET (never read qpsock's bytes, never
# wait for good).
set -euo pipefail
port=$1
host=${2:-127.0.0.1}
exec 3<>"/dev/tcp/$host/$port"
printf 'hello\n' >&3
IFS= read -r -t 10 reply <&3
[[ $reply == hello ]] || { echo "got back '$reply'" >&2; exit 1; }
printf 'second\n' >&3
status=0
timeout 10 head -c 7 <&3 >/dev/null || status=$?
echo "head exit $status"
