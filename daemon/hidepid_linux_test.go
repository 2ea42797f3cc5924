package daemon

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// TestHiddenLiveHolderIsNotGone: kill(pid, 0) = EPERM proves the holder
// alive (another user's process). On a /proc mounted hidepid=2 (systemd
// ProtectProc=invisible) its stat then reads as ENOENT, which must not be
// taken for "no longer exists": a daemon of another user (the default
// instance id is the host name) would release the live holder's lease and
// run beside it. Found by review on a hidepid mount; judged here from the
// errors that mount gives.
func TestHiddenLiveHolderIsNotGone(t *testing.T) {
	enoent := fmt.Errorf("open /proc/42/stat: %w", os.ErrNotExist)
	for _, c := range []struct {
		name     string
		kerr     error
		now      uint64
		state    string
		serr     error
		wantGone bool
	}{
		{"hidden by hidepid", syscall.EPERM, 0, "", enoent, false},
		{"gone", syscall.ESRCH, 0, "", nil, true},
		{"exited between kill and stat", nil, 0, "", enoent, true},
		{"pid reused", nil, 7, "S", nil, true},
		{"zombie", nil, 5, "Z", nil, true},
		{"alive, other user, readable", syscall.EPERM, 5, "S", nil, false},
		{"alive", nil, 5, "S", nil, false},
	} {
		gone, why := judgeGone(42, 5, c.kerr, c.now, c.state, c.serr)
		if gone != c.wantGone {
			t.Errorf("%s: gone=%v (%s), want %v", c.name, gone, why, c.wantGone)
		}
	}
}
