#!/usr/bin/env bash
# shell_probe.sh PORT EXEC_PROBE: a shell script as the program under test.
# Talks to an echo server on 127.0.0.1:PORT through bash's own /dev/tcp
# (bash's socket/connect/read/write), one line at a time, printing each
# reply; then runs EXEC_PROBE report as a child (its qpsock=... line shows
# whether qpsock reached a program the script starts).
set -euo pipefail
port=$1
probe=$2

exec 3<>"/dev/tcp/127.0.0.1/$port"
for index in $(seq 1 200); do
  line="line $index $(printf '%0*d' $((index % 97)) 0)"
  printf '%s\n' "$line" >&3
  IFS= read -r -t 10 reply <&3
  if [[ "$reply" != "$line" ]]; then
    echo "shell_probe: sent '$line', got back '$reply'" >&2
    exit 1
  fi
  printf 'echoed %s\n' "$reply"
done
exec 3>&-
"$probe" report
