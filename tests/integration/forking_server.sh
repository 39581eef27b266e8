#!/usr/bin/env bash
# A server that forks a child per connection (bench/fork_server: the child
# reads a 64-byte request, answers its complement, _exits): 300 connections
# one after another, each answer checked by the client. Under qpsock the
# server's own process never does I/O on a connection it accepted, and so
# must stay single-threaded: a second thread makes glibc's fork take and give
# back malloc's and stdio's locks at every fork, and each of those writes
# copies a page in both processes (docs/upgrade-protocol.md).
# usage: forking_server.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
program=$QPSOCK_BINARY_DIR/bench/fork_server
[[ -x $program ]] || die "no $program (build the bench targets)"

for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  start_server "$runner" "server.$tag" "$program" server --port @PORT@ || continue
  port=$SERVER_PORT
  status=0
  run_under "$runner" 60 "$program" client --port "$port" --connections 300 \
    >"$TEST_TMP/client.$tag" 2>"$LOG_DIR/client.$tag.log" || status=$?
  assert_equal "300 connections answered and checked ($runner)" 0 "$status"
  server=$(program_pid "server.$tag") || server=""
  threads=$(ls "/proc/$server/task" 2>/dev/null | wc -l)
  assert_equal "the forking server's threads after 300 connections ($runner)" 1 "$threads"
  stop_background "server.$tag"
done
finish
