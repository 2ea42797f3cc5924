package eventually

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	var n atomic.Int32
	if !Within(10*time.Second, func() bool { return n.Add(1) >= 5 }) {
		t.Fatal("a condition that becomes true after 5 polls was not seen")
	}
	if n.Load() != 5 {
		t.Fatalf("cond called %d times after it held at the 5th", n.Load())
	}
	polls := 0
	if Within(30*time.Millisecond, func() bool { polls++; return false }) {
		t.Fatal("a condition never true was reported true")
	}
	if polls < 2 {
		t.Fatalf("a false condition was polled %d times in 30ms; want it polled again before the deadline", polls)
	}
}
