package harness

import (
	"sync"
	"time"
)

// skewClock is a schedule.Clock whose rate can be changed while it runs:
// at rate r, r seconds pass on it per real second, and After(d) fires after
// d/r real seconds. Setting the rate back to 1 also returns it to real time
// (the skew episode ends). Lease timing in the library uses the real
// monotonic clock whatever this clock says; the skew reaches what the
// scheduler computes from its clock (which occurrences are due, when).
type skewClock struct {
	mu       sync.Mutex
	baseReal time.Time // real time at the last rate change
	baseVirt time.Time // this clock's time then
	rate     float64
	stepped  time.Duration // sum of Steps: rate 1 returns to real time plus this
}

func newSkewClock() *skewClock {
	now := time.Now()
	return &skewClock{baseReal: now, baseVirt: now, rate: 1}
}

func (c *skewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *skewClock) nowLocked() time.Time {
	el := time.Since(c.baseReal)
	return c.baseVirt.Add(time.Duration(float64(el) * c.rate))
}

func (c *skewClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	r := c.rate
	c.mu.Unlock()
	return time.After(time.Duration(float64(d) / r))
}

// SetRate changes the rate from now on; rate 1 returns to real time.
func (c *skewClock) SetRate(rate float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if rate == 1 {
		c.baseVirt = now.Add(c.stepped)
	} else {
		c.baseVirt = c.nowLocked()
	}
	c.baseReal, c.rate = now, rate
}

// Step moves the clock by d at once, as an NTP step or an operator's date
// command moves a wall clock; timers already handed out keep their real
// durations, as Go's do.
func (c *skewClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.baseVirt, c.baseReal = c.nowLocked().Add(d), now
	c.stepped += d
}
