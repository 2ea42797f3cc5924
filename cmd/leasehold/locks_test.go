package main

import (
	"testing"
	"time"
)

func TestRoundRemaining(t *testing.T) {
	cases := []struct{ in, want time.Duration }{
		{1234 * time.Millisecond, 1200 * time.Millisecond},
		{14960 * time.Millisecond, 15 * time.Second},
		{90*time.Minute + 31*time.Second, 91 * time.Minute},
	}
	for _, c := range cases {
		if got := roundRemaining(c.in); got != c.want {
			t.Errorf("roundRemaining(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
