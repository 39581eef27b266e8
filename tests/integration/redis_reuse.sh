#!/usr/bin/env bash
# redis-server and redis-benchmark, a fresh server each run: redis closes the
# SET phase's connections and the GET phase's accepts reuse their numbers at
# once, while qpsock's helper threads may still hold the old connections
# (issue: a doorbell read on the reused number took a GET request, and the
# benchmark hung). Every run must finish within its timeout, every request
# answered; a key of 1 MiB written and read back must match by sha256.
# REDIS_RUNS (default 6) runs per runner; REDIS_BENCH_ARGS (default
# "-c 8") picks the clients or pipelining ("-c 50", "-P 16").
# usage: redis_reuse.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools redis-server redis-benchmark redis-cli

runs=${REDIS_RUNS:-6}
read -r -a bench_args <<<"${REDIS_BENCH_ARGS:--c 8}"
value=$TEST_TMP/value
head -c 1048576 /dev/urandom | base64 -w0 >"$value"

for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  finished=0
  for ((run = 1; run <= runs; run++)); do
    port=$(free_port)
    name="redis.$tag.$run"
    start_under "$runner" "$name" redis-server --port "$port" --bind 127.0.0.1 --save "" \
      --appendonly no --dir "$TEST_TMP"
    if ! wait_for_port "$port" 20 "$name"; then
      fail "redis-server ($runner) run $run is not listening on port $port"
      stop_background "$name"
      continue
    fi
    output=$TEST_TMP/bench.$tag.$run
    if ! run_under "$runner" 60 redis-benchmark -h 127.0.0.1 -p "$port" -n 20000 -d 1024 \
      -t set,get -q "${bench_args[@]}" >"$output" 2>&1; then
      fail "redis-benchmark ${bench_args[*]} ($runner) run $run did not finish: $(tail -c 300 "$output")"
      stop_background "$name"
      continue
    fi
    if [[ $(grep -c 'requests per second' "$output") -ne 2 ]]; then
      fail "redis-benchmark ($runner) run $run did not report both phases: $(tail -c 300 "$output")"
    else
      finished=$((finished + 1))
    fi
    if ((run == 1)); then
      run_under "$runner" 30 redis-cli -h 127.0.0.1 -p "$port" -x set big <"$value" >/dev/null
      run_under "$runner" 30 redis-cli -h 127.0.0.1 -p "$port" --raw get big |
        head -c "$(stat -c %s "$value")" >"$TEST_TMP/value.back"
      assert_same_checksum "1 MiB value through redis ($runner)" "$value" "$TEST_TMP/value.back"
    fi
    stop_background "$name"
  done
  check "redis-benchmark ${bench_args[*]} ($runner): $finished of $runs runs finished" \
    test "$finished" -eq "$runs"
done
finish
