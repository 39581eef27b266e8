#!/usr/bin/env bash
# socat and netcat: bulk data over one connection, byte for byte.
#  - socat: 100 MB of random data each way at the same time over one
#    connection (the client sends file A, the server file B); both received
#    files must match the originals by sha256.
#  - nc (netcat-openbsd): one direction, the client half-closing with -N, over
#    127.0.0.1 and ::1.
# Client and server both run under the runner.
# usage: socat_nc.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools socat nc

SOCAT_SIZE=${SOCAT_SIZE:-100M}
NC_SIZE=${NC_SIZE:-32M}

random_file "$TEST_TMP/a.bin" "$SOCAT_SIZE"
random_file "$TEST_TMP/b.bin" "$SOCAT_SIZE"
random_file "$TEST_TMP/nc.bin" "$NC_SIZE"

socat_both_ways() {
  local runner=$1 tag port status=0
  tag=$(runner_tag "$runner")
  local server_got=$TEST_TMP/socat-server-got-a.$tag client_got=$TEST_TMP/socat-client-got-b.$tag
  # -t: after EOF one way, wait for the other way to finish too.
  start_server "$runner" "socat-server.$tag" socat -d -t 45 -T 45 \
    "TCP-LISTEN:@PORT@,bind=127.0.0.1,reuseaddr" "OPEN:$TEST_TMP/b.bin,rdonly!!CREATE:$server_got" || return 0
  port=$SERVER_PORT
  run_under "$runner" 50 socat -d -t 45 -T 45 \
    "OPEN:$TEST_TMP/a.bin,rdonly!!CREATE:$client_got" "TCP:127.0.0.1:$port" \
    >"$LOG_DIR/socat-client.$tag.log" 2>&1 || status=$?
  assert_equal "socat client ($runner)" 0 "$status"
  status=0
  wait_background "socat-server.$tag" || status=$?
  assert_equal "socat server ($runner)" 0 "$status"
  assert_same_checksum "socat $SOCAT_SIZE client->server ($runner)" "$TEST_TMP/a.bin" "$server_got"
  assert_same_checksum "socat $SOCAT_SIZE server->client ($runner)" "$TEST_TMP/b.bin" "$client_got"
  rm -f "$server_got" "$client_got"
}

nc_one_way() {
  local runner=$1 family=$2 address=$3 tag port status=0
  tag=$(runner_tag "$runner").$family
  local got=$TEST_TMP/nc-got.$tag
  # shellcheck disable=SC2016 # expanded by that sh
  start_server "$runner" "nc-server.$tag" sh -c 'exec nc "$@" >"$0"' "$got" "-$family" -l "$address" @PORT@ ||
    return 0
  port=$SERVER_PORT
  # shellcheck disable=SC2016 # expanded by that sh
  run_under "$runner" 30 sh -c 'exec nc "$@" <"$0"' "$TEST_TMP/nc.bin" "-$family" -N "$address" "$port" \
    >"$LOG_DIR/nc-client.$tag.log" 2>&1 || status=$?
  assert_equal "nc -N client over $address ($runner)" 0 "$status"
  status=0
  wait_background "nc-server.$tag" || status=$?
  assert_equal "nc -l server on $address ($runner)" 0 "$status"
  assert_same_checksum "nc $NC_SIZE over $address ($runner)" "$TEST_TMP/nc.bin" "$got"
  rm -f "$got"
}

for runner in "${RUNNERS[@]}"; do
  socat_both_ways "$runner"
  nc_one_way "$runner" 4 127.0.0.1
  nc_one_way "$runner" 6 ::1
done
finish
