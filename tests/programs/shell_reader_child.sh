#!/usr/bin/env bash
# shell_reader_child.sh PORT [HOST [PAUSE]]: a shell script that connects to
# an echo server on HOST:PORT (default 127.0.0.1) through bash's /dev/tcp and
# hands the reading to a child: `head -c N <&3` runs in the background,
# holding the socket, while the script writes N bytes of lines (the first
# line, then PAUSE seconds, default 0, then the rest: an upgrade between hosts
# comes a while after the server's first read). Prints whether the child read
# back exactly what was written; exits 0 only if it did.
#
# Under qpsock the script's connection must stay on TCP: its upgrade would
# move the echo to a stream that only the script's process could read.
set -euo pipefail
port=$1
host=${2:-127.0.0.1}
pause=${3:-0}

lines=$(for index in $(seq 1 300); do printf 'line %d %0*d\n' "$index" $((index % 89)) 0; done)
lines+=$'\n'
total=$(printf '%s' "$lines" | wc -c)
received=$(mktemp)
trap 'rm -f "$received"' EXIT

exec 3<>"/dev/tcp/$host/$port"
head -c "$total" <&3 >"$received" &
reader=$!
first=${lines%%$'\n'*}$'\n'
printf '%s' "$first" >&3
sleep "$pause"
printf '%s' "${lines#"$first"}" >&3
status=0
wait "$reader" || status=$?
exec 3>&-
if ((status == 0)) && cmp -s "$received" <(printf '%s' "$lines"); then
  echo "the child read back all $total bytes, identical"
  exit 0
fi
echo "the child's head exited $status after $(wc -c <"$received") of $total bytes (or they differ)"
exit 1
