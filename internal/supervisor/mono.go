package supervisor

import "time"

// monoOf is t on the host's shared monotonic clock (monoNow), rounded
// down: the clock is read before the time left until t, so a pause in
// between makes the result earlier, never later.
func monoOf(t time.Time) int64 {
	now := monoNow()
	return now + int64(time.Until(t))
}
