# Sourced by bench/run-softroce and bench/count-instructions once they run
# beside the two rxe devices (in the VM or the local rxe mode): what both do
# with the pair. Expects SERVER, work (a directory) and pids (an array the
# caller's EXIT trap kills).

# rxe_packets: the Soft-RoCE packets both devices have sent so far.
rxe_packets() {
  local total=0 file
  for file in /sys/class/infiniband/rxe{0,1}/ports/1/hw_counters/sent_pkts; do
    total=$((total + $(cat "$file" 2>/dev/null || echo 0)))
  done
  echo "$total"
}

# start_server TAG SECONDS ERRORS COMMAND...: starts `COMMAND server` on
# $SERVER in the background for at most SECONDS, its stderr in ERRORS; its
# pid in server_pid (and pids), its port in $work/port. Returns 1, with a
# line on stderr, if it has not published its port within 20 s.
start_server() {
  local tag=$1 seconds=$2 errors=$3
  shift 3
  rm -f "$work/port"
  timeout "$seconds" "$@" server --host "$SERVER" --port-file "$work/port" >/dev/null 2>"$errors" &
  server_pid=$!
  pids+=("$server_pid")
  for _ in $(seq 200); do [[ -s $work/port ]] && break; sleep 0.1; done
  [[ -s $work/port ]] && return 0
  echo "$tag: the server did not start: $(tail -n 2 "$errors")" >&2
  kill -KILL "$server_pid" 2>/dev/null
  return 1
}
