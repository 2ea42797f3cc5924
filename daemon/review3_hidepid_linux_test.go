package daemon

import (
	"os"
	"strconv"
	"testing"
)

// TestReview3HiddenLiveHolderIsNotGone: kill(pid, 0) = EPERM proves the
// holder is alive (it exists, another user's). processGone then reads
// /proc/<pid>/stat, and on a /proc mounted hidepid=2 / hidepid=invisible
// (systemd ProtectProc=invisible, hardened hosts) another user's process
// reads as ENOENT, which processGone takes for "no longer exists": a
// daemon started as another user (the default instance id is the host
// name) releases the live holder's instance lease and runs beside it.
//
// Needs a live process of another user: run as an unprivileged user in a
// mount namespace whose /proc is mounted hidepid=2, with LH_R3_PID and
// LH_R3_START naming a root process and its start ticks, e.g.
//
//	sleep 600 & pid=$!; start=$(awk '{print $22}' /proc/$pid/stat)
//	go test -c -o /tmp/daemon.test ./daemon/
//	unshare -m sh -c "mount -t proc -o hidepid=2 proc /proc &&
//	  LH_R3_PID=$pid LH_R3_START=$start setpriv --reuid=65534 --regid=65534 --clear-groups \
//	  /tmp/daemon.test -test.run TestReview3HiddenLiveHolderIsNotGone -test.v"
func TestReview3HiddenLiveHolderIsNotGone(t *testing.T) {
	pid, err1 := strconv.Atoi(os.Getenv("LH_R3_PID"))
	start, err2 := strconv.ParseUint(os.Getenv("LH_R3_START"), 10, 64)
	if err1 != nil || err2 != nil {
		t.Skip("set LH_R3_PID and LH_R3_START (see the comment) to run")
	}
	if gone, why := processGone(pid, start); gone {
		t.Fatalf("live holder pid %d (another user's, hidden by hidepid) judged gone: %s", pid, why)
	}
}
