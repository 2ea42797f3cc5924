package backend_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

func TestCeilInstant(t *testing.T) {
	base := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	cases := []struct {
		t    time.Time
		want int64
	}{
		{base, base.UnixMilli()},
		{base.Add(time.Nanosecond), base.UnixMilli() + 1},
		{base.Add(time.Millisecond - 1), base.UnixMilli() + 1},
		{base.Add(time.Millisecond), base.UnixMilli() + 1},
		{time.Unix(0, -1), 0},
		{time.Unix(0, -int64(time.Millisecond)), -1},
	}
	for _, c := range cases {
		if got := backend.CeilInstant(c.t).UnixMilli(); got != c.want {
			t.Errorf("CeilInstant(%v).UnixMilli() = %d, want %d", c.t, got, c.want)
		}
	}
}
