#!/usr/bin/env bash
# qpsock-stat(1) against real processes. A python client and server, both
# under qpsock-run, exchange a known number of bytes each way and then wait;
# meanwhile `qpsock-stat --json` must list both processes with the
# connection, its path, the reason, and byte counts that match what was sent
# exactly. Cases: a config rule that says kernel (the reason names the rule),
# --no-offload, and the default (both ends upgrade to shared memory: path
# shm, the server's reply counted as offloaded). After the programs exit no
# statistics file is left; a program killed with SIGKILL leaves one, which qpsock-stat removes.
# Also: --pid, the table, --help, and exit status 0 with no processes.
# usage: qpsock_stat.sh   (runs its programs under qpsock-run only)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNNERS=(qpsock)
STAT=${QPSOCK_STAT:-$QPSOCK_BINARY_DIR/tools/qpsock-stat/qpsock-stat}
[[ -x "$STAT" ]] || die "qpsock-stat is missing at $STAT: build the project first"
export QPSOCK_STAT_DIR=$TEST_TMP/stat
# Exact offloaded counts need the upgrade before the first byte: met at the
# first I/O, not shm_upgrade_delay later.
export QPSOCK_SHM_UPGRADE_DELAY=0
CLIENT_BYTES=123457
SERVER_BYTES=654321

# The pair: the server writes its port to $1, reads CLIENT_BYTES, sends
# SERVER_BYTES, then both wait for the file $2 before closing and exiting.
cat >"$TEST_TMP/pair.py" <<'PY'
import os, socket, sys, time
role, port_file, release, client_bytes, server_bytes = sys.argv[1:6]
client_bytes, server_bytes = int(client_bytes), int(server_bytes)

def receive_exactly(connection, count):
    got = 0
    while got < count:
        chunk = connection.recv(min(65536, count - got))
        if not chunk:
            sys.exit("peer closed early")
        got += len(chunk)

if role == "server":
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    connection, _ = listener.accept()
    receive_exactly(connection, client_bytes)
    connection.sendall(b"s" * server_bytes)
else:
    while not os.path.exists(port_file):
        time.sleep(0.02)
    connection = socket.create_connection(("127.0.0.1", int(open(port_file).read())))
    connection.sendall(b"c" * client_bytes)
    receive_exactly(connection, server_bytes)
print("exchanged", flush=True)
while not os.path.exists(release):
    time.sleep(0.02)
connection.close()
PY

# Checks both processes' rows in the JSON:
#   check_rows JSON DESCRIPTION REASON_PATTERN SERVER_PID CLIENT_PID PATH
# PATH kernel: every byte over TCP. PATH shm: the totals are exact and the
# server's reply (sent after the server's first read ran the upgrade) went
# wholly over shared memory; the client's first bytes may precede the switch.
check_rows() {
  local json=$1 description=$2 reason_pattern=$3 server_pid=$4 client_pid=$5 path=$6 result
  result=$(python3 - "$json" "$reason_pattern" "$server_pid" "$client_pid" "$CLIENT_BYTES" "$SERVER_BYTES" "$path" <<'PY'
import json, re, sys
document, pattern = json.load(open(sys.argv[1])), sys.argv[2]
server_pid, client_pid, client_bytes, server_bytes = map(int, sys.argv[3:7])
path = sys.argv[7]

def check_bytes(pid, direction, counts, total, offloaded_exactly):
    if counts["total"] != total or counts["tcp"] + counts["offloaded"] != total:
        problems.append(f"pid {pid}: {direction} {counts}, total should be {total}")
    elif path == "kernel" and counts["offloaded"] != 0:
        problems.append(f"pid {pid}: {direction} {counts} on the kernel path")
    elif path == "shm" and offloaded_exactly and counts["offloaded"] != total:
        problems.append(f"pid {pid}: {direction} {counts} should all be offloaded")

problems = []
by_pid = {p["pid"]: p for p in document["processes"]}
expect = {server_pid: ("server", server_bytes, client_bytes), client_pid: ("client", client_bytes, server_bytes)}
for pid, (role, sent, received) in expect.items():
    process = by_pid.get(pid)
    if process is None:
        problems.append(f"pid {pid} ({role}) is not listed")
        continue
    if process["program"] != "python3":
        problems.append(f"pid {pid}: program {process['program']!r}")
    rows = [c for c in process["connections"] if c["role"] == role]
    if len(rows) != 1:
        problems.append(f"pid {pid}: {len(rows)} {role} connections: {process['connections']}")
        continue
    row = rows[0]
    if row["path"] != path: problems.append(f"pid {pid}: path {row['path']}, expected {path}")
    if not re.search(pattern, row["reason"]): problems.append(f"pid {pid}: reason {row['reason']!r} !~ {pattern!r}")
    check_bytes(pid, "sent", row["sent"], sent, role == "server")
    check_bytes(pid, "received", row["received"], received, role == "client")
    if row["pids"] != [pid]: problems.append(f"pid {pid}: pids {row['pids']}")
    if not re.fullmatch(r"127\.0\.0\.1:\d+", row["local"]) or not re.fullmatch(r"127\.0\.0\.1:\d+", row["peer"]):
        problems.append(f"pid {pid}: endpoints {row['local']} {row['peer']}")
if not problems:
    s = [c for c in by_pid[server_pid]["connections"] if c["role"] == "server"][0]
    c = [c for c in by_pid[client_pid]["connections"] if c["role"] == "client"][0]
    if (s["local"], s["peer"]) != (c["peer"], c["local"]): problems.append("the two rows are not one connection")
print("; ".join(problems))
PY
  ) || result="the JSON check itself failed"
  if [[ -z "$result" ]]; then pass "$description"; else fail "$description: $result"; fi
}

# run_case NAME PATH REASON_PATTERN QPSOCK-RUN-OPTIONS...
run_case() {
  local name=$1 path=$2 pattern=$3 status=0
  shift 3
  local port_file=$TEST_TMP/$name.port release=$TEST_TMP/$name.release
  start_background "server.$name" "$QPSOCK_RUN" --library "$QPSOCK_LIBRARY" "$@" -- \
    python3 "$TEST_TMP/pair.py" server "$port_file" "$release" "$CLIENT_BYTES" "$SERVER_BYTES"
  start_background "client.$name" "$QPSOCK_RUN" --library "$QPSOCK_LIBRARY" "$@" -- \
    python3 "$TEST_TMP/pair.py" client "$port_file" "$release" "$CLIENT_BYTES" "$SERVER_BYTES"
  local deadline=$((SECONDS + 30))
  until grep -q exchanged "$(background_log "server.$name")" "$(background_log "client.$name")" 2>/dev/null &&
    [[ $(grep -l exchanged "$(background_log "server.$name")" "$(background_log "client.$name")" | wc -l) == 2 ]]; do
    ((SECONDS < deadline)) || { fail "$name: the pair did not exchange its bytes in 30s"; touch "$release"; return; }
    sleep 0.05
  done
  local server_pid client_pid
  server_pid=$(program_pid "server.$name")
  client_pid=$(program_pid "client.$name")
  with_timeout 20 "$STAT" --json >"$TEST_TMP/$name.json" || status=$?
  assert_equal "$name: qpsock-stat --json exit status" 0 "$status"
  check_rows "$TEST_TMP/$name.json" "$name: both processes, one $path connection, exact bytes" \
    "$pattern" "$server_pid" "$client_pid" "$path"
  # --pid keeps just that process.
  with_timeout 20 "$STAT" --json --pid "$client_pid" >"$TEST_TMP/$name.pid.json"
  assert_equal "$name: --pid lists one process" "$client_pid" \
    "$(python3 -c 'import json,sys; print(",".join(str(p["pid"]) for p in json.load(open(sys.argv[1]))["processes"]))' "$TEST_TMP/$name.pid.json")"
  # The table names the program and the path.
  with_timeout 20 "$STAT" >"$TEST_TMP/$name.table"
  check "$name: the table shows pid, program and path" \
    grep -Eq "^PID $server_pid +python3" "$TEST_TMP/$name.table"
  # Offloaded bytes show after a '+': "0+654321".
  # The client's bytes may be split across the switch: "100000+23457".
  local server_sent=$SERVER_BYTES server_received=$CLIENT_BYTES
  [[ $path == shm ]] && server_sent="0\+$SERVER_BYTES" server_received="[0-9]+(\+[0-9]+)?"
  check "$name: the table shows the $path row" \
    grep -Eq "server +$path +$server_sent +$server_received " "$TEST_TMP/$name.table"
  touch "$release"
  wait_background "server.$name" || status=$?
  assert_equal "$name: server exit status" 0 "$status"
  wait_background "client.$name" || status=$?
  assert_equal "$name: client exit status" 0 "$status"
  assert_equal "$name: statistics files left after exit" "" "$(ls -A "$QPSOCK_STAT_DIR")"
}

printf 'kernel both any\n' >"$TEST_TMP/kernel.conf"
run_case kernel-rule kernel "^rule 1 \\($TEST_TMP/kernel\\.conf:1\\): kernel$" -c "$TEST_TMP/kernel.conf"
run_case no-offload kernel "^QPSOCK_OFFLOAD=0: kernel$" --no-offload
# The default configuration offloads; both ends run qpsock on one host.
run_case same-host shm "^upgraded to shared memory$"

# A program killed with SIGKILL cannot remove its file; qpsock-stat does, and
# does not list the dead process.
start_background killed "$QPSOCK_RUN" --library "$QPSOCK_LIBRARY" --no-offload -- \
  python3 "$TEST_TMP/pair.py" server "$TEST_TMP/killed.port" "$TEST_TMP/never" 1 1
start_background killed-client "$QPSOCK_RUN" --library "$QPSOCK_LIBRARY" --no-offload -- \
  python3 "$TEST_TMP/pair.py" client "$TEST_TMP/killed.port" "$TEST_TMP/never" 1 1
deadline=$((SECONDS + 30))
until [[ $(ls -A "$QPSOCK_STAT_DIR" | wc -l) == 2 ]] || ((SECONDS >= deadline)); do sleep 0.05; done
for name in killed killed-client; do
  pid=$(program_pid "$name")
  kill -KILL "$pid"
  wait_background "$name" || true
done
assert_equal "files left by killed programs" 2 "$(ls -A "$QPSOCK_STAT_DIR" | wc -l)"
with_timeout 20 "$STAT" --json >"$TEST_TMP/killed.json"
assert_equal "killed programs are not listed" 0 \
  "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["processes"]))' "$TEST_TMP/killed.json")"
assert_equal "qpsock-stat removed their files" "" "$(ls -A "$QPSOCK_STAT_DIR")"

# No process at all: still exit 0, and an empty list.
status=0
output=$(with_timeout 20 "$STAT" --json) || status=$?
assert_equal "no processes: exit status" 0 "$status"
check "no processes: an empty list" grep -q '"processes":\[' <<<"$output"
check "--help exits 0" with_timeout 10 "$STAT" --help
assert_status "a bad option exits 2" 2 with_timeout 10 "$STAT" --bogus
finish
