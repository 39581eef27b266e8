#!/usr/bin/env bash
# curl against nginx: a master and two workers, epoll and sendfile, serving
# files of 0 B, 1 B, 1 MiB and 50 MiB of random data to several curls at once
# (two per file, plus one curl fetching every file in one run); each copy must
# match its original by sha256. nginx's workers rewrite their own environment
# (they keep only TZ) before their first connection: qpsock's settings must
# still apply there (upgrade_proof.sh counts the workers' log lines).
# Server and clients both run under the runner.
# usage: nginx.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_tools curl nginx

SERVED=$TEST_TMP/served
make_served_files "$SERVED" "${LARGE_SIZE:-50M}"

# nginx_config PORT DIRECTORY: a configuration that keeps everything nginx
# writes in DIRECTORY. As root its workers stay root, so that they read the
# test's files and write the log the runner names.
nginx_config() {
  local port=$1 directory=$2 user=""
  (($(id -u) == 0)) && user="user root;"
  cat <<CONFIG
$user
daemon off;
worker_processes 2;
pid $directory/nginx.pid;
error_log $directory/error.log;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path $directory/body;
  proxy_temp_path $directory/proxy;
  fastcgi_temp_path $directory/fastcgi;
  uwsgi_temp_path $directory/uwsgi;
  scgi_temp_path $directory/scgi;
  server { listen 127.0.0.1:$port; root $SERVED; }
}
CONFIG
}

for runner in "${RUNNERS[@]}"; do
  tag=$(runner_tag "$runner")
  out=$TEST_TMP/out.$tag
  state=$TEST_TMP/nginx.$tag
  mkdir -p "$out" "$state"
  port=$(free_port)
  nginx_config "$port" "$state" >"$state/nginx.conf"
  # -e: the error log before the configuration is read (else /var/log/nginx).
  start_under "$runner" "nginx.$tag" nginx -c "$state/nginx.conf" -p "$state" -e "$state/error.log"
  if ! wait_for_port "$port" 20 "nginx.$tag"; then
    fail "nginx ($runner) is not listening on port $port: $(tail -n 2 "$state/error.log" 2>/dev/null)"
    continue
  fi
  assert_preload_state "nginx.$tag" "$runner"

  download_at_once "$runner" "$tag" "http://127.0.0.1:$port" "$SERVED" "$out" "${FILES[@]}"
  if background_running "nginx.$tag"; then
    pass "nginx ($runner) still running after the downloads"
  else
    fail "nginx ($runner) exited early"
  fi
  stop_background "nginx.$tag"
  rm -rf "$out"
done
finish
