#!/usr/bin/env bash
# iperf3: a server and short client runs with 4 parallel streams (-P 4), in
# reverse (-R: the server sends) and both ways at once (--bidir). Byte counts
# differ between runs, so the check is that every run succeeds with sane
# totals, read from iperf3's JSON report (-J): no error, the expected number
# of streams, bytes moved in every direction and received <= sent.
# The server runs under the runner too.
# usage: iperf3.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools iperf3 python3

IPERF_SECONDS=${IPERF_SECONDS:-2}

# check_report FILE STREAMS MODE: validates one JSON report, prints a summary.
check_report() {
  with_timeout 10 python3 - "$@" <<'PYTHON'
import json, sys
path, streams, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path) as f:
    report = json.load(f)
problems = []
if "error" in report:
    problems.append("iperf3 error: " + str(report["error"]))
end = report.get("end", {})
test_start = report.get("start", {}).get("test_start", {})
if mode == "reverse" and test_start.get("reverse") != 1:
    problems.append("the report is not of a reverse (-R) test")
if mode == "bidir" and "sum_sent_bidir_reverse" not in end:
    problems.append("the report is not of a --bidir test")
connected = len(report.get("start", {}).get("connected", []))
if connected != streams:
    problems.append(f"{connected} data connections, expected {streams}")
pairs = [("sum_sent", "sum_received")]
if mode == "bidir":
    pairs.append(("sum_sent_bidir_reverse", "sum_received_bidir_reverse"))
summary = []
for sent_key, received_key in pairs:
    sent = end.get(sent_key, {}).get("bytes", 0)
    received = end.get(received_key, {}).get("bytes", 0)
    if sent <= 0 or received <= 0:
        problems.append(f"{sent_key}={sent} {received_key}={received}: nothing moved")
    elif received > sent:
        problems.append(f"received {received} bytes, more than the {sent} sent")
    elif received < sent // 2:
        problems.append(f"received only {received} of {sent} bytes sent")
    seconds = end.get(received_key, {}).get("seconds", 0) or 1
    summary.append(f"{received / 1e6:.0f} MB at {received * 8 / seconds / 1e9:.1f} Gbit/s")
if problems:
    print("; ".join(problems))
    sys.exit(1)
print(", ".join(summary))
PYTHON
}

iperf_run() {
  local runner=$1 port=$2 tag=$3 mode=$4 streams=$5
  shift 5
  local report=$LOG_DIR/iperf3-client.$tag.$mode.json status=0 verdict
  run_under "$runner" $((IPERF_SECONDS + 20)) iperf3 -c 127.0.0.1 -p "$port" -t "$IPERF_SECONDS" \
    -J "$@" >"$report" 2>"$LOG_DIR/iperf3-client.$tag.$mode.err" || status=$?
  if ((status != 0)); then
    fail "iperf3 $mode ($runner): client exit status $status"
    return
  fi
  if verdict=$(check_report "$report" "$streams" "$mode"); then
    pass "iperf3 $mode ($runner): $verdict"
  else
    fail "iperf3 $mode ($runner): $verdict"
  fi
}

for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  start_server "$runner" "iperf3-server.$tag" iperf3 -s -B 127.0.0.1 -p @PORT@ || continue
  port=$SERVER_PORT
  iperf_run "$runner" "$port" "$tag" parallel 4 -P 4
  iperf_run "$runner" "$port" "$tag" reverse 1 -R
  iperf_run "$runner" "$port" "$tag" bidir 2 --bidir
  if background_running "iperf3-server.$tag"; then
    pass "iperf3 server ($runner) still running after the tests"
  else
    fail "iperf3 server ($runner) exited early"
  fi
  stop_background "iperf3-server.$tag"
done
finish
