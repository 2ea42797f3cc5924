package ctxgrace_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/internal/ctxgrace"
)

func TestOutlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		ctx, cancel := ctxgrace.Outlive(parent, 3*time.Second)
		defer cancel()
		if ctx.Value(key{}) != "v" {
			t.Fatal("the caller's values are not carried")
		}
		time.Sleep(time.Hour)
		if ctx.Err() != nil {
			t.Fatal("ended while its caller's context was live")
		}
		cancelParent()
		start := time.Now()
		time.Sleep(3*time.Second - time.Nanosecond)
		if ctx.Err() != nil {
			t.Fatalf("ended %v after its caller's context, before the 3 s grace", time.Since(start))
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if ctx.Err() == nil {
			t.Fatal("still live 3 s after its caller's context ended")
		}
	})
}

func TestOutliveCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := ctxgrace.Outlive(context.Background(), time.Second)
		cancel()
		if ctx.Err() == nil {
			t.Fatal("cancel did not end it")
		}
		cancel() // twice is harmless
	})
}
