package testkit

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
)

var _ io.Writer = (*Buffer)(nil)

// TestBufferConcurrent: writers and a reader at once (run with -race); every
// line written is there, whole, at the end.
func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	const writers, lines = 4, 200
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(&b, "w%d-%d\n", w, i)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			_ = b.String()
		}
	}()
	wg.Wait()
	<-done
	got := b.String()
	if n := strings.Count(got, "\n"); n != writers*lines {
		t.Fatalf("%d lines written, want %d", n, writers*lines)
	}
	for w := range writers {
		for i := range lines {
			if !strings.Contains(got, fmt.Sprintf("w%d-%d\n", w, i)) {
				t.Fatalf("line w%d-%d missing", w, i)
			}
		}
	}
}
