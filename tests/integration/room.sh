#!/usr/bin/env bash
# The room a writer gets with nobody reading (room_probe): for each writer
# (client, server) and buffer setting (the defaults, SO_SNDBUF and SO_RCVBUF
# 64 KiB), the writer writes non-blocking until EAGAIN; then it must not be
# writable, every byte must be read back intact, and it must be writable
# again; under qpsock, the connection upgraded (shared memory). With both
# runners, each qpsock figure must be at least the kernel's: the peer's
# ring, and then its receive backlog (docs/stream-engine.md, "Room").
# usage: room.sh [RUNNER...]   (see lib.sh; default: plain qpsock)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_runners "$@"
require_program room_probe

program=$QPSOCK_PROGRAMS_DIR/room_probe
declare -A room
for runner in "${RUNNERS[@]}"; do
  for buffers in default 64K; do
    # The upgrade begins shm_upgrade_delay (50 ms) after the server's first
    # read: settled before the writer fills the room, which is the upgraded
    # connection's here.
    options=(--settle 150)
    [[ $buffers == 64K ]] && options+=(--sndbuf 65536 --rcvbuf 65536)
    for writer in client server; do
      [[ $writer == server ]] && options+=(--server-writes)
      out=$TEST_TMP/room.$(runner_tag "$runner").$buffers.$writer
      status=0
      run_under "$runner" 60 env QPSOCK_LOG_LEVEL=info QPSOCK_LOG_FILE="$out.log" \
        "$program" --port "$(free_port)" "${options[@]}" >"$out" || status=$?
      bytes=$(sed -n 's/^room \([0-9]*\) .*/\1/p' "$out")
      room[$runner.$buffers.$writer]=${bytes:-0}
      # Under qpsock both ends' logs say the connection was upgraded.
      upgrades=$(cat "$out.log" 2>/dev/null | grep -c "upgraded to shared memory" || true)
      expected=0
      runner_loads_qpsock "$runner" && expected=2
      check "$runner, $buffers buffers, the $writer writes: ${bytes:-no} bytes of room, then not writable; read back intact, then writable ($upgrades ends upgraded)" \
        test "$status" -eq 0 -a -n "$bytes" -a "$(grep -c "^room $bytes writable-at-eagain no writable-after-read yes$" "$out")" -eq 1 \
        -a "$(grep -c "^read $bytes intact$" "$out")" -eq 1 -a "$upgrades" -eq "$expected"
    done
  done
done
if [[ -n ${room[plain.default.client]:-} && -n ${room[qpsock.default.client]:-} ]]; then
  for key in default.client default.server 64K.client 64K.server; do
    check "room, $key: qpsock ${room[qpsock.$key]} bytes, at least the kernel's ${room[plain.$key]}" \
      test "${room[qpsock.$key]}" -ge "${room[plain.$key]}"
  done
fi
finish
