// Package ctxgrace gives a write that must outlive its caller's context a
// context of its own: one that is not cancelled with the caller's, but
// ends a grace period after it. Outcome records use it (a run's outcome
// written when gocron unlocks a job it is shutting down, a trigger key's
// refusal): the write goes on after the caller gave up, for a bounded
// time, so that it is neither dropped at once nor waited for without end.
package ctxgrace

import (
	"context"
	"time"
)

// Outlive returns a context with ctx's values and no deadline, which is
// not cancelled with ctx but ends grace after ctx ends, or when cancel is
// called (call it once the write is done). A timer started when ctx ends
// may call cancel again later; that is harmless.
func Outlive(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return out, func() { stop(); cancel() }
}
