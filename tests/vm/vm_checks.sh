# vm_checks.sh: sourced by the Soft-RoCE scripts (tests/vm/*.sh) in their
# --inside part, with their name:   source "$HERE/vm_checks.sh" NAME
# Gives LOG (a temporary directory, removed at exit), PIDS (background pids,
# killed at exit), FAILS and pass/fail ("PASS:"/"FAIL:" lines on stdout, as
# the VM's console shows them).
FAILS=0
LOG=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    rm -rf "$LOG"
}
trap cleanup EXIT

pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
