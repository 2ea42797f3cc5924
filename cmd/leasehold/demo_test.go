package main

import "testing"

// TestRerunAfterKill: the demo accepts a second completion of an
// occurrence only as the retry of a run the killed daemon completed but
// could not record.
func TestRerunAfterKill(t *testing.T) {
	victim := demoLine{instance: "demo-3"}
	end := func(inst string, token, attempt int) demoLine {
		return demoLine{event: "end", instance: inst, token: token, attempt: attempt}
	}
	for _, c := range []struct {
		name string
		ends []demoLine
		want bool
	}{
		{"retry after the kill", []demoLine{end("demo-3", 3, 1), end("demo-2", 11, 2)}, true},
		{"once", []demoLine{end("demo-3", 3, 1)}, false},
		{"two live runners", []demoLine{end("demo-1", 3, 1), end("demo-2", 11, 2)}, false},
		{"same attempt twice", []demoLine{end("demo-3", 3, 1), end("demo-2", 11, 1)}, false},
		{"token not greater", []demoLine{end("demo-3", 3, 1), end("demo-2", 3, 2)}, false},
		{"three runs", []demoLine{end("demo-3", 3, 1), end("demo-2", 11, 2), end("demo-1", 12, 3)}, false},
	} {
		if got := rerunAfterKill(c.ends, victim); got != c.want {
			t.Errorf("%s: rerunAfterKill = %v, want %v", c.name, got, c.want)
		}
	}
}
