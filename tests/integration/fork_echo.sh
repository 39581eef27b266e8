#!/usr/bin/env bash
# Fork-per-connection server: fork_echo_server accepts, forks a child that
# echoes the connection, and closes its own copy; echo_client opens several
# concurrent connections, each with a checked pseudo-random stream. Cases:
# large random writes over 127.0.0.1 and ::1, many tiny writes, and sockets
# renumbered mid-stream (dup to another number, close the first). The
# client's report (bytes and CRC-32 per connection) must have the same
# sha256 under every runner; the server must reap every child with success.
# usage: fork_echo.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_program fork_echo_server
require_program echo_client

# name, server options, client options
CASES=(
  "bulk-ipv4||-c 8 -b 8388608 -s 11"
  "bulk-ipv6|-6|-6 -c 8 -b 4194304 -s 12"
  "tiny-writes||-c 4 -b 262144 -w 64 -s 13"
  # Each socket renumbered mid-stream, its old number a readable pipe.
  "renumbered||-B -R 1048576 -c 2 -b 4194304 -s 14"
)

declare -A REFERENCE=()

for runner in "${RUNNERS[@]}"; do
  for case_spec in "${CASES[@]}"; do
    IFS='|' read -r name server_options client_options <<<"$case_spec"
    read -r -a server_options <<<"$server_options"
    read -r -a client_options <<<"$client_options"
    connections=$(sed -E 's/.*-c ([0-9]+).*/\1/' <<<"${client_options[*]}")
    tag=$(runner_tag "$runner").$name
    start_server "$runner" "server.$tag" "$QPSOCK_PROGRAMS_DIR/fork_echo_server" \
      "${server_options[@]}" -n "$connections" @PORT@ || continue
    port=$SERVER_PORT
    report=$TEST_TMP/report.$tag
    status=0
    run_under "$runner" 40 "$QPSOCK_PROGRAMS_DIR/echo_client" "${client_options[@]}" "$port" \
      >"$report" 2>"$LOG_DIR/client.$tag.log" || status=$?
    assert_equal "echo_client $name ($runner)" 0 "$status"
    assert_log_preload_state "echo_client $name" "$LOG_DIR/client.$tag.log" "$runner"
    status=0
    wait_background "server.$tag" || status=$?
    assert_equal "fork_echo_server $name: $connections children reaped with success ($runner)" 0 "$status"
    if [[ -z "${REFERENCE[$name]:-}" ]]; then
      REFERENCE[$name]=$report
    else
      assert_same_checksum "echo_client $name report ($runner) vs ${RUNNERS[0]}" "${REFERENCE[$name]}" "$report"
    fi
  done
done
finish
