#!/usr/bin/env bash
# shell_probe.sh PORT EXEC_PROBE [HOST]: a shell script as the program under
# test. Talks to an echo server on HOST:PORT (default 127.0.0.1) through
# bash's own /dev/tcp (bash's socket/connect/read/write), one line at a time,
# printing each reply; then runs EXEC_PROBE report as a child (its qpsock=...
# line shows whether qpsock reached a program the script starts).
#
# bash leaves fd 3 open in every child it forks, so the children of the
# loop (the command substitutions, and EXEC_PROBE run mid-stream) inherit
# the socket after its upgrade without touching it: the script's own
# connection must go on, every line echoed.
set -euo pipefail
port=$1
probe=$2
host=${3:-127.0.0.1}

exec 3<>"/dev/tcp/$host/$port"
for index in $(seq 1 200); do
  line="line $index $(printf '%0*d' $((index % 97)) 0)"
  printf '%s\n' "$line" >&3
  IFS= read -r -t 10 reply <&3
  if [[ "$reply" != "$line" ]]; then
    echo "shell_probe: sent '$line', got back '$reply'" >&2
    exit 1
  fi
  printf 'echoed %s\n' "$reply"
  # A program forked and exec'd with the upgraded socket inherited.
  if (( index == 100 )); then "$probe" exit 0; fi
done
exec 3>&-
"$probe" report
