#!/usr/bin/env bash
# curl against python3 -m http.server: files of 0 B, 1 B, 1 MiB and 50 MiB of
# random data, fetched by several curls at once (two per file, plus one curl
# fetching every file in one run); each copy must match its original by
# sha256. Server and clients both run under the runner.
# usage: curl_http_server.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools curl python3

SERVED=$TEST_TMP/served
make_served_files "$SERVED" "${LARGE_SIZE:-50M}"

for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  out=$TEST_TMP/out.$tag
  mkdir -p "$out"
  start_server "$runner" "http-server.$tag" python3 -u -m http.server --bind 127.0.0.1 --directory "$SERVED" @PORT@ ||
    continue
  port=$SERVER_PORT

  download_at_once "$runner" "$tag" "http://127.0.0.1:$port" "$SERVED" "$out" "${FILES[@]}"
  if background_running "http-server.$tag"; then
    pass "http.server ($runner) still running after the downloads"
  else
    fail "http.server ($runner) exited early"
  fi
  stop_background "http-server.$tag"
  rm -rf "$out"
done
finish
