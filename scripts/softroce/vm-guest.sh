#!/bin/bash
# Stage 2 of the vm-run guest: runs inside the VM, chrooted into the host's
# read-only root, as a child of the initramfs /init (which powers the VM off
# when this script returns).  vm-run copies it into the run directory, which
# is mounted at /run/vmrun, together with:
#   config  SHARES=(...) HOST_CWD=... CMD=...
#   env     export lines for COMMAND
#   local-rxe  the same Soft-RoCE setup script local mode uses
# and reads back: stdout, stderr, rc, setup.log, setup.failed, boot_seconds.
R=/run/vmrun
exec </dev/null >>"$R/setup.log" 2>&1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

fail() { echo "vm-guest: $*"; touch "$R/setup.failed"; exit 1; }

# shellcheck source=/dev/null
source "$R/config" || fail "cannot read $R/config"

# The host root is read-only: everything a program may write to needs its
# own tmpfs.  /tmp and /dev/shm matter most (TMPDIR, POSIX shm).
mount -t proc proc /proc || fail "mount /proc"
mount -t sysfs sysfs /sys || fail "mount /sys"
mount -t devtmpfs devtmpfs /dev || fail "mount /dev"
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts || fail "mount /dev/pts"
mount -t tmpfs -o mode=1777 tmpfs /dev/shm || fail "mount /dev/shm"
mount -t tmpfs -o mode=1777 tmpfs /tmp || fail "mount /tmp"
mount -t tmpfs -o mode=1777 tmpfs /var/tmp || fail "mount /var/tmp"
# devtmpfs lacks the usual symlinks; bash process substitution needs /dev/fd.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
[[ -e /dev/ptmx ]] || ln -sf pts/ptmx /dev/ptmx
hostname qpsock-vm 2>/dev/null || true

# Writable shares go at the same absolute path as on the host, over the
# read-only copy the root share shows there, so a build tree configured on
# the host (absolute paths in CMake caches, RPATHs) works unchanged.  A path
# under /tmp only exists on the fresh tmpfs after mkdir.
# cache=mmap: no data caching (host edits show up at once) but shared
# writable mmap works, which plain cache=none refuses.
for i in "${!SHARES[@]}"; do
    mkdir -p "${SHARES[i]}" 2>/dev/null
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=mmap \
        "share$i" "${SHARES[i]}" || fail "mount share$i at ${SHARES[i]}"
done

ip link set lo up || fail "lo up"
bash "$R/local-rxe" up || fail "local-rxe up failed"
touch "$R/setup.done"
cut -d' ' -f1 /proc/uptime > "$R/boot_seconds"

# The command.  A subshell so the exported environment, cwd and ulimit stay
# its own; output appended (the host already follows these files).
(
    cd -- "$HOST_CWD" 2>/dev/null || cd /
    # shellcheck source=/dev/null
    source "$R/env"
    export TMPDIR=/dev/shm      # unlink-while-open temp files break on 9p
    export HOME=${HOME:-/root}
    ulimit -l unlimited         # verbs memory registration pins pages
    exec bash -c "$CMD"
) </dev/null >>"$R/stdout" 2>>"$R/stderr"
rc=$?
# Written last and renamed into place: the host treats its presence as
# "the command finished".
echo "$rc" > "$R/rc.tmp" && mv "$R/rc.tmp" "$R/rc"
sync
