#!/usr/bin/env bash
# curl against python3 -m http.server: files of 0 B, 1 B, 1 MiB and 50 MiB of
# random data, fetched by several curls at once (two per file, plus one curl
# fetching every file in one run); each copy must match its original by
# sha256. Server and clients both run under the runner.
# usage: curl_http_server.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools curl python3

LARGE_SIZE=${LARGE_SIZE:-50M}
SERVED=$TEST_TMP/served
mkdir -p "$SERVED"
: >"$SERVED/empty.bin"
random_file "$SERVED/one.bin" 1
random_file "$SERVED/mib.bin" 1M
random_file "$SERVED/large.bin" "$LARGE_SIZE"
FILES=(empty.bin one.bin mib.bin large.bin)

CURL_OPTIONS=(--fail --silent --show-error --http1.1 --noproxy '*' --connect-timeout 10 --max-time 40)

for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  out=$TEST_TMP/out.$tag
  mkdir -p "$out"
  start_server "$runner" "http-server.$tag" python3 -u -m http.server --bind 127.0.0.1 --directory "$SERVED" @PORT@ ||
    continue
  port=$SERVER_PORT

  # Every download at once: two curls per file and one curl fetching them all.
  jobs=()
  for file in "${FILES[@]}"; do
    for copy in 1 2; do
      start_under "$runner" "curl.$tag.$file.$copy" curl "${CURL_OPTIONS[@]}" \
        -o "$out/$file.$copy" "http://127.0.0.1:$port/$file"
      jobs+=("curl.$tag.$file.$copy")
    done
  done
  all_arguments=()
  for file in "${FILES[@]}"; do all_arguments+=(-o "$out/$file.all" "http://127.0.0.1:$port/$file"); done
  start_under "$runner" "curl.$tag.all" curl "${CURL_OPTIONS[@]}" "${all_arguments[@]}"
  jobs+=("curl.$tag.all")

  for job in "${jobs[@]}"; do
    status=0
    wait_background "$job" || status=$?
    assert_equal "${job%%.*} ${job#*."$tag".} ($runner)" 0 "$status"
  done
  for file in "${FILES[@]}"; do
    for copy in 1 2 all; do
      assert_same_checksum "GET /$file, copy $copy ($runner)" "$SERVED/$file" "$out/$file.$copy"
    done
  done
  if background_running "http-server.$tag"; then
    pass "http.server ($runner) still running after the downloads"
  else
    fail "http.server ($runner) exited early"
  fi
  stop_background "http-server.$tag"
  rm -rf "$out"
done
finish
