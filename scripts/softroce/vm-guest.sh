#!/bin/bash
# Stage 2 of the vm-run guest: runs inside the VM, chrooted into the host's
# read-only root, as a child of the initramfs /init (which powers the VM off
# when this script returns).  vm-run copies it into the run directory, which
# is mounted at /run/vmrun, together with:
#   config  SHARES=(...) HOST_CWD=... CMD=...
#   fstab   everything to mount
#   env     export lines for COMMAND
#   local-rxe  the same Soft-RoCE setup script local mode uses
# and reads back: stdout, stderr, rc, setup.log, setup.failed, setup.done.
R=/run/vmrun
exec </dev/null >>"$R/setup.log" 2>&1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

fail() { echo "vm-guest: $*"; : > "$R/setup.failed"; exit 1; }

# shellcheck source=/dev/null
source "$R/config" || fail "cannot read $R/config"

# Every process costs ~0.1 s in the TCG guest, so all mounts happen in one
# "mount -a" over an fstab vm-run wrote (X-mount.mkdir creates the targets):
#  - proc, sys, dev (the same devtmpfs instance stage 1 put /dev/fd & co in);
#  - tmpfs on /tmp, /dev/shm, /var/tmp: the host root is read-only;
#  - the writable shares at their host paths, over the read-only copy the
#    root share shows there, so a build tree configured on the host
#    (absolute paths in CMake caches, RPATHs) works unchanged.  cache=mmap:
#    no data caching (host edits show at once) but shared writable mmap
#    works, which cache=none refuses.
mount -a -T "$R/fstab" || fail "mount -a -T $R/fstab failed"

bash "$R/local-rxe" up || fail "local-rxe up failed"
: > "$R/setup.done"     # its mtime tells the host how long boot+setup took

# The command.  A subshell so the exported environment, cwd and ulimit stay
# its own; output appended (the host already follows these files).
(
    cd -- "$HOST_CWD" 2>/dev/null || cd /
    # shellcheck source=/dev/null
    source "$R/env"
    export TMPDIR=/dev/shm      # unlink-while-open temp files break on 9p
    export HOME=/root           # read-only, like the rest of the root
    ulimit -l unlimited         # verbs memory registration pins pages
    exec bash -c "$CMD"
) </dev/null >>"$R/stdout" 2>>"$R/stderr"
# The host treats the presence of rc as "the command finished" (it reads it
# only after qemu has exited, so no atomic rename is needed).
echo $? > "$R/rc"
